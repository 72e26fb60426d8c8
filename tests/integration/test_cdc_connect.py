"""Change data capture end to end: a real PostgreSQL server, Kafka Connect with Debezium's
PostgreSQL connector and the session's Kafka broker.  Row changes of a ``players`` table arrive
in ``<prefix>.public.players`` as Debezium envelopes (plain JSON), keyed by the primary key."""

import datetime
import json
import os
import pathlib
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from streamtable.cli import cli
from streamtable.platform import (
    ConnectError,
    EmbeddedPostgres,
    connect_daemon,
    debezium_postgres_config,
)

pytestmark = pytest.mark.integration

EPOCH = datetime.date(1970, 1, 1)
PLAYERS = [
    (1, "active", "DE", False, datetime.date(2024, 1, 2)),
    (2, "new", "FR", False, datetime.date(2024, 2, 3)),
    (3, "active", "BR", False, datetime.date(2023, 12, 31)),
]


def wait_until(condition, timeout=60.0, interval=0.2, what="condition"):
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        threading.Event().wait(interval)


def _days(day: datetime.date) -> int:
    """Debezium's default for a ``date`` column: days since 1970-01-01."""
    return (day - EPOCH).days


def _new_database(postgres) -> str:
    """A database of this test with the players table and rows."""
    name = f"cdc_{uuid.uuid4().hex[:8]}"
    postgres.create_database(name)
    postgres.execute(
        "CREATE TABLE players(id int PRIMARY KEY, status text, country text, banned boolean, "
        "registered date)",
        database=name,
    )
    for row in PLAYERS:
        postgres.execute("INSERT INTO players VALUES (%s, %s, %s, %s, %s)", row, database=name)
    return name


class TopicReader:
    """Reads one topic from its beginning; :meth:`read_until` waits on a condition."""

    def __init__(self, broker, topic: str, timeout: float = 60.0):
        self.topic = topic
        self.records: list[tuple[dict | None, dict | None]] = []
        admin = broker.admin()
        # Connect creates the topic when the first change event is sent
        wait_until(
            lambda: topic in admin.list_topics(timeout=5).topics,
            timeout,
            what=f"topic {topic} to be created",
        )
        self._consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, 0)])

    def read_until(
        self, done: Callable[[list], bool], timeout: float = 60.0
    ) -> list[tuple[dict | None, dict | None]]:
        deadline = time.monotonic() + timeout
        while not done(self.records):
            assert time.monotonic() < deadline, (
                f"condition not met within {timeout} s; records so far: {self.records}"
            )
            msg = self._consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            key = json.loads(msg.key()) if msg.key() is not None else None
            value = json.loads(msg.value()) if msg.value() is not None else None
            self.records.append((key, value))
        return self.records

    def close(self):
        self._consumer.close()


def _ops(records, op):
    return [(k, v) for k, v in records if v is not None and v["op"] == op]


def test_snapshot_update_delete_and_tombstone(postgres, kafka_connect, kafka_broker):
    database = _new_database(postgres)
    prefix = database  # unique: topics, slot and publication are this test's own
    config = debezium_postgres_config(
        postgres,
        topic_prefix=prefix,
        tables=["public.players"],
        database=database,
        drop_slot_on_stop=True,
    )
    started = time.monotonic()
    kafka_connect.create_connector(prefix, config)
    try:
        status = kafka_connect.wait_for_connector(prefix, timeout=datetime.timedelta(seconds=60))
        assert status["connector"]["state"] == "RUNNING"
        reader = TopicReader(kafka_broker, f"{prefix}.public.players")
        try:
            records = reader.read_until(lambda rs: len(_ops(rs, "r")) == len(PLAYERS))
            snapshot_s = time.monotonic() - started
            snapshot = _ops(records, "r")
            assert [k for k, _ in snapshot] == [{"id": 1}, {"id": 2}, {"id": 3}]
            for (_, value), (pid, status_, country, banned, registered) in zip(
                snapshot, PLAYERS, strict=True
            ):
                assert value["before"] is None
                assert value["after"] == {
                    "id": pid,
                    "status": status_,
                    "country": country,
                    "banned": banned,
                    "registered": _days(registered),
                }
                assert value["source"]["db"] == database
                assert value["source"]["schema"] == "public"
                assert value["source"]["table"] == "players"
                assert isinstance(value["ts_ms"], int)

            postgres.execute(
                "UPDATE players SET status = 'banned', banned = true WHERE id = 1",
                database=database,
            )
            postgres.execute("DELETE FROM players WHERE id = 2", database=database)

            def deleted_and_tombstoned(rs):
                deletes = [i for i, (_, v) in enumerate(rs) if v is not None and v["op"] == "d"]
                return bool(deletes) and any(v is None for _, v in rs[deletes[0] + 1 :])

            records = reader.read_until(deleted_and_tombstoned)
        finally:
            reader.close()
    finally:
        kafka_connect.delete_connector(prefix)

    ((update_key, update),) = _ops(records, "u")
    assert update_key == {"id": 1}
    assert update["after"] == {
        "id": 1,
        "status": "banned",
        "country": "DE",
        "banned": True,
        "registered": _days(PLAYERS[0][4]),
    }
    assert update["source"]["snapshot"] == "false"

    ((delete_key, delete),) = _ops(records, "d")
    assert delete_key == {"id": 2}
    assert delete["after"] is None
    assert delete["before"]["id"] == 2  # default replica identity: the primary key only
    index = records.index((delete_key, delete))
    assert records[index + 1] == ({"id": 2}, None), "the delete is followed by a tombstone"
    assert [op for _, v in records if v is not None for op in [v["op"]]] == [
        "r",
        "r",
        "r",
        "u",
        "d",
    ]
    print(
        f"Connect started in {kafka_connect.startup_seconds:.1f} s; snapshot arrived "
        f"{snapshot_s:.1f} s after the connector was created"
    )


def test_cli_connect_start_status_stop(postgres, kafka_broker, tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMTABLE_CONNECT_HOME", str(tmp_path / "connect"))
    database = _new_database(postgres)
    config = debezium_postgres_config(
        postgres,
        topic_prefix=database,
        tables=["public.players"],
        database=database,
        drop_slot_on_stop=True,
    )
    connector_file = tmp_path / "connector.json"
    connector_file.write_text(json.dumps({"name": "players", "config": config}))
    runner = CliRunner()
    try:
        started = runner.invoke(
            cli,
            [
                "connect",
                "start",
                "--config",
                str(connector_file),
                "--bootstrap-servers",
                kafka_broker.bootstrap_servers,
            ],
        )
        assert started.exit_code == 0, started.output
        assert "Kafka Connect started: http://127.0.0.1:" in started.output
        assert "connector 'players' created or updated" in started.output

        def players_running():
            tasks = connect_daemon.status()["connectors"].get("players", {}).get("tasks", [])
            return tasks and all(t["state"] == "RUNNING" for t in tasks)

        wait_until(players_running, what="connector 'players' and its task to run")
        shown = runner.invoke(cli, ["connect", "status"])
        assert shown.exit_code == 0
        assert "connector players: RUNNING (task 0 RUNNING)" in shown.output

        reader = TopicReader(kafka_broker, f"{database}.public.players")
        try:
            reader.read_until(lambda rs: len(_ops(rs, "r")) == len(PLAYERS))
        finally:
            reader.close()
    finally:
        stopped = runner.invoke(cli, ["connect", "stop"])
    assert stopped.exit_code == 0 and "stopped Kafka Connect" in stopped.output
    assert runner.invoke(cli, ["connect", "status"]).exit_code == 1


def test_a_connector_that_cannot_reach_its_database_is_refused(postgres, kafka_connect):
    config = debezium_postgres_config(
        postgres,
        topic_prefix=f"missing_{uuid.uuid4().hex[:6]}",
        tables=["public.players"],
        database="no_such_database",
    )
    # Connect validates the configuration (Debezium connects to the database) before creating
    with pytest.raises(
        ConnectError,
        match=r'refused POST /connectors \(HTTP 400\):(.|\n)*database "no_such_database" does not exist',
    ):
        kafka_connect.create_connector("missing-db", config)
    assert "missing-db" not in kafka_connect.connectors()
    with pytest.raises(ConnectError, match=r"HTTP 404"):
        kafka_connect.connector_status("missing-db")


def test_a_database_down_at_start_is_named_and_a_restart_loses_no_change(
    kafka_connect, kafka_broker
):
    """Database down: creating a connector is refused naming the unreachable server; a running
    connector whose database goes away retries (Debezium's ``errors.max.retries``, unlimited by
    default, restarting the task after ``retriable.restart.connector.wait.ms``) and after the
    server is back every committed change, including those made just before it stopped, is in
    the topic."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="st-pg-restart-"))
    os.chmod(folder, 0o755)
    prefix = f"restart_{uuid.uuid4().hex[:6]}"
    pg = EmbeddedPostgres(data_dir=folder / "db", keep=True).start()
    port = pg.port
    try:
        pg.execute("CREATE TABLE players(id int PRIMARY KEY, status text)")
        pg.execute("INSERT INTO players SELECT i, 'new' FROM generate_series(1, 3) AS i")
        config = debezium_postgres_config(
            pg,
            topic_prefix=prefix,
            tables=["public.players"],
            extra={"retriable.restart.connector.wait.ms": 1000},
        )
        kafka_connect.create_connector(prefix, config)
        kafka_connect.wait_for_connector(prefix)
        reader = TopicReader(kafka_broker, f"{prefix}.public.players")
        try:
            reader.read_until(lambda rs: len(_ops(rs, "r")) == 3)
            # changes committed just before the server stops: the slot keeps them
            pg.execute("UPDATE players SET status = 'active' WHERE id = 1")
            pg.execute("INSERT INTO players SELECT i, 'burst' FROM generate_series(100, 299) AS i")
            pg.stop()

            # a connector created while the database is down is refused, naming it
            with pytest.raises(
                ConnectError,
                match=rf"refused PUT /connectors/{prefix}-2/config \(HTTP 400\)"
                rf"(.|\n)*Connection to 127\.0\.0\.1:{port} refused",
            ):
                kafka_connect.put_connector_config(f"{prefix}-2", {**config, "slot.name": "x2"})
            assert f"{prefix}-2" not in kafka_connect.connectors()

            pg = EmbeddedPostgres(data_dir=folder / "db", keep=True, port=port).start()
            pg.execute("UPDATE players SET status = 'banned' WHERE id = 2")
            pg.execute("DELETE FROM players WHERE id = 3")

            def complete(records):
                final: dict[int, str | None] = {}
                for key, value in records:
                    if value is not None:
                        row = value["after"]
                        final[key["id"]] = None if row is None else row["status"]
                return (
                    final.get(1) == "active"
                    and final.get(2) == "banned"
                    and 3 in final
                    and final[3] is None
                    and all(final.get(i) == "burst" for i in range(100, 300))
                )

            reader.read_until(complete, timeout=120)
        finally:
            reader.close()
        kafka_connect.wait_for_connector(prefix)
    finally:
        for name in (prefix, f"{prefix}-2"):
            if name in kafka_connect.connectors():
                kafka_connect.delete_connector(name)
        pg.stop()
        shutil.rmtree(folder, ignore_errors=True)
