"""A table fed by change data capture: PostgreSQL → Debezium (Kafka Connect) → a streamtable
table joined with a stream. An UPDATE or DELETE in the database changes the next decision.

Real PostgreSQL, real Kafka Connect with Debezium, the session broker and Spark.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.platform import debezium_postgres_config

pytestmark = pytest.mark.integration

S, J = Serdes.string(), Serdes.json()
PLAYER = Serdes.debezium_json({"id": "string", "status": "string", "banned": "boolean"})
#: What the broker answers for a topic Kafka Connect created a moment ago: ask again.
_NOT_READY = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
}


def decide(trade, player):
    """The decision on a trade, from the player's row (None: no such player)."""
    if player is None:
        return {"trade": trade["id"], "decision": "unknown-player"}
    return {"trade": trade["id"], "decision": "blocked" if player["banned"] else "allowed"}


class Decisions:
    """Reads the decisions topic; :meth:`of` waits for one trade's decision."""

    def __init__(self, bootstrap: str, topic: str, app: KafkaStreams) -> None:
        self.app = app
        self.seen: dict[int, str] = {}
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"decisions-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])

    def of(self, trade: int, timeout_s: float = 120.0) -> str:
        deadline = time.monotonic() + timeout_s
        while trade not in self.seen:
            assert time.monotonic() < deadline, f"no decision for trade {trade}: {self.seen}"
            assert self.app.state.value != "ERROR", "the application failed"
            for m in self.consumer.consume(100, timeout=0.5):
                if m.error() is None and m.value() is not None:
                    value = json.loads(m.value())
                    self.seen[value["trade"]] = value["decision"]
        return self.seen[trade]


def _cdc_topic_has(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> None:
    """Wait until ``topic`` holds at least ``count`` records (change events and tombstones)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-end"})
    try:
        from confluent_kafka import TopicPartition

        from _support import wait_until  # not at module level (Spark's workers)

        def records() -> int:
            try:
                metadata = c.list_topics(topic, timeout=5).topics.get(topic)
                if metadata is None or metadata.error:
                    return 0
                return sum(
                    c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    for p in metadata.partitions
                )
            except KafkaException as e:  # Debezium just created the topic: no leader yet
                if e.args[0].code() in _NOT_READY:
                    return 0
                raise

        wait_until(lambda: records() >= count, timeout_s, f"{topic} to hold {count} records")
    finally:
        c.close()


def test_an_update_or_delete_in_the_database_changes_the_next_decision(
    postgres, kafka_connect, kafka_broker, spark, topic_name, app_config
):
    from _support import ensure_topics  # not at module level: Spark's workers import this module

    bs = kafka_broker.bootstrap_servers
    database = f"cdc_{uuid.uuid4().hex[:8]}"
    postgres.create_database(database)
    postgres.execute(
        "CREATE TABLE players(id text PRIMARY KEY, status text, banned boolean)",
        database=database,
    )
    for pid in ("p1", "p2", "p3"):
        postgres.execute(
            "INSERT INTO players VALUES (%s, 'active', false)", (pid,), database=database
        )
    cdc = f"{database}.public.players"
    kafka_connect.create_connector(
        database,
        debezium_postgres_config(
            postgres,
            topic_prefix=database,
            tables=["public.players"],
            database=database,
            drop_slot_on_stop=True,
        ),
    )
    trades, decisions = topic_name("trades"), topic_name("decisions")
    ensure_topics(bs, {trades: 1, decisions: 1})  # co-partitioned with the CDC topic
    app = None
    try:
        kafka_connect.wait_for_connector(database, timeout=timedelta(seconds=60))
        _cdc_topic_has(bs, cdc, 3)  # the snapshot: the topic exists, the rows are in it

        b = StreamsBuilder()
        players = b.table(
            cdc, key_serde=Serdes.debezium_key("id"), value_serde=PLAYER, name="players"
        )
        b.stream(trades, key_serde=S, value_serde=J).left_join(players, decide).to(
            decisions, value_serde=J
        )
        app = KafkaStreams(b.build(), app_config())
        app.start()
        producer = Producer({"bootstrap.servers": bs})
        reader = Decisions(bs, decisions, app)

        def trade(n: int, player: str) -> str:
            producer.produce(trades, json.dumps({"id": n}).encode(), player.encode())
            producer.flush(10)
            return reader.of(n)

        assert trade(1, "p1") == "allowed"
        assert trade(2, "p2") == "allowed"

        postgres.execute("UPDATE players SET banned = true WHERE id = 'p1'", database=database)
        _cdc_topic_has(bs, cdc, 4)  # the change event is in the topic: the next trade sees it
        assert trade(3, "p1") == "blocked"

        postgres.execute("DELETE FROM players WHERE id = 'p2'", database=database)
        _cdc_topic_has(bs, cdc, 6)  # the delete and its tombstone
        assert trade(4, "p2") == "unknown-player"
        assert trade(5, "p3") == "allowed"

        postgres.execute("INSERT INTO players VALUES ('p9', 'new', false)", database=database)
        _cdc_topic_has(bs, cdc, 7)
        assert trade(6, "p9") == "allowed"
    finally:
        if app is not None:
            app.close()
        kafka_connect.delete_connector(database)


def test_a_failed_connector_fails_the_application_naming_it(
    postgres, kafka_connect, kafka_broker, spark, topic_name, app_config
):
    from _support import ensure_topics, wait_until

    database = f"cdc_{uuid.uuid4().hex[:8]}"
    postgres.create_database(database)
    postgres.execute("CREATE TABLE players(id text PRIMARY KEY, status text)", database=database)
    postgres.execute("INSERT INTO players VALUES ('p1', 'active')", database=database)

    def connector(name: str, **extra) -> dict:
        return debezium_postgres_config(
            postgres,
            topic_prefix=name,
            tables=["public.players"],
            database=database,
            drop_slot_on_stop=True,
            extra=extra,
        )

    first, second = database, f"{database}-again"
    kafka_connect.create_connector(first, connector(first))
    trades = topic_name("trades")
    ensure_topics(kafka_broker.bootstrap_servers, {trades: 1})
    app = None
    try:
        kafka_connect.wait_for_connector(first, timeout=timedelta(seconds=60))
        _cdc_topic_has(kafka_broker.bootstrap_servers, f"{first}.public.players", 1)
        # a logical decoding plugin the server does not have: the task fails when it starts
        kafka_connect.create_connector(second, connector(second, **{"plugin.name": "decoderbufs"}))
        b = StreamsBuilder()
        players = b.table(
            f"{first}.public.players",
            key_serde=Serdes.debezium_key("id"),
            value_serde=Serdes.debezium_json(),
        )
        b.stream(trades, key_serde=S, value_serde=J).left_join(players, decide).to(
            topic_name("decisions"), value_serde=J
        )
        config = app_config(
            **{
                "streamtable.connect.url": kafka_connect.rest_url,
                "streamtable.connect.connectors": [first, second],
            }
        )
        ensure_topics(kafka_broker.bootstrap_servers, {topic_name("decisions"): 1})
        app = KafkaStreams(b.build(), config)
        app.start()
        wait_until(
            lambda: app.state.value == "ERROR",
            120,
            lambda: (
                f"the failed connector was not noticed: {kafka_connect.connector_status(second)}"
            ),
        )
        with pytest.raises(Exception, match=rf"connector '{second}' task 0 is FAILED: .*restart"):
            app.await_caught_up()
    finally:
        if app is not None:
            app.close()
        for name in (second, first):
            kafka_connect.delete_connector(name)
