"""Bad records against real Kafka: the handlers skip or fail, the dead-letter topic keeps them."""

import struct
import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, TopicPartition

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import MissingSourceTopicError, StreamsError
from streamtable.runtime.kafka_streams import State

BASE_TS = 1_700_000_000_000


def long_bytes(n):
    return struct.pack(">q", n)


def read_with_coordinates(bootstrap, topic):
    """Every record of ``topic``: dicts with key, value, ts, partition, offset, headers."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dlq-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        parts = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in parts
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out, remaining = [], {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 60
        while remaining:
            assert time.monotonic() < deadline, f"{topic}: partitions {remaining} unfinished"
            for m in consumer.consume(num_messages=10000, timeout=0.5):
                if m.error():
                    continue
                out.append(
                    {
                        "key": m.key(),
                        "value": m.value(),
                        "ts": m.timestamp()[1],
                        "partition": m.partition(),
                        "offset": m.offset(),
                        "headers": {k: v for k, v in (m.headers() or [])},
                    }
                )
                if m.offset() + 1 >= ends[m.partition()]:
                    remaining.discard(m.partition())
            # a transactional topic ends with a commit marker no message reaches
            for tp in consumer.position([TopicPartition(topic, p) for p in remaining]):
                if tp.offset >= ends[tp.partition]:
                    remaining.discard(tp.partition)
        return out
    finally:
        consumer.close()


def test_one_undecodable_record_per_10000_goes_to_the_dead_letter_topic(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    src, doubled, counts, dlq = (topic_name(n) for n in ("in", "doubled", "counts", "dlq"))
    ensure_topics(bs, {src: 2, doubled: 2, counts: 2, dlq: 1})
    n, bad = 30_000, {4_999, 14_999, 24_999}
    records = [
        (f"k{i % 97}".encode(), b"\x00\x01\x02" if i in bad else long_bytes(i), BASE_TS + i)
        for i in range(n)
    ]
    produce_records(bs, src, records, partitions=2)

    b = StreamsBuilder()
    s = b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.long(), name="readings")
    s.map_values(lambda v: 2 * v, name="double").to(doubled, value_serde=Serdes.long())
    s.group_by_key().count(name="per-key").to_stream().to(counts, value_serde=Serdes.long())
    app = KafkaStreams(
        b.build(),
        app_config(
            **{
                "deserialization.exception.handler": "log_and_continue",
                "errors.dead.letter.queue.topic.name": dlq,
            }
        ),
    )
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=5))
        assert app.state is State.RUNNING  # the application kept running
        # counted once, although both queries read (and deserialize) the source
        assert app.metrics()["dropped-records"] == {"deserialization": 3}
    finally:
        app.close()

    good = [(k, v, ts) for i, (k, v, ts) in enumerate(records) if i not in bad]
    # all other records processed: the stateless branch and the count equal a model
    got = Counter((k, struct.unpack(">q", v)[0]) for k, v, _ in read_topic(bs, doubled))
    assert got == Counter((k, 2 * struct.unpack(">q", v)[0]) for k, v, _ in good)
    latest = {k: struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, counts)}
    assert latest == dict(Counter(k for k, _, _ in good))

    # the dead-letter topic holds exactly the undecodable records, as they were in the source
    source = {(r["partition"], r["offset"]): r for r in read_with_coordinates(bs, src)}
    originals = {c: r for c, r in source.items() if len(r["value"]) != 8}
    assert len(originals) == 3
    letters = read_with_coordinates(bs, dlq)
    assert len(letters) == 3
    for d in letters:
        h = {k: v.decode() for k, v in d["headers"].items()}
        coords = (int(h["__streams.errors.partition"]), int(h["__streams.errors.offset"]))
        original = originals.pop(coords)
        assert (d["key"], d["value"], d["ts"]) == (
            original["key"],
            original["value"],
            original["ts"],
        )
        assert h["__streams.errors.topic"] == src
        assert h["__streams.errors.exception"] == "streamtable.errors.DeserializationError"
        assert "LongDeserializer" in h["__streams.errors.message"]
        assert f"offset {coords[1]}" in h["__streams.errors.message"]
        assert "Traceback" in h["__streams.errors.stacktrace"]
        assert h["streamtable.errors.operator"] == "readings"
        assert h["streamtable.errors.reason"] == "deserialization"
    assert originals == {}


def inverting_topology(src, out):
    b = StreamsBuilder()
    (
        b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.long())
        .map_values(lambda v: 100 // v, name="invert")
        .to(out, value_serde=Serdes.long())
    )
    return b.build()


@pytest.fixture
def with_zeros(kafka_broker, topic_name):
    bs = kafka_broker.bootstrap_servers
    src, out, dlq = topic_name("in"), topic_name("out"), topic_name("dlq")
    ensure_topics(bs, {src: 1, out: 1, dlq: 1})
    values = [4, 0, 5, 0, 10]
    produce_records(
        bs, src, [(f"k{i}".encode(), long_bytes(v), BASE_TS + i) for i, v in enumerate(values)]
    )
    return src, out, dlq


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_processing_error_under_log_and_continue_skips_the_record_and_dead_letters_it(
    kafka_broker, spark, app_config, with_zeros, guarantee
):
    bs = kafka_broker.bootstrap_servers
    src, out, dlq = with_zeros
    app = KafkaStreams(
        inverting_topology(src, out),
        app_config(
            **{
                "processing.exception.handler": "LogAndContinueProcessingExceptionHandler",
                "errors.dead.letter.queue.topic.name": dlq,
                "processing.guarantee": guarantee,
            }
        ),
    )
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=2))
        assert app.state is State.RUNNING
        assert app.metrics()["dropped-records"] == {"processing": 2}
    finally:
        app.close()
    got = {k.decode(): struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, out)}
    assert got == {"k0": 25, "k2": 20, "k4": 10}
    letters = read_with_coordinates(bs, dlq)
    assert [(d["key"], d["value"], d["ts"]) for d in letters] == [
        (b"k1", long_bytes(0), BASE_TS + 1),
        (b"k3", long_bytes(0), BASE_TS + 3),
    ]
    h = {k: v.decode() for k, v in letters[0]["headers"].items()}
    assert h["__streams.errors.exception"] == "ZeroDivisionError"
    assert h["__streams.errors.message"] == "integer division or modulo by zero"
    assert (h["__streams.errors.topic"], h["__streams.errors.partition"]) == (src, "0")
    assert h["__streams.errors.offset"] == "1"
    assert h["streamtable.errors.operator"] == "invert"
    assert h["streamtable.errors.reason"] == "processing"


def test_processing_error_under_log_and_fail_stops_naming_operator_and_record(
    kafka_broker, spark, app_config, with_zeros
):
    src, out, _dlq = with_zeros
    errors = []
    app = KafkaStreams(inverting_topology(src, out), app_config())
    app.set_uncaught_exception_handler(errors.append)
    app.start()
    try:
        with pytest.raises(
            StreamsError,
            match=rf"ZeroDivisionError: integer division or modulo by zero in operator 'invert' "
            rf"on the record at topic '{src}' partition 0 offset 1\. .*"
            r"'processing.exception.handler'='log_and_continue'",
        ):
            app.await_caught_up(timeout=timedelta(minutes=2))
        assert app.state is State.ERROR
        assert errors and "operator 'invert'" in str(errors[0])
    finally:
        app.close()


def test_missing_dead_letter_topic_is_named(kafka_broker, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    src, out, dlq = topic_name("in"), topic_name("out"), topic_name("absent-dlq")
    ensure_topics(bs, {src: 1, out: 1})
    app = KafkaStreams(
        inverting_topology(src, out), app_config(**{"errors.dead.letter.queue.topic.name": dlq})
    )
    with pytest.raises(
        MissingSourceTopicError,
        match=rf"Dead-letter \(errors.dead.letter.queue.topic.name\) topic\(s\) \['{dlq}'\] "
        r"do not exist.*create them first",
    ):
        app.start()
    assert app.state is State.CREATED
