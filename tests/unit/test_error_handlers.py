"""Kafka Streams' exception handlers in the record stage, and their configuration (no JVM)."""

import pickle
import struct

import pyarrow as pa
import pytest

from _support import frame_batch
from streamtable.compiler import record_stage as rs
from streamtable.compiler.codecs import PickleCodec, SerdeCodec
from streamtable.compiler.dead_letters import DeadLetterSpec, error_headers
from streamtable.compiler.record_stage import RecordStage, StageOp
from streamtable.config import StreamsConfig
from streamtable.dsl.timestamps import TimestampExtractor
from streamtable.errors import ConfigError, DeserializationError, StreamsError
from streamtable.runtime.task_output import OutputSpec
from streamtable.serde import Serdes
from streamtable.topology.nodes import RecordOpKind

STR = SerdeCodec(Serdes.string())
LONG = SerdeCodec(Serdes.long())
SPEC = DeadLetterSpec("dlq", OutputSpec("app", "q.dlq.src"))


def long_bytes(n):
    return struct.pack(">q", n)


class FakeWriter:
    """Stands in for the DeadLetterWriter (no broker): records what the stage did."""

    instances: list["FakeWriter"] = []

    def __init__(self, spec):
        self.spec = spec
        self.letters = []
        self.slots = set()
        self.ended = None
        FakeWriter.instances.append(self)

    def write(self, letters, slot=None):
        self.letters.extend(letters)
        self.slots.add(slot)

    def close(self):
        self.ended = "close"

    def fail(self):
        self.ended = "fail"


@pytest.fixture
def writers(monkeypatch):
    FakeWriter.instances = []
    monkeypatch.setattr(rs, "DeadLetterWriter", FakeWriter)
    return FakeWriter.instances


def stage(*ops, **kw):
    defaults = dict(
        ops=tuple(StageOp(kind, fn, name) for kind, fn, name in ops),
        in_key=STR,
        in_value=LONG,
        out_key=STR,
        out_value=PickleCodec(),
        emit_dropped=True,
        processing_errors="continue",
        source_name="src",
    )
    defaults.update(kw)
    return RecordStage(**defaults)


def run(st, rows):
    out = list(st(iter([frame_batch(rows)])))
    return pa.Table.from_batches(out).to_pylist() if out else []


def kept(out):
    return [r for r in out if r.get("dropped") is None]


def dropped(out):
    return [(r["offset"], r["dropped"]) for r in out if r.get("dropped") is not None]


def values(out):
    return [pickle.loads(r["value"]) for r in kept(out)]


def headers(letter):
    return {k: (None if v is None else v.decode()) for k, v in letter.headers}


def inverse(v):
    return 100 // v  # raises ZeroDivisionError for 0


ROWS = [(b"k", long_bytes(v), 1000 + i, 3, 10 + i) for i, v in enumerate([5, 0, 20, 0, 50])]


# -- processing exception handler -----------------------------------------------------------


def test_continue_skips_only_the_failing_records_of_the_batch(writers):
    st = stage((RecordOpKind.MAP_VALUES, inverse, "inv"), dead_letters=SPEC)
    out = run(st, ROWS)
    assert values(out) == [20, 5, 2]
    assert [r["offset"] for r in kept(out)] == [10, 12, 14]
    assert dropped(out) == [(11, "processing"), (13, "processing")]
    (w,) = writers
    assert w.ended == "close"
    assert [(d.key, d.value, d.timestamp) for d in w.letters] == [
        (b"k", long_bytes(0), 1001),
        (b"k", long_bytes(0), 1003),
    ]
    h = headers(w.letters[0])
    assert h["__streams.errors.exception"] == "ZeroDivisionError"
    assert h["__streams.errors.message"] == "integer division or modulo by zero"
    assert "in inverse" in h["__streams.errors.stacktrace"]
    assert (h["__streams.errors.topic"], h["__streams.errors.partition"]) == ("in", "3")
    assert h["__streams.errors.offset"] == "11"
    assert h["streamtable.errors.operator"] == "inv"
    assert h["streamtable.errors.reason"] == "processing"


def test_fail_names_the_operator_and_the_failing_record_not_the_batch(writers):
    st = stage((RecordOpKind.MAP_VALUES, inverse, "inv"), processing_errors="fail")
    with pytest.raises(
        StreamsError,
        match=r"ZeroDivisionError: integer division or modulo by zero in operator 'inv' on "
        r"the record at topic 'in' partition 3 offset 11\. .*"
        r"'processing.exception.handler'='log_and_continue'",
    ):
        run(st, ROWS)
    assert writers == []  # no dead-letter topic configured


def test_fail_with_a_dead_letter_topic_writes_the_failing_record_then_fails(writers):
    # KIP-1034: with a dead-letter topic the LogAndFail handlers send the record too
    st = stage(
        (RecordOpKind.MAP_VALUES, inverse, "inv"), processing_errors="fail", dead_letters=SPEC
    )
    with pytest.raises(StreamsError, match="offset 11"):
        run(st, ROWS)
    (w,) = writers
    assert [headers(d)["__streams.errors.offset"] for d in w.letters] == ["11"]
    assert w.ended == "fail"


def test_continue_logs_a_warning_naming_operator_and_record(caplog):
    st = stage((RecordOpKind.MAP_VALUES, inverse, "inv"))
    with caplog.at_level("WARNING", logger="streamtable"):
        run(st, ROWS)
    msgs = [r.getMessage() for r in caplog.records]
    assert any(
        "topic 'in' partition 3 offset 11" in m and "operator 'inv'" in m and "Zero" in m
        for m in msgs
    ), msgs


@pytest.mark.parametrize(
    ("kind", "fn", "expected"),
    [
        (RecordOpKind.FILTER, lambda k, v: 100 // v > 3, [5, 20]),
        (RecordOpKind.MAP, lambda k, v: (k, 100 // v), [20, 5, 2]),
        (RecordOpKind.SELECT_KEY, lambda k, v: str(100 // v), [5, 20, 50]),
        (RecordOpKind.FLAT_MAP_VALUES, lambda v: [100 // v, v], [20, 5, 5, 20, 2, 50]),
        (RecordOpKind.FLAT_MAP, lambda k, v: [(k, 100 // v)], [20, 5, 2]),
    ],
)
def test_every_stateless_kind_skips_the_failing_record(kind, fn, expected):
    out = run(stage((kind, fn, "op")), ROWS)
    assert values(out) == expected
    assert dropped(out) == [(11, "processing"), (13, "processing")]


def test_failure_after_a_flat_map_drops_only_that_derived_record():
    st = stage(
        (RecordOpKind.FLAT_MAP_VALUES, lambda v: [v, v - 5, v + 1], "split"),
        (RecordOpKind.MAP_VALUES, inverse, "inv"),
    )
    out = run(st, [(b"k", long_bytes(5), 0, 0, 7)])
    assert values(out) == [20, 16]  # 100//5, 100//6; the 0 in between is skipped
    assert [r["seq"] for r in kept(out)] == [0, 2]
    assert dropped(out) == [(7, "processing")]


def test_peek_is_not_called_twice_for_a_record():
    seen = []

    def action(k, v):
        seen.append(v)
        100 // v

    out = run(stage((RecordOpKind.PEEK, action, "peek")), ROWS)
    assert seen == [5, 0, 20, 0, 50]
    assert [r["offset"] for r in kept(out)] == [10, 12, 14]
    assert dropped(out) == [(11, "processing"), (13, "processing")]


def test_peek_failure_under_fail_names_the_record():
    st = stage((RecordOpKind.PEEK, lambda k, v: 100 // v, "peek"), processing_errors="fail")
    with pytest.raises(StreamsError, match=r"operator 'peek' on the record at .* offset 11"):
        run(st, ROWS)


class Exploding(TimestampExtractor):
    def extract(self, key, value, record_timestamp):
        return 100 // value


def test_a_raising_timestamp_extractor_is_a_processing_error_of_the_source(writers):
    st = stage(timestamp_extractor=Exploding(), invalid_timestamps="skip", dead_letters=SPEC)
    out = run(st, ROWS)
    assert [(r["offset"], r["ts"]) for r in kept(out)] == [(10, 20), (12, 5), (14, 2)]
    assert dropped(out) == [(11, "processing"), (13, "processing")]
    assert {headers(d)["streamtable.errors.operator"] for d in writers[0].letters} == {"src"}


def test_a_raising_timestamp_extractor_under_fail_names_source_and_record():
    st = stage(timestamp_extractor=Exploding(), processing_errors="fail")
    with pytest.raises(
        StreamsError, match=r"in the timestamp extractor .* of 'src' on the record at .*offset 11"
    ):
        run(st, ROWS)


def test_unreported_operation_drops_silently(writers):
    st = stage((RecordOpKind.MAP_VALUES, inverse, "inv"), unreported=frozenset({"inv"}))
    out = run(st, ROWS)
    assert values(out) == [20, 5, 2]
    assert dropped(out) == []


def test_tasks_before_a_shuffle_are_named_after_their_source_partition(writers):
    # Spark may number source tasks differently on a re-run: the transaction follows the
    # source partition (topic-partition), as the exactly-once sink's tasks do
    spec = DeadLetterSpec("dlq", SPEC.output, by_source_partition=True)
    run(stage((RecordOpKind.MAP_VALUES, inverse, "inv"), dead_letters=spec), ROWS)
    assert writers[0].slots == {"in-3"}
    run(stage((RecordOpKind.MAP_VALUES, inverse, "inv"), dead_letters=SPEC), ROWS)
    assert writers[1].slots == {None}  # after a shuffle: Spark's stable task number


def test_internal_input_bytes_are_not_dead_lettered(writers):
    pickled = [(pickle.dumps("k"), pickle.dumps(v), 0, 0, i) for i, v in enumerate([1, 0])]
    st = stage(
        (RecordOpKind.MAP_VALUES, inverse, "inv"),
        in_key=PickleCodec(),
        in_value=PickleCodec(),
        dead_letters=SPEC,
    )
    run(st, pickled)
    (letter,) = writers[0].letters
    assert (letter.key, letter.value) == (None, None)
    assert headers(letter)["__streams.errors.offset"] == "1"


# -- deserialization exception handler ------------------------------------------------------

BAD = [
    (b"a", long_bytes(1), 5, 1, 40),
    (b"b", b"\x01\x02\x03", 6, 1, 41),
    (b"c", long_bytes(3), 7, 1, 42),
]


def test_undecodable_value_is_dead_lettered_with_its_original_bytes(writers):
    st = stage(
        (RecordOpKind.MAP_VALUES, lambda v: v * 2, "double"),
        source_errors="continue",
        dead_letters=SPEC,
    )
    out = run(st, BAD)
    assert values(out) == [2, 6]
    assert dropped(out) == [(41, "deserialization")]
    (letter,) = writers[0].letters
    assert (letter.key, letter.value, letter.timestamp) == (b"b", b"\x01\x02\x03", 6)
    h = headers(letter)
    assert h["__streams.errors.exception"] == "streamtable.errors.DeserializationError"
    assert h["__streams.errors.message"].startswith(
        "Failed to deserialize the value of the record at topic 'in' partition 1 offset 41: "
    )
    assert "LongDeserializer" in h["__streams.errors.message"]
    assert h["streamtable.errors.operator"] == "src"
    assert h["streamtable.errors.reason"] == "deserialization"


def test_deserialization_fail_with_a_dead_letter_topic_writes_then_fails(writers):
    st = stage(source_errors="fail", dead_letters=SPEC)
    with pytest.raises(DeserializationError, match=r"partition 1 offset 41: .*LongDeserializer"):
        run(st, BAD)
    (w,) = writers
    assert [d.value for d in w.letters] == [b"\x01\x02\x03"]
    assert w.ended == "fail"


def test_fail_stops_on_the_first_bad_record_in_offset_order(writers):
    # Kafka Streams deserializes record by record: offset 50's bad value stops it before
    # offset 51's bad key (streamtable decodes a batch's keys, then its values)
    st = stage(in_key=LONG, out_key=LONG, source_errors="fail", dead_letters=SPEC)
    rows = [
        (long_bytes(1), long_bytes(1), 0, 2, 49),
        (long_bytes(2), b"\x01", 0, 2, 50),
        (b"xx", long_bytes(3), 0, 2, 51),
    ]
    with pytest.raises(DeserializationError, match=r"the value of .*partition 2 offset 50"):
        run(st, rows)
    assert [(d.key, d.value) for d in writers[0].letters] == [(long_bytes(2), b"\x01")]


def test_a_source_stage_writes_a_null_for_bytes_its_serde_reads_as_none():
    # a Debezium delete event (op "d") and a JSON null deserialize to None: downstream
    # operators must see a tombstone / a null (KTableSource deletes the key, joins and
    # aggregations skip it), not the envelope's bytes passed through
    import json

    delete = json.dumps({"before": {"id": 1}, "after": None, "op": "d"}).encode()
    update = json.dumps({"before": None, "after": {"id": 1}, "op": "u"}).encode()
    st = stage(
        in_key=SerdeCodec(Serdes.json()),
        out_key=SerdeCodec(Serdes.json()),
        in_value=SerdeCodec(Serdes.debezium_json()),
        out_value=SerdeCodec(Serdes.debezium_json()),
        source_errors="continue",
    )
    rows = [(b'"k1"', update, 0, 0, 0), (b'"k1"', delete, 1, 0, 1), (b"null", update, 2, 0, 2)]
    out = run(st, rows)
    assert [(r["key"], r["value"]) for r in out] == [
        (b'"k1"', update),
        (b'"k1"', None),
        (None, update),
    ]


def test_a_source_stage_deserializes_keys_too():
    # a map_values chain does not need the key, but Kafka Streams' source deserializes it
    st = stage(
        (RecordOpKind.MAP_VALUES, lambda v: v, "id"),
        in_key=LONG,
        out_key=LONG,
        source_errors="continue",
    )
    out = run(st, [(long_bytes(1), long_bytes(1), 0, 0, 0), (b"xx", long_bytes(2), 0, 0, 1)])
    assert dropped(out) == [(1, "deserialization")]


def test_a_record_with_bad_key_and_value_counts_once(writers):
    st = stage(in_key=LONG, out_key=LONG, source_errors="continue", dead_letters=SPEC)
    out = run(st, [(b"x", b"y", 0, 0, 0)])
    assert dropped(out) == [(0, "deserialization")]
    assert len(writers[0].letters) == 1


def test_source_reported_by_another_query_drops_silently(writers):
    st = stage(source_errors="continue", report_source=False, dead_letters=SPEC)
    out = run(st, BAD)
    assert dropped(out) == []
    assert [r["offset"] for r in kept(out)] == [40, 42]
    assert writers[0].letters == []


def test_error_headers_of_unknown_coordinates_are_kafka_streams_null_topic_and_minus_one():
    """``ExceptionHandlerUtils.buildDeadLetterQueueRecord`` writes ``String.valueOf`` of the
    context's partition and offset (-1 without a source record) and a null topic; a null
    ``getMessage()`` is a null header.
    """
    h = dict(
        error_headers(
            ValueError(),
            topic=None,
            partition=None,
            offset=None,
            operator="op",
            reason="processing",
        )
    )
    assert h["__streams.errors.topic"] is None and h["__streams.errors.message"] is None
    assert (h["__streams.errors.partition"], h["__streams.errors.offset"]) == (b"-1", b"-1")


# -- configuration --------------------------------------------------------------------------

BASE = {"application.id": "a", "bootstrap.servers": "localhost:9092"}


def cfg(extra):
    return StreamsConfig.from_mapping({**BASE, **extra})


def test_defaults():
    c = cfg({})
    assert c.processing_exception_handler == "log_and_fail"
    assert c.production_exception_handler == "fail"
    assert c.dead_letter_queue_topic is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("log_and_fail", "log_and_fail"),
        ("LOG_AND_CONTINUE", "log_and_continue"),
        ("LogAndFailProcessingExceptionHandler", "log_and_fail"),
        ("LogAndContinueProcessingExceptionHandler", "log_and_continue"),
        (
            "org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler",
            "log_and_continue",
        ),
        ("org.apache.kafka.streams.errors.LogAndFailProcessingExceptionHandler", "log_and_fail"),
    ],
)
def test_processing_handler_spellings(value, expected):
    assert cfg({"processing.exception.handler": value}).processing_exception_handler == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("fail", "fail"),
        ("continue", "continue"),
        ("DefaultProductionExceptionHandler", "fail"),
        ("org.apache.kafka.streams.errors.DefaultProductionExceptionHandler", "fail"),
    ],
)
@pytest.mark.parametrize(
    "key", ["production.exception.handler", "default.production.exception.handler"]
)
def test_production_handler_spellings(key, value, expected):
    c = cfg({key: value})
    assert c.production_exception_handler == expected
    assert StreamsConfig.from_mapping(c.to_mapping()) == c


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (
            {"processing.exception.handler": "skip"},
            r"Config 'processing.exception.handler' expects one of 'log_and_fail' \| "
            r"'log_and_continue', got 'skip'",
        ),
        (
            {"processing.exception.handler": "LogAndContinueExceptionHandler"},
            r"That is a deserialization handler; the processing handlers are "
            r"LogAndFailProcessingExceptionHandler and LogAndContinueProcessingExceptionHandler",
        ),
        (
            {"production.exception.handler": "retry"},
            r"Config 'production.exception.handler' expects one of 'fail' \| 'continue', "
            r"got 'retry'",
        ),
        (
            {
                "production.exception.handler": "fail",
                "default.production.exception.handler": "continue",
            },
            r"conflicts with 'production.exception.handler' \('fail'\); set only "
            r"'production.exception.handler'",
        ),
        (
            {"errors.dead.letter.queue.topic.name": "bad topic"},
            r"Config 'errors.dead.letter.queue.topic.name' expects a Kafka topic name: 1-249 "
            r"characters from \[a-zA-Z0-9._-\]",
        ),
        (
            {"errors.dead.letter.queue.topic.name": 7},
            r"Config 'errors.dead.letter.queue.topic.name' expects a str, got int 7",
        ),
    ],
)
def test_bad_handler_config_is_named(extra, match):
    with pytest.raises(ConfigError, match=match):
        cfg(extra)


def test_dead_letter_topic_round_trips():
    c = cfg(
        {
            "errors.dead.letter.queue.topic.name": "app-dlq",
            "processing.exception.handler": "log_and_continue",
        }
    )
    assert c.dead_letter_queue_topic == "app-dlq"
    assert StreamsConfig.from_mapping(c.to_mapping()) == c
