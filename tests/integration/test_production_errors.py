"""production.exception.handler: a record the producer rejects fails the app or is skipped."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_values, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import StreamsError


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
