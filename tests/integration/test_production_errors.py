"""production.exception.handler: a record the producer rejects fails the app or is skipped."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from _support import ensure_topics, produce_values, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import StreamsError
from streamtable.runtime.task_output import OutputSpec, TaskOutput


def _topology(src: str, out: str):
    b = StreamsBuilder()
    b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.string()).map_values(
        lambda v: v * (5000 if v == "big" else 1)
    ).to(out, value_serde=Serdes.string())
    return b.build()


def test_continue_skips_and_counts_a_rejected_record(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    produce_values(bs, src, [("a", "x"), ("b", "big"), ("c", "y")])
    cfg = app_config(
        **{
            "production.exception.handler": "continue",
            "producer.message.max.bytes": 10000,  # the 15,000-byte value is rejected
        }
    )
    app = KafkaStreams(_topology(src, out), cfg)
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=2))
        assert app.state.value == "RUNNING"
        assert app.metrics()["dropped-records"].get("production") == 1
    finally:
        app.close()
    assert [(k, v) for k, v, _ in read_topic(bs, out)] == [(b"a", b"x"), (b"c", b"y")]


def test_fail_stops_the_app_naming_the_topic(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    produce_values(bs, src, [("b", "big")])
    cfg = app_config(
        **{"processing.guarantee": "exactly_once_v2", "producer.message.max.bytes": 10000}
    )
    app = KafkaStreams(_topology(src, out), cfg)
    failed = threading.Event()  # the handler runs once the state is ERROR
    app.set_uncaught_exception_handler(lambda _exc: failed.set())
    app.start()
    try:
        with pytest.raises(StreamsError, match=f"Producing to topic '{out}' failed"):
            app.await_caught_up(timeout=timedelta(minutes=2))
        assert failed.wait(30)
        assert app.state.value == "ERROR"
    finally:
        app.close()
    assert read_topic(bs, out) == []


def test_a_column_of_records_is_written_in_order_and_a_rejected_one_skipped(
    kafka_broker, topic_name
):
    """``TaskOutput.produce_many`` (the sinks' and changelog writers' path): each record goes
    to its topic and partition with its timestamp, in order; under ``continue`` a record the
    client rejects is skipped and counted, and the others are written.
    """
    bs = kafka_broker.bootstrap_servers
    a, b = topic_name("a"), topic_name("b")
    ensure_topics(bs, {a: 2, b: 1})
    spec = OutputSpec(
        "columns",
        "q.sink",
        {"bootstrap.servers": bs, "message.max.bytes": 10000},
        production_handler="continue",
    )
    out = TaskOutput(spec)
    out.produce_many(
        [a, a, b, a],
        [b"k1", b"k2", b"big", None],
        [b"v1", b"v2", b"x" * 15000, b"v4"],
        [1000, 2000, 3000, 4000],
        [1, 0, None, 1],
    )
    out.close()
    assert (out.produced, out.rejected) == (3, 1)
    assert read_topic(bs, b) == []
    consumer = Consumer(
        {"bootstrap.servers": bs, "group.id": topic_name("g"), "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(a, p, OFFSET_BEGINNING) for p in (0, 1)])
    got = []
    while len(got) < 3:
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None
        got.append((msg.partition(), msg.key(), msg.value(), msg.timestamp()[1]))
    consumer.close()
    assert sorted(got, key=lambda g: (g[0], g[3])) == [
        (0, b"k2", b"v2", 2000),
        (1, b"k1", b"v1", 1000),
        (1, None, b"v4", 4000),
    ]
    assert [g for g in got if g[0] == 1] == [(1, b"k1", b"v1", 1000), (1, None, b"v4", 4000)]
    with pytest.raises(ValueError, match="the columns differ in length"):
        TaskOutput(spec).produce_many(a, [b"k"], [b"v", b"w"])
