import pickle

import pyarrow as pa
import pytest

from _support import frame_batch
from streamtable.compiler.codecs import (
    LongColumnCodec,
    PickleCodec,
    SerdeCodec,
    SessionWindowedCodec,
    WindowedCodec,
)
from streamtable.compiler.lower.sink import WindowedPartitioner, windowed_partitioner
from streamtable.compiler.record_stage import RecordStage, StageOp
from streamtable.errors import DeserializationError, StreamsError
from streamtable.serde import Serdes, Windowed
from streamtable.serde.murmur2 import default_partition
from streamtable.topology.nodes import RecordOpKind

STR = SerdeCodec(Serdes.string())


def run(stage, rows):
    out = list(stage(iter([frame_batch(rows)])))
    return pa.Table.from_batches(out).to_pylist() if out else []


def op(kind, fn):
    return StageOp(kind, fn, f"node-{kind.value}")


def test_chain_applies_ops_in_order_and_keeps_coordinates():
    stage = RecordStage(
        ops=(
            op(RecordOpKind.FLAT_MAP_VALUES, str.split),
            op(RecordOpKind.FILTER, lambda k, v: v != "b"),
            op(RecordOpKind.MAP, lambda k, v: (v, len(v))),
        ),
        in_key=STR,
        in_value=STR,
        out_key=STR,
        out_value=PickleCodec(),
    )
    out = run(stage, [(b"k", b"a b cc", 5, 0, 7)])
    assert [(r["key"], pickle.loads(r["value"]), r["ts"], r["offset"], r["seq"]) for r in out] == [
        (b"a", 1, 5, 7, 0),
        (b"cc", 2, 5, 7, 2),
    ]


def test_unchanged_columns_pass_through_as_raw_bytes():
    stage = RecordStage(
        ops=(op(RecordOpKind.FILTER, lambda k, v: v.startswith("x")),),
        in_key=STR,
        in_value=STR,
        out_key=STR,
        out_value=STR,
    )
    out = run(stage, [(b"k1", b"xa", 1, 0, 0), (b"k2", b"ya", 2, 0, 1), (None, b"xb", 3, 1, 0)])
    assert [(r["key"], r["value"]) for r in out] == [(b"k1", b"xa"), (None, b"xb")]


def test_select_key_keeps_the_value_bytes():
    stage = RecordStage(
        ops=(op(RecordOpKind.SELECT_KEY, lambda k, v: v["origin"]),),
        in_key=STR,
        in_value=SerdeCodec(Serdes.json()),
        out_key=STR,
        out_value=SerdeCodec(Serdes.json()),
    )
    raw = b'{"origin":"JFK", "x": 1}'
    assert [(r["key"], r["value"]) for r in run(stage, [(b"UA1", raw, 0, 0, 0)])] == [(b"JFK", raw)]


def test_peek_sees_every_record_and_passes_it_on():
    seen = []
    stage = RecordStage(
        ops=(op(RecordOpKind.PEEK, lambda k, v: seen.append((k, v))),),
        in_key=STR,
        in_value=STR,
        out_key=STR,
        out_value=STR,
    )
    assert len(run(stage, [(b"a", b"1", 0, 0, 0), (b"b", None, 0, 0, 1)])) == 2
    assert seen == [("a", "1"), ("b", None)]


def test_undeserializable_record_fails_naming_topic_partition_offset():
    stage = RecordStage(
        ops=(op(RecordOpKind.MAP_VALUES, lambda v: v + 1),),
        in_key=STR,
        in_value=SerdeCodec(Serdes.long()),
        out_key=STR,
        out_value=PickleCodec(),
        source_errors="fail",
    )
    good = (1).to_bytes(8, "big")
    with pytest.raises(
        DeserializationError, match=r"topic 'in' partition 2 offset 41: .*LongDeserializer"
    ):
        run(stage, [(b"k", good, 0, 2, 40), (b"k", b"bad", 0, 2, 41)])


def test_log_and_continue_skips_and_marks_the_bad_record():
    stage = RecordStage(
        ops=(op(RecordOpKind.MAP_VALUES, lambda v: v + 1),),
        in_key=STR,
        in_value=SerdeCodec(Serdes.long()),
        out_key=STR,
        out_value=SerdeCodec(Serdes.long()),
        source_errors="continue",
        emit_dropped=True,
    )
    out = run(stage, [(b"k", (1).to_bytes(8, "big"), 0, 0, 0), (b"k", b"bad", 0, 0, 1)])
    kept = [r for r in out if r["dropped"] is None]
    dropped = [r for r in out if r["dropped"] is not None]
    assert [int.from_bytes(r["value"], "big") for r in kept] == [2]
    assert [(r["offset"], r["dropped"]) for r in dropped] == [(1, "deserialization")]


def test_user_exception_names_the_operator():
    stage = RecordStage(
        ops=(op(RecordOpKind.MAP_VALUES, lambda v: 1 / 0),),
        in_key=STR,
        in_value=STR,
        out_key=STR,
        out_value=PickleCodec(),
    )
    with pytest.raises(StreamsError, match=r"ZeroDivisionError.*in operator 'node-map_values'"):
        run(stage, [(b"k", b"v", 0, 0, 0)])


def partitioning_stage(partitioner):
    """A stage that only partitions string records for a sink topic of 3 partitions."""
    return RecordStage(
        ops=(),
        in_key=STR,
        in_value=STR,
        out_key=STR,
        out_value=STR,
        partitioner=partitioner,
        num_partitions=3,
    )


def test_custom_partitioner_fills_sink_partition():
    stage = partitioning_stage(lambda k, v, n: len(v) % n)
    out = run(stage, [(b"a", b"xxxx", 0, 0, 0), (b"b", b"xx", 0, 0, 1)])
    assert [r["sink_partition"] for r in out] == [1, 2]


@pytest.mark.parametrize("returned", [{1, 2}, set(), 1.0, True])
def test_a_partitioner_returning_anything_but_one_partition_or_none_is_named(returned):
    # Kafka Streams' multicast (KIP-837: a set of partitions) is not supported; a set used to
    # raise a bare TypeError, a float or a bool passed
    stage = partitioning_stage(lambda k, v, n: returned)
    with pytest.raises(
        StreamsError,
        match=r"The partitioner returned .* for key 'a'; it must "
        r"return one partition \(an int from 0 to 2\) or None .*KIP-837",
    ):
        run(stage, [(b"a", b"x", 0, 0, 0)])


@pytest.mark.parametrize("session", [False, True], ids=["time", "session"])
def test_a_windowed_sink_keeps_the_key_bytes_and_partitions_by_the_inner_key(session, monkeypatch):
    """A windowed aggregation's updates going to a sink with its windowed serde: the internal
    key bytes are the serde's already (passed through, not decoded and encoded again), and
    each record's partition is Kafka Streams' ``WindowedStreamPartitioner``'s (the inner key's
    murmur2), computed from the bytes; a null key goes to the producer.
    """
    if session:
        internal, serde = SessionWindowedCodec(STR), Serdes.session_windowed(Serdes.string())
    else:
        internal = WindowedCodec(STR, 60_000)
        serde = Serdes.time_windowed(Serdes.string(), 60_000)
    windows = [Windowed(f"user-{i}", i * 60_000, i * 60_000 + 60_000) for i in range(40)]
    stage = RecordStage(
        ops=(),
        in_key=internal,
        in_value=PickleCodec(),
        out_key=SerdeCodec(serde),
        out_value=SerdeCodec(Serdes.long()),
        partitioner=windowed_partitioner(SerdeCodec(serde)),
        num_partitions=7,
    )
    keys = internal.encode_many(windows) + [None]
    # from the bytes: never one call per deserialized key
    monkeypatch.setattr(WindowedPartitioner, "__call__", lambda *a: pytest.fail("called per key"))
    out = run(stage, [(k, pickle.dumps(i), i) for i, k in enumerate(keys)])
    assert [r["key"] for r in out] == [serde.serialize(w) for w in windows] + [None]
    assert [r["value"] for r in out] == [Serdes.long().serialize(i) for i in range(41)]
    assert [r["sink_partition"] for r in out] == [
        default_partition(w.key.encode(), 7) for w in windows
    ] + [None]


def test_windowed_codec_matches_kafka_time_windowed_serde():
    codec = WindowedCodec(STR, 3_600_000)
    w = Windowed("JFK", 7_200_000, 10_800_000)
    encoded = codec.encode_many([w])
    assert encoded == [Serdes.time_windowed(Serdes.string(), 3_600_000).serialize(w)]
    assert codec.decode_many(encoded) == [w]


def test_long_column_codec_is_identity():
    assert LongColumnCodec().decode_many([1, None]) == [1, None]


class _NoEquality:
    """A value that cannot be compared (as a numpy array's ``==`` gives no bool)."""

    def __eq__(self, other):
        raise TypeError("no ==")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["a", "b"], [b"", b""]),  # all present: built from one buffer
        (["a", None, "c"], [b"", None, b""]),
        ([_NoEquality(), None], [b"", None]),
        ([_NoEquality()], [b""]),
    ],
)
def test_a_native_counts_input_carries_only_whether_each_value_is_null(values, expected):
    from streamtable.compiler.codecs import PresenceCodec

    stage = RecordStage(
        ops=(op(RecordOpKind.FLAT_MAP_VALUES, lambda _v: values),),
        in_key=STR,
        in_value=STR,
        out_key=STR,
        out_value=PresenceCodec(),
    )
    out = run(stage, [(b"k", b"line", 1, 0, 0)])
    assert [r["value"] for r in out] == expected
    assert [r["key"] for r in out] == [b"k"] * len(expected)
