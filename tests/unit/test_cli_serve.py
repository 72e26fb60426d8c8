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
