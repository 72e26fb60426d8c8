"""Timestamp extractors, the invalid-timestamp policy and its config key."""

import json
import pickle
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from pyspark import cloudpickle

import streamtable
from _support import frame_batch
from streamtable import (
    FailOnInvalidTimestamp,
    FieldTimestamp,
    LogAndSkipOnInvalidTimestamp,
    RecordTimestamp,
    Serdes,
    StreamsBuilder,
    TimestampExtractor,
    WallclockTimestamp,
)
from streamtable.compiler.codecs import SerdeCodec
from streamtable.compiler.record_stage import RecordStage
from streamtable.config import StreamsConfig
from streamtable.dsl.timestamps import policy_of, valid_timestamp
from streamtable.errors import ConfigError, StreamsError, TopologyError

pytestmark = pytest.mark.unit

STR = SerdeCodec(Serdes.string())
JSON = SerdeCodec(Serdes.json())
BASE = {"application.id": "app-1", "bootstrap.servers": "localhost:9092"}
T2024 = 1704067200000  # 2024-01-01T00:00:00Z


# -- the extractors ------------------------------------------------------------------------------


def test_record_timestamp_and_its_policy_variants_return_the_record_time():
    for ex in (RecordTimestamp(), LogAndSkipOnInvalidTimestamp(), FailOnInvalidTimestamp()):
        assert ex("k", {"a": 1}, 1234) == 1234
    assert RecordTimestamp().on_invalid is None
    assert LogAndSkipOnInvalidTimestamp().on_invalid == "skip"
    assert FailOnInvalidTimestamp().on_invalid == "fail"
    assert FailOnInvalidTimestamp() != RecordTimestamp(on_invalid="fail")  # other type
    assert repr(RecordTimestamp(on_invalid="skip")) == "RecordTimestamp(on_invalid='skip')"


def test_wallclock_is_the_current_time_not_the_record_time():
    before = int(datetime.now(UTC).timestamp() * 1000)
    got = WallclockTimestamp()("k", "v", 5)
    after = int(datetime.now(UTC).timestamp() * 1000)
    assert before - 1 <= got <= after + 1


@pytest.mark.parametrize(
    ("value", "unit", "want"),
    [
        (T2024, "ms", T2024),
        (T2024 // 1000, "s", T2024),
        (1.9, "ms", 1),  # fractions of a ms dropped
        (1_700_000_000.123, "s", 1_700_000_000_123),  # no float noise
        (1.1, "s", 1100),
        (Decimal("1.5"), "s", 1500),
        ("2024-01-01T00:00:00Z", "ms", T2024),
        ("2024-01-01T00:00:00.250Z", "s", T2024 + 250),  # unit is for numbers only
        ("2024-01-01T02:00:00+02:00", "ms", T2024),
        ("2024-01-01 00:00:01", "ms", T2024 + 1000),  # no offset: UTC
        ("2024-01-01", "ms", T2024),
        (" 2024-01-01T00:00:00Z ", "ms", T2024),
        (datetime(2024, 1, 1, tzinfo=UTC), "ms", T2024),
        (datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))), "ms", T2024),
        (datetime(2024, 1, 1), "ms", T2024),  # naive: UTC
        (datetime(2024, 1, 1, 0, 0, 0, 999), "ms", T2024),  # microseconds dropped
    ],
)
def test_field_timestamp_reads_numbers_iso_strings_and_datetimes(value, unit, want):
    assert FieldTimestamp("t", unit=unit)(None, {"t": value, "x": 1}, 42) == want


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({}, "the value has no field 't'"),
        ({"t": None}, "field 't' of the value is None"),
        ({"t": "yesterday"}, "holds str 'yesterday', not an epoch number in ms"),
        ({"t": "1704067200000"}, "holds str '1704067200000'"),  # strings are ISO-8601 only
        ({"t": True}, "holds bool True"),
        ({"t": float("nan")}, "holds float nan"),
        ({"t": float("inf")}, "holds float inf"),
        ({"t": [1]}, "holds list [1]"),
        (None, "the value is NoneType, not a dict with field 't'"),
        ("2024-01-01", "the value is str, not a dict"),
    ],
)
def test_field_timestamp_without_a_usable_field_is_invalid_and_says_why(value, why):
    ex = FieldTimestamp("t")
    assert ex("k", value, 42) is None
    assert why in ex.explain_invalid("k", value, 42)


def test_field_timestamp_before_1970_is_negative_so_invalid():
    ex = FieldTimestamp("t")
    assert ex(None, {"t": "1969-12-31T23:59:59Z"}, 0) == -1000
    assert valid_timestamp(ex(None, {"t": -5}, 0)) is None
    assert "-5 ms, out of range" in ex.explain_invalid(None, {"t": -5}, 0)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FieldTimestamp("t", unit="us"), "unit must be 'ms' or 's'; got 'us'"),
        (lambda: FieldTimestamp(""), "field must be a non-empty str"),
        (lambda: FieldTimestamp(3), "field must be a non-empty str; got 3"),
        (
            lambda: FieldTimestamp("t", on_invalid="drop"),
            r"on_invalid must be 'skip', 'fail'.*Kafka Streams' LogAndSkipOnInvalidTimestamp "
            r"and FailOnInvalidTimestamp",
        ),
        (lambda: RecordTimestamp(on_invalid="continue"), "RecordTimestamp: on_invalid must"),
        (lambda: WallclockTimestamp(on_invalid=1), "got 1"),
    ],
)
def test_bad_extractor_arguments_are_topology_errors(make, message):
    with pytest.raises(TopologyError, match=message):
        make()


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
@pytest.mark.parametrize(
    "ex",
    [
        RecordTimestamp(),
        RecordTimestamp(on_invalid="fail"),
        LogAndSkipOnInvalidTimestamp(),
        FailOnInvalidTimestamp(),
        WallclockTimestamp(on_invalid="skip"),
        FieldTimestamp("t", unit="s", on_invalid="fail"),
    ],
)
def test_extractors_pickle_with_their_settings(ex, dumps):
    back = pickle.loads(dumps(ex))
    assert back == ex and hash(back) == hash(ex) and repr(back) == repr(ex)
    assert back.on_invalid == ex.on_invalid


def test_a_subclass_supplies_extract_and_a_policy():
    class Twice(TimestampExtractor):
        def extract(self, key, value, record_timestamp_ms):
            return 2 * record_timestamp_ms

    assert Twice(on_invalid="fail")(None, None, 4) == 8
    assert policy_of(Twice(on_invalid="fail"), "skip") == "fail"
    assert policy_of(Twice(), "fail") == "fail"
    assert policy_of(lambda k, v, t: t, "skip") == "skip"
    with pytest.raises(NotImplementedError, match="must implement extract"):
        TimestampExtractor()(None, None, 0)


def test_valid_timestamp_takes_integers_only():
    assert valid_timestamp(0) == 0
    assert valid_timestamp(np.int64(7)) == 7
    assert valid_timestamp(2**63 - 1) == 2**63 - 1
    for bad in (-1, 2**63, 1.0, "5", None, True, False):
        assert valid_timestamp(bad) is None


def test_public_names_are_exported():
    for name in (
        "TimestampExtractor",
        "RecordTimestamp",
        "WallclockTimestamp",
        "FieldTimestamp",
        "LogAndSkipOnInvalidTimestamp",
        "FailOnInvalidTimestamp",
    ):
        assert name in streamtable.__all__ and hasattr(streamtable, name)


def test_stream_accepts_extractor_objects_and_plain_functions():
    b = StreamsBuilder()
    for ex in (FieldTimestamp("t"), WallclockTimestamp(), lambda k, v, ts: ts):
        b.stream("in", key_serde=Serdes.string(), value_serde=Serdes.json(), timestamp_extractor=ex)
    with pytest.raises(TopologyError, match="timestamp_extractor expects a callable"):
        b.stream("in", timestamp_extractor="event_time")
    with pytest.raises(TopologyError, match=r"key, value, record_timestamp_ms"):
        b.stream("in", timestamp_extractor=lambda v: 0)


# -- the config key ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("skip", "skip"),
        ("fail", "fail"),
        (" FAIL ", "fail"),
        ("LogAndSkipOnInvalidTimestamp", "skip"),
        ("org.apache.kafka.streams.processor.FailOnInvalidTimestamp", "fail"),
    ],
)
def test_policy_config_values(raw, want):
    cfg = StreamsConfig.from_mapping({**BASE, "streamtable.invalid.timestamp.policy": raw})
    assert cfg.invalid_timestamp_policy == want
    assert StreamsConfig.from_mapping(cfg.to_mapping()) == cfg


def test_policy_defaults_to_skip():
    assert StreamsConfig.from_mapping(BASE).invalid_timestamp_policy == "skip"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "drop",
            r"'streamtable.invalid.timestamp.policy' expects one of 'skip' \| 'fail', got 'drop'",
        ),
        (1, r"expects one of 'skip' \| 'fail', got 1"),
        (
            "UsePartitionTimeOnInvalidTimestamp",
            r"UsePartitionTimeOnInvalidTimestamp is not supported",
        ),
    ],
)
def test_unknown_policy_is_a_config_error_naming_key_and_values(raw, message):
    with pytest.raises(ConfigError, match=message):
        StreamsConfig.from_mapping({**BASE, "streamtable.invalid.timestamp.policy": raw})


def test_kafka_streams_extractor_key_points_to_the_extractor_argument():
    with pytest.raises(
        ConfigError,
        match=r"'default.timestamp.extractor' is not supported. Pass timestamp_extractor=.*"
        r"'streamtable.invalid.timestamp.policy'",
    ):
        StreamsConfig.from_mapping(
            {**BASE, "default.timestamp.extractor": "WallclockTimestampExtractor"}
        )


# -- the policy in the source stage --------------------------------------------------------------


def source_stage(extractor, policy, **kw):
    return RecordStage(
        ops=(),
        in_key=STR,
        in_value=JSON,
        out_key=STR,
        out_value=JSON,
        source_errors="fail",
        timestamp_extractor=extractor,
        invalid_timestamps=policy,
        emit_dropped=kw.pop("emit_dropped", True),
        **kw,
    )


def run(stage, rows):
    out = list(stage(iter([frame_batch(rows)])))
    return pa.Table.from_batches(out).to_pylist() if out else []


def js(**fields):
    return json.dumps(fields).encode()


ROWS = [
    (b"a", js(t=5_000), 1, 0, 10),
    (b"b", js(other=1), 2, 0, 11),
    (b"c", js(t="1970-01-01T00:00:07Z"), 3, 0, 12),
    (b"d", js(t="soon"), 4, 0, 13),
]


def test_skip_policy_drops_invalid_records_as_invalid_timestamp_and_sets_the_rest():
    out = run(source_stage(FieldTimestamp("t"), "skip"), ROWS)
    assert [(r["key"], r["ts"], r["offset"]) for r in out if r["dropped"] is None] == [
        (b"a", 5_000, 10),
        (b"c", 7_000, 12),
    ]
    assert [(r["offset"], r["dropped"]) for r in out if r["dropped"]] == [
        (11, "invalid_timestamp"),
        (13, "invalid_timestamp"),
    ]


def test_fail_policy_names_the_record_the_result_the_reason_and_the_config_key():
    with pytest.raises(StreamsError) as e:
        run(source_stage(FieldTimestamp("t"), "fail"), ROWS)
    msg = str(e.value)
    assert "FieldTimestamp('t') returned None" in msg
    assert "topic 'in' partition 0 offset 11" in msg
    assert "the value has no field 't'" in msg
    assert "'streamtable.invalid.timestamp.policy'='fail'" in msg and "set it to 'skip'" in msg


def test_the_extractors_own_policy_is_named_when_it_is_the_one_failing():
    with pytest.raises(
        StreamsError, match=r"policy of the extractor \('fail'\).*on_invalid='skip'"
    ):
        run(source_stage(FieldTimestamp("t", on_invalid="fail"), "fail"), ROWS)


def test_plain_function_results_other_than_non_negative_ints_are_invalid():
    results = {b"a": 10, b"b": -1, b"c": 2.5, b"d": np.int64(40)}
    stage = source_stage(lambda k, v, ts: results[k.encode()], "skip")
    out = run(stage, ROWS)
    assert [(r["key"], r["ts"]) for r in out if r["dropped"] is None] == [(b"a", 10), (b"d", 40)]
    with pytest.raises(
        StreamsError, match=r"returned -1 for the record at topic 'in' partition 0 offset 11"
    ):
        run(source_stage(lambda k, v, ts: results[k.encode()], "fail"), ROWS)


def test_record_timestamp_extractors_check_the_record_time():
    rows = [(b"a", js(), 5, 0, 0), (b"b", js(), -1, 0, 1)]
    out = run(source_stage(LogAndSkipOnInvalidTimestamp(), "skip"), rows)
    assert [(r["ts"], r["dropped"]) for r in out] == [(5, None), (-1, "invalid_timestamp")]
    with pytest.raises(StreamsError, match=r"returned -1 .* offset 1 \(the Kafka record carries"):
        run(source_stage(FailOnInvalidTimestamp(), "skip"), rows)


def test_without_an_extractor_negative_record_times_pass_under_skip_and_fail_under_fail():
    rows = [(b"a", js(), 5, 0, 0), (b"b", js(), -1, 1, 3)]
    out = run(source_stage(None, "skip", emit_dropped=False), rows)
    assert [r["ts"] for r in out] == [
        5,
        -1,
    ]  # dropped by windowed aggregations (negative_timestamp)
    with pytest.raises(
        StreamsError,
        match=r"record at topic 'in' partition 1 offset 3 has the invalid timestamp -1 .*"
        r"counted as dropped 'negative_timestamp'",
    ):
        run(source_stage(None, "fail", emit_dropped=False), rows)


def test_an_extractor_that_raises_stops_the_application_whatever_the_policy():
    def boom(k, v, ts):
        raise KeyError("t")

    with pytest.raises(
        StreamsError, match=r"User code raised KeyError.*in the timestamp extractor"
    ):
        run(source_stage(boom, "skip"), ROWS)
