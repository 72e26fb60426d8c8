"""Timestamp extractors against real Kafka: a value field drives windows; invalid ones skip or fail."""

import json
import struct
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_records, read_topic
from streamtable import FieldTimestamp, KafkaStreams, Serdes, StreamsBuilder, TimeWindows
from streamtable.errors import StreamsError
from streamtable.runtime.kafka_streams import State

SIZE = 10_000
RECORD_TS = 1_700_000_000_000  # every record's Kafka timestamp: one window by record time
EVENTS = [  # (key, value); offsets 0..4 of partition 0
    ("a", {"t": 1_000}),
    ("a", {"t": 2_500}),
    ("a", {"t": 12_000}),
    ("b", {"no_t": 1}),  # offset 3: no timestamp
    ("b", {"t": 15_000}),
]


def windowed_count(src, out):
    b = StreamsBuilder()
    (
        b.stream(
            src,
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
            timestamp_extractor=FieldTimestamp("t"),
        )
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(SIZE))
        .count()
        .to_stream()
        .to(out, key_serde=Serdes.time_windowed(Serdes.string(), SIZE), value_serde=Serdes.long())
    )
    return b.build()


@pytest.fixture
def events(kafka_broker, topic_name):
    bs = kafka_broker.bootstrap_servers
    src = topic_name("in")
    ensure_topics(bs, {src: 1})
    produce_records(
        bs,
        src,
        [(k.encode(), json.dumps(v).encode(), RECORD_TS + i) for i, (k, v) in enumerate(EVENTS)],
    )
    return src


def test_field_time_drives_windows_and_records_without_it_are_skipped_and_counted(
    kafka_broker, spark, topic_name, app_config, events
):
    bs = kafka_broker.bootstrap_servers
    out = topic_name("out")
    ensure_topics(bs, {out: 1})
    app = KafkaStreams(windowed_count(events, out), app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=2))
        dropped = app.metrics()["dropped-records"]
    finally:
        app.close()
    latest = {}
    for k, v, _ts in read_topic(bs, out):
        latest[(k[:-8].decode(), struct.unpack(">q", k[-8:])[0])] = struct.unpack(">q", v)[0]
    # windows of the field's time (0 and 10 s), not of the record time (1.7e12)
    assert latest == {("a", 0): 2, ("a", 10_000): 1, ("b", 10_000): 1}
    assert dropped == {"invalid_timestamp": 1}


def test_fail_policy_stops_the_app_naming_the_record(
    kafka_broker, spark, topic_name, app_config, events
):
    out = topic_name("out")
    ensure_topics(kafka_broker.bootstrap_servers, {out: 1})
    errors = []
    app = KafkaStreams(
        windowed_count(events, out), app_config(**{"streamtable.invalid.timestamp.policy": "fail"})
    )
    app.set_uncaught_exception_handler(errors.append)
    app.start()
    try:
        with pytest.raises(
            StreamsError,
            match=rf"FieldTimestamp\('t'\) returned None for the record at topic '{events}' "
            r"partition 0 offset 3 \(the value has no field 't'\).*"
            r"'streamtable.invalid.timestamp.policy'",
        ):
            app.await_caught_up(timeout=timedelta(minutes=2))
        assert app.state is State.ERROR
        assert errors and "offset 3" in str(errors[0])
    finally:
        app.close()
