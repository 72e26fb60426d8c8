"""Kafka Connect and Debezium helpers that need no JVM: the connector configuration, the
worker properties, connector files, REST error messages and the CLI's errors."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from streamtable.cli import cli
from streamtable.errors import ConfigError
from streamtable.platform import ConnectError, KafkaConnect, debezium_postgres_config
from streamtable.platform.connect import failure_trace, rest_request, worker_config
from streamtable.platform.connect_daemon import load_connector_file, start_background
from streamtable.platform.debezium import slot_name_for

SERVER = SimpleNamespace(host="127.0.0.1", port=54321, user="postgres", database="postgres")


def test_debezium_config_for_a_table():
    cfg = debezium_postgres_config(SERVER, topic_prefix="cdc", tables=["public.players"])
    assert cfg["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert cfg["database.hostname"] == "127.0.0.1" and cfg["database.port"] == "54321"
    assert cfg["database.user"] == "postgres" and cfg["database.dbname"] == "postgres"
    assert cfg["plugin.name"] == "pgoutput"
    assert cfg["topic.prefix"] == "cdc"
    assert cfg["table.include.list"] == "public.players"
    assert cfg["slot.name"] == "debezium_cdc"
    assert cfg["publication.name"] == "debezium_cdc_pub"
    assert cfg["publication.autocreate.mode"] == "filtered"
    assert cfg["tombstones.on.delete"] == "true"
    for side in ("key", "value"):
        assert cfg[f"{side}.converter"] == "org.apache.kafka.connect.json.JsonConverter"
        assert cfg[f"{side}.converter.schemas.enable"] == "false"
    # the broker does not auto-create topics: Connect must create them
    assert cfg["topic.creation.default.partitions"] == "1"
    assert "database.password" not in cfg
    assert all(isinstance(v, str) for v in cfg.values())


def test_debezium_config_options_and_overrides():
    cfg = debezium_postgres_config(
        SERVER,
        topic_prefix="game",
        tables=["public.players", "shop.orders"],
        database="games",
        slot_name="my_slot",
        publication_name="my_pub",
        snapshot_mode="no_data",
        drop_slot_on_stop=True,
        decimal_handling="string",
        password="secret",
        extra={"heartbeat.interval.ms": 1000, "tasks.max": 1},
    )
    assert cfg["table.include.list"] == "public.players,shop.orders"
    assert cfg["database.dbname"] == "games"
    assert (cfg["slot.name"], cfg["publication.name"]) == ("my_slot", "my_pub")
    assert cfg["snapshot.mode"] == "no_data"
    assert cfg["slot.drop.on.stop"] == "true"
    assert cfg["decimal.handling.mode"] == "string"
    assert cfg["database.password"] == "secret"
    assert cfg["heartbeat.interval.ms"] == "1000"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topic_prefix": "", "tables": ["public.t"]}, r"topic_prefix '' is not usable"),
        ({"topic_prefix": "a b", "tables": ["public.t"]}, r"letters, digits, '\.', '_' and '-'"),
        ({"topic_prefix": "cdc", "tables": []}, r"tables is empty"),
        ({"topic_prefix": "cdc", "tables": ["players"]}, r"\['players'\] are not of the form"),
        ({"topic_prefix": "cdc", "tables": ["public.p.x"]}, r"'schema\.table'"),
        # "$" is a regex anchor for Debezium's table.include.list: it would capture nothing
        ({"topic_prefix": "cdc", "tables": ["public.a$b"]}, r"\['public\.a\$b'\].*'\$'"),
        (
            {"topic_prefix": "cdc", "tables": ["public.t"], "slot_name": "Bad-Slot"},
            r"slot_name 'Bad-Slot' is not a valid replication slot name",
        ),
    ],
)
def test_debezium_config_errors_say_what_to_fix(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        debezium_postgres_config(SERVER, **kwargs)


def test_a_single_table_string_is_accepted():
    cfg = debezium_postgres_config(SERVER, topic_prefix="cdc", tables="public.players")
    assert cfg["table.include.list"] == "public.players"


def test_slot_names_are_derived_safely():
    assert slot_name_for("Game-CDC.v1") == "debezium_game_cdc_v1"
    assert len(slot_name_for("x" * 100)) == 63


def test_worker_config_is_loopback_json_without_schemas(tmp_path):
    cfg = worker_config(
        "127.0.0.1:9092", 8083, tmp_path / "offsets", {"offset.flush.interval.ms": 10}
    )
    assert cfg["bootstrap.servers"] == "127.0.0.1:9092"
    assert cfg["listeners"] == "http://127.0.0.1:8083"
    assert cfg["offset.storage.file.filename"] == str(tmp_path / "offsets")
    assert cfg["key.converter.schemas.enable"] == "false"
    assert cfg["offset.flush.interval.ms"] == "10"


def test_failure_trace_names_the_failed_part():
    assert failure_trace({"connector": {"state": "RUNNING"}, "tasks": []}) is None
    assert failure_trace({"connector": {"state": "FAILED", "trace": "boom"}}) == (
        "connector FAILED: boom"
    )


def test_connect_rest_port_in_use_is_reported_before_the_jvm_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConnectError, match=rf"REST port {port} on 127.0.0.1 is in use"):
            KafkaConnect("127.0.0.1:9092", rest_port=port).start()


def test_connect_before_start_says_so():
    connect = KafkaConnect("127.0.0.1:9092")
    with pytest.raises(ConnectError, match="has not been started"):
        connect.rest_url  # noqa: B018
    with pytest.raises(ConnectError, match="is not running"):
        connect.connectors()
    with pytest.raises(ValueError, match="bootstrap_servers"):
        KafkaConnect("")


class _Refuse(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.dumps({"error_code": 409, "message": "Connector players already exists"})
        self.send_response(409)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_rest_errors_carry_connects_message():
    server = HTTPServer(("127.0.0.1", 0), _Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        with pytest.raises(
            ConnectError,
            match=r"refused POST /connectors \(HTTP 409\): Connector players already exists",
        ):
            rest_request(url, "POST", "/connectors", {"name": "players"})
    finally:
        server.shutdown()
        server.server_close()


def test_connector_files_in_both_shapes(tmp_path):
    rest = tmp_path / "rest.json"
    rest.write_text(json.dumps({"name": "players", "config": {"tasks.max": 1, "x": True}}))
    assert load_connector_file(rest) == ("players", {"tasks.max": "1", "x": "true"})
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"name": "flat", "topic.prefix": "cdc"}))
    assert load_connector_file(flat) == ("flat", {"topic.prefix": "cdc"})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"is not valid JSON"),
        ("[1, 2]", r"must hold a JSON object"),
        ('{"config": {"a": "b"}}', r'has no "name"'),
        ('{"name": "x", "config": [1]}', r'"config" .* must be a JSON object'),
    ],
)
def test_connector_file_errors(tmp_path, content, message):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_connector_file(path)
    with pytest.raises(ConfigError, match="cannot read connector file"):
        load_connector_file(tmp_path / "missing.json")


@pytest.fixture
def homes(tmp_path, monkeypatch):
    for name in ("BROKER", "POSTGRES", "CONNECT"):
        monkeypatch.setenv(f"STREAMTABLE_{name}_HOME", str(tmp_path / name.lower()))


def test_background_connect_without_a_broker_says_how_to_get_one(homes):
    with pytest.raises(ConnectError, match=r"no background Kafka broker runs.*broker start"):
        start_background()


def test_cli_connect_and_postgres_when_nothing_runs(homes):
    runner = CliRunner()
    result = runner.invoke(cli, ["connect", "start"])
    assert result.exit_code == 1
    assert "`streamtable broker start`, or give --bootstrap-servers" in result.output
    result = runner.invoke(
        cli, ["connect", "debezium-config", "--table", "public.p", "--topic-prefix", "cdc"]
    )
    assert result.exit_code == 1
    assert "start it with `streamtable postgres start`" in result.output
    for group in ("connect", "postgres"):
        status = runner.invoke(cli, [group, "status"])
        assert status.exit_code == 1 and "not running" in status.output
        assert runner.invoke(cli, [group, "stop"]).output.startswith("no background")
