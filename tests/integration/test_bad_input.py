"""Bad input gets a clear error naming the thing, and loses nothing."""

import struct
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_values, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder, TimeWindows
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


def test_a_replication_factor_the_cluster_cannot_give_is_refused_naming_the_topic(
    kafka_broker, spark, topic_name, app_config
):
    """replication.factor applies to the internal topics, as in Kafka Streams: 2 on this
    one-broker cluster cannot be given, and start() says so (it used to create them with
    the broker's default, whatever the setting said).
    """
    from streamtable.errors import StreamtableError

    src, out = topic_name("in"), topic_name("out")
    ensure_topics(kafka_broker.bootstrap_servers, {src: 1, out: 1})
    b = StreamsBuilder()
    s = Serdes.string()
    b.stream(src, key_serde=s, value_serde=s).group_by_key().count(name="c").to_stream().to(
        out, value_serde=Serdes.long()
    )
    app = KafkaStreams(b.build(), app_config(**{"replication.factor": 2}))
    with pytest.raises(
        StreamtableError,
        match=r"Could not create the internal topic '.*-c-changelog': .*replication.factor=2 "
        r"needs that many brokers",
    ):
        app.start()
    app.close()


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


def _fails_to_serialize(bootstrap_servers, topology, config, out, match):
    """Run ``topology`` until it fails with ``match``; nothing reaches ``out``."""
    app = KafkaStreams(topology, config)
    app.start()
    with pytest.raises(StreamsError, match=match):
        app.await_caught_up(timeout=timedelta(minutes=2))
    assert app.state is State.ERROR
    app.close()
    assert read_topic(bootstrap_servers, out) == []


@pytest.mark.parametrize("windowed", [False, True], ids=["unwindowed", "windowed"])
def test_an_aggregate_the_sinks_serde_cannot_write_fails_naming_the_aggregation(
    kafka_broker, spark, topic_name, app_config, windowed
):
    """A Python aggregation followed by a sink emits its updates in the sink's serde (a
    windowed one too); an aggregate of another type fails the application with the
    aggregation's name and the serde to fix (Kafka Streams fails likewise when its sink's
    serializer rejects one).
    """
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    produce_values(bs, src, [("a", b"x"), ("a", b"y")])
    b = StreamsBuilder()
    S = Serdes.string()
    grouped = b.stream(src, key_serde=S, value_serde=S).group_by_key()
    key_serde = S
    if windowed:
        grouped = grouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
        key_serde = Serdes.time_windowed(S, 60_000)
    # an unnamed store has no changelog: the fold emits straight in the sink's serde
    grouped.reduce(lambda a, v: a + v).to_stream().to(
        out, key_serde=key_serde, value_serde=Serdes.long()
    )
    _fails_to_serialize(
        bs,
        b.build(),
        app_config(),
        out,
        r"Failed to serialize an aggregate of 'KSTREAM-REDUCE-\d+' for the sink it is "
        r"written to: LongSerializer.*Give that sink a value serde that fits",
    )


def test_a_join_result_the_sinks_serde_cannot_write_fails_naming_the_join(
    kafka_broker, spark, topic_name, app_config
):
    """A join followed by a sink serializes its results with the sink's serde; a result of
    another type fails the application with the join's name and the serde to fix.
    """
    bs = kafka_broker.bootstrap_servers
    left, right, out = topic_name("l"), topic_name("r"), topic_name("out")
    ensure_topics(bs, {left: 1, right: 1, out: 1})
    produce_values(bs, left, [("a", b"x")])
    produce_values(bs, right, [("a", b"y")])
    b = StreamsBuilder()
    S = Serdes.string()
    lt = b.table(left, key_serde=S, value_serde=S)
    rt = b.table(right, key_serde=S, value_serde=S)
    lt.join(rt, lambda lv, rv: lv + rv).to_stream().to(out, key_serde=S, value_serde=Serdes.long())
    _fails_to_serialize(
        bs,
        b.build(),
        app_config(),
        out,
        r"Failed to serialize a result of the joiner of 'KTABLE-MERGE-\d+' for the "
        r"sink it is written to: LongSerializer.*Give that sink a value serde that fits",
    )
