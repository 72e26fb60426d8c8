"""The embedded PostgreSQL server for real: start, SQL, logical WAL, failures with the server
log, and ``streamtable postgres start|status|stop``."""

import json
import os
import pathlib
import shutil
import socket
import tempfile

import pytest
from click.testing import CliRunner

from streamtable.cli import cli
from streamtable.platform import EmbeddedPostgres, PostgresError, postgres_daemon

pytestmark = pytest.mark.integration


@pytest.fixture
def short_dir():
    """A folder the server user can reach when running as root (pytest's tmp_path is private
    to the user who runs pytest), and short enough for a unix socket path."""
    folder = tempfile.mkdtemp(prefix="st-pg-test-")
    os.chmod(folder, 0o755)
    yield pathlib.Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_session_server_is_ready_for_logical_decoding(postgres):
    assert postgres.execute("SHOW wal_level") == [("logical",)]
    assert int(postgres.execute("SHOW max_replication_slots")[0][0]) >= 4
    assert int(postgres.execute("SHOW max_wal_senders")[0][0]) >= 4
    assert postgres.execute("SHOW listen_addresses") == [("127.0.0.1",)]
    assert postgres.dsn == f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres"
    assert (postgres.socket_dir / f".s.PGSQL.{postgres.port}").exists()
    # a replication connection is accepted (what Debezium opens)
    import psycopg

    with psycopg.connect(postgres.dsn + "?replication=database", autocommit=True) as conn:
        assert conn.execute("IDENTIFY_SYSTEM").fetchone() is not None


def test_execute_and_databases(postgres):
    dsn = postgres.create_database("pg_test_db")
    assert dsn.endswith("/pg_test_db")
    assert postgres.create_database("pg_test_db") == dsn  # exists already: no error
    postgres.execute(
        "CREATE TABLE t (id int PRIMARY KEY, name text); INSERT INTO t VALUES (1, 'a')",
        database="pg_test_db",
    )
    postgres.execute("INSERT INTO t VALUES (%s, %s)", (2, "b"), database="pg_test_db")
    assert postgres.execute("SELECT id, name FROM t ORDER BY id", database="pg_test_db") == [
        (1, "a"),
        (2, "b"),
    ]
    assert postgres.execute("CREATE TABLE u (x int)", database="pg_test_db") == []


def test_stop_removes_a_temporary_folder_and_keep_restarts_with_the_data(short_dir):
    with EmbeddedPostgres() as pg:
        folder = pg.data_dir
        assert pg.startup_seconds is not None and pg.pid is not None
    assert not folder.exists()

    data = short_dir / "kept"
    with EmbeddedPostgres(data_dir=data, keep=True) as pg:
        pg.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
    with EmbeddedPostgres(data_dir=data, keep=True) as pg:
        assert pg.execute("SELECT x FROM kept") == [(42,)]
    with EmbeddedPostgres(data_dir=data) as pg:  # not kept: the cluster goes at stop
        pass
    assert not (data / "pgdata").exists()


def test_port_taken_by_a_running_server(postgres):
    with pytest.raises(PostgresError, match=rf"port {postgres.port} on 127.0.0.1 is in use"):
        EmbeddedPostgres(port=postgres.port).start()


def test_startup_failure_carries_the_server_log():
    pg = EmbeddedPostgres(settings={"shared_buffers": "not-a-size"})
    with pytest.raises(PostgresError, match=r"exited with code \d+ during startup") as err:
        pg.start()
    message = str(err.value)
    assert "postgres.log ---" in message
    assert 'invalid value for parameter "shared_buffers"' in message
    assert pg.data_dir is not None and not pg.data_dir.exists()  # cleaned up


def test_cli_start_status_stop(short_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMTABLE_POSTGRES_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = short_dir / "cli"
    try:
        started = runner.invoke(
            cli, ["postgres", "start", "--port", str(port), "--data-dir", str(data)]
        )
        assert started.exit_code == 0, started.output
        assert f"PostgreSQL started: postgresql://postgres@127.0.0.1:{port}/postgres" in (
            started.output
        )
        status = runner.invoke(cli, ["postgres", "status", "--json"])
        assert status.exit_code == 0, status.output
        info = json.loads(status.output)
        assert info["running"] and info["answers"] and info["port"] == port
        assert pathlib.Path(info["data_dir"]) == data

        again = runner.invoke(cli, ["postgres", "start"])
        assert again.exit_code == 0 and "already running" in again.output

        same_port = runner.invoke(cli, ["postgres", "start", "--port", str(port)])
        assert same_port.exit_code == 0  # the running server is reported, not started twice
    finally:
        stopped = runner.invoke(cli, ["postgres", "stop"])
    assert stopped.exit_code == 0 and "stopped PostgreSQL" in stopped.output
    status = runner.invoke(cli, ["postgres", "status"])
    assert status.exit_code == 1 and "not running" in status.output

    # restarted on the same folder: same port (remembered), data kept
    info = postgres_daemon.start_background(data_dir=data)
    try:
        assert info["port"] == port and not info["already_running"]
    finally:
        postgres_daemon.stop_background()


def test_cli_start_on_a_taken_port(tmp_path, monkeypatch, postgres):
    monkeypatch.setenv("STREAMTABLE_POSTGRES_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(cli, ["postgres", "start", "--port", str(postgres.port)])
    assert result.exit_code == 1
    assert f"port {postgres.port} on 127.0.0.1 is in use; choose another with --port" in (
        result.output
    )
