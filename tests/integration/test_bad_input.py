"""Bad input gets a clear error naming the thing, and loses nothing."""

import struct
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_values, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import MissingSourceTopicError, StreamsError
from streamtable.runtime.kafka_streams import State


def doubling_topology(src, out):
    b = StreamsBuilder()
    b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.long()).map_values(
        lambda v: 2 * v
    ).to(out, value_serde=Serdes.long())
    return b.build()


def long_bytes(n):
    return struct.pack(">q", n)


def test_missing_source_topic_is_named(kafka_broker, topic_name, app_config):
    src, out = topic_name("absent"), topic_name("out")
    ensure_topics(kafka_broker.bootstrap_servers, {out: 1})
    app = KafkaStreams(doubling_topology(src, out), app_config())
    with pytest.raises(
        MissingSourceTopicError, match=rf"Source topic\(s\) \['{src}'\] do not exist"
    ):
        app.start()
    assert app.state is State.CREATED


def test_undeserializable_value_fails_naming_topic_partition_offset(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    produce_values(bs, src, [("a", long_bytes(1)), ("b", b"\x01\x02\x03"), ("c", long_bytes(3))])
    errors = []
    app = KafkaStreams(doubling_topology(src, out), app_config())
    app.set_uncaught_exception_handler(errors.append)
    app.start()
    with pytest.raises(
        StreamsError, match=rf"topic '{src}' partition 0 offset 1: .*LongDeserializer"
    ):
        app.await_caught_up(timeout=timedelta(minutes=2))
    assert app.state is State.ERROR
    assert errors and "offset 1" in str(errors[0])
    app.close()


def test_log_and_continue_skips_and_counts(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    produce_values(bs, src, [("a", long_bytes(1)), ("b", b"bad"), ("c", long_bytes(3))])
    app = KafkaStreams(
        doubling_topology(src, out),
        app_config(**{"default.deserialization.exception.handler": "log_and_continue"}),
    )
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=2))
        assert app.metrics()["dropped-records"] == {"deserialization": 1}
    finally:
        app.close()
    got = {k.decode(): struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, out)}
    assert got == {"a": 2, "c": 6}
