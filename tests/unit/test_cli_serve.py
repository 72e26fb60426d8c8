"""``streamtable serve``: ``run`` with ``application.server`` (no JVM: the run is captured)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streamtable import cli as cli_module

pytestmark = pytest.mark.unit


@pytest.fixture
def captured(monkeypatch):
    calls = []
    monkeypatch.setattr(cli_module.run_cmd, "callback", lambda *args: calls.append(args))
    return calls


def serve(*args):
    return CliRunner().invoke(cli_module.cli, ["serve", *args])


def test_serve_runs_the_app_with_the_query_service_on_loopback_8080_by_default(captured):
    assert serve("app:topology", "--application-id", "a").exit_code == 0
    (args,) = captured
    assert args[0] == "app:topology" and args[1] == "a"
    assert args[4] == cli_module.DEFAULT_QUERY_ADDRESS == "127.0.0.1:8080"
    assert args[-2] is False  # not --until-caught-up
    assert args[-1] == 30.0  # --shutdown-timeout


def test_serve_keeps_an_address_given_by_option_or_config(captured):
    serve("app:t", "--application-server", "0.0.0.0:9000", "--query-token", "x")
    serve("app:t", "-c", "application.server=127.0.0.1:7000")
    assert captured[0][4] == "0.0.0.0:9000" and captured[0][5] == "x"
    assert captured[1][4] is None  # left to the -c pair
    assert captured[1][6] == ("application.server=127.0.0.1:7000",)


def test_a_kafka_streams_locator_refuses_options_it_would_ignore(tmp_path, monkeypatch):
    """A KafkaStreams object carries its own config: options given next to it, and serve of
    one without application.server, used to be ignored silently (serve served nothing).
    """
    (tmp_path / "kapp.py").write_text(
        "from streamtable import KafkaStreams, StreamsBuilder\n"
        "b = StreamsBuilder()\n"
        "b.stream('in').to('out')\n"
        "streams = KafkaStreams(b.build(), {'application.id': 'a', 'bootstrap.servers': "
        "'127.0.0.1:1', 'default.key.serde': 'String', 'default.value.serde': 'String'})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run = CliRunner().invoke(
        cli_module.cli, ["run", "kapp:streams", "--state-dir", "x", "-c", "a=b"]
    )
    assert run.exit_code == 2
    assert "kapp:streams is a KafkaStreams object" in run.output
    assert "--state-dir, -c would be ignored" in run.output
    served = serve("kapp:streams")
    assert served.exit_code == 2
    assert "without application.server in its config" in served.output
