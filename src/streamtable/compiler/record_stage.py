"""The Python side of a fused chain of stateless operations, run by Spark's ``mapInArrow``.

A chain of consecutive record operations (filter, map, map_values, flat_map, flat_map_values,
peek, ...) becomes one :class:`RecordStage`: per Arrow batch it decodes the key and value
columns, applies each operation to whole lists (not per-row UDF calls), and encodes the output.
Columns not touched by the chain are passed through as raw bytes.

Pure Python and pyarrow: this module runs inside Spark's Python workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.compiler.codecs import Codec
from streamtable.dsl.timestamps import (
    MAX_TIMESTAMP,
    FailOnInvalidTimestamp,
    LogAndSkipOnInvalidTimestamp,
    RecordTimestamp,
    TimestampExtractor,
    describe_extractor,
    policy_of,
    valid_timestamp,
)
from streamtable.errors import DeserializationError, SerializationError, StreamsError
from streamtable.topology.nodes import RecordOpKind

#: Columns of every compiled frame (Spark DDL), in order.
FRAME_DDL = (
    "key binary, value binary, ts bigint, partition int, offset bigint, seq bigint, topic string"
)
#: Extra column of a stage's output: why the record was dropped (null when kept).
DROPPED_DDL = ", dropped string"
#: Extra column of a sink stage's output: the partition chosen by a custom partitioner.
SINK_PARTITION_DDL = ", sink_partition int"

_KEY_OPS = {
    RecordOpKind.FILTER,
    RecordOpKind.MAP,
    RecordOpKind.SELECT_KEY,
    RecordOpKind.FLAT_MAP,
    RecordOpKind.PEEK,
}
KEY_CHANGING = {RecordOpKind.MAP, RecordOpKind.SELECT_KEY, RecordOpKind.FLAT_MAP}
VALUE_CHANGING = {
    RecordOpKind.MAP,
    RecordOpKind.MAP_VALUES,
    RecordOpKind.FLAT_MAP,
    RecordOpKind.FLAT_MAP_VALUES,
}


#: Extractors that return the record timestamp unchanged (no per-record call needed).
_RECORD_TIMESTAMP = (RecordTimestamp, LogAndSkipOnInvalidTimestamp, FailOnInvalidTimestamp)


def frame_columns(batch: pa.RecordBatch) -> tuple[list[Any], ...]:
    """The frame columns of an Arrow batch as Python lists, in :data:`FRAME_DDL` order."""
    return tuple(batch.column(i).to_pylist() for i in range(7))


@dataclass(frozen=True)
class StageOp:
    """One operation of a chain: its kind, the user callable and the node it came from."""

    kind: RecordOpKind
    fn: Callable[..., Any]
    node_name: str


@dataclass(frozen=True)
class RecordStage:
    """A picklable function ``Iterator[RecordBatch] -> Iterator[RecordBatch]`` for mapInArrow.

    Parameters
    ----------
    ops : tuple of StageOp
        The operations, applied in order.
    in_key, in_value, out_key, out_value : Codec
        How input and output columns are encoded.
    source_errors : {"fail", "continue"} or None
        When the input comes straight from a topic: what to do with a record that cannot be
        deserialized (Kafka Streams' ``LogAndFail`` / ``LogAndContinue``); ``None`` otherwise.
    timestamp_extractor : callable, optional
        ``fn(key, value, record_ts) -> ts`` applied first (source stages only).
    invalid_timestamps : {"skip", "fail"} or None
        Source stages: the policy for records without a valid timestamp, unless the extractor
        has its own ``on_invalid`` (see :mod:`streamtable.dsl.timestamps`). ``"skip"`` drops
        invalid extractor results as ``invalid_timestamp`` (negative record timestamps without
        an extractor are left to the windowed aggregations, which drop them as
        ``negative_timestamp``); ``"fail"`` raises a :class:`StreamsError` naming the first
        such record. ``None``: no check.
    partitioner : callable, optional
        ``fn(key, value, num_partitions) -> int | None`` for a sink; ``num_partitions`` gives
        the sink topic's partition count.
    """

    ops: tuple[StageOp, ...]
    in_key: Codec
    in_value: Codec
    out_key: Codec
    out_value: Codec
    source_errors: str | None = None
    timestamp_extractor: Callable[..., int] | None = None
    invalid_timestamps: str | None = None
    partitioner: Callable[..., int | None] | None = None
    num_partitions: int = 0
    emit_dropped: bool = False
    _flags: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def output_ddl(self) -> str:
        """The Spark DDL of this stage's output."""
        ddl = FRAME_DDL
        if self.emit_dropped:
            ddl += DROPPED_DDL
        if self.partitioner is not None:
            ddl += SINK_PARTITION_DDL
        return ddl

    def _schema(self) -> pa.Schema:
        fields = [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("ts", pa.int64()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("seq", pa.int64()),
            pa.field("topic", pa.string()),
        ]
        if self.emit_dropped:
            fields.append(pa.field("dropped", pa.string()))
        if self.partitioner is not None:
            fields.append(pa.field("sink_partition", pa.int32()))
        return pa.schema(fields)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Run the chain over Arrow batches."""
        schema = self._schema()
        kinds = {op.kind for op in self.ops}
        needs_key = bool(kinds & _KEY_OPS) or self.timestamp_extractor is not None
        needs_key = needs_key or self.partitioner is not None or self.in_key != self.out_key
        key_changed = bool(kinds & KEY_CHANGING)
        value_changed = bool(kinds & VALUE_CHANGING)
        needs_value = bool(self.ops) or self.timestamp_extractor is not None
        needs_value = needs_value or self.partitioner is not None or self.in_value != self.out_value
        needs_value = needs_value or self.source_errors is not None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            yield self._run_batch(
                batch, schema, needs_key or key_changed, needs_value, key_changed, value_changed
            )

    # -- one batch -----------------------------------------------------------------------

    def _run_batch(
        self,
        batch: pa.RecordBatch,
        schema: pa.Schema,
        needs_key: bool,
        needs_value: bool,
        key_changed: bool,
        value_changed: bool,
    ) -> pa.RecordBatch:
        raw_k, raw_v, ts_in, part, off, seq_in, topic = frame_columns(batch)
        n = len(raw_k)
        dropped: dict[int, str] = {}

        keys = (
            self._decode(self.in_key, raw_k, "key", topic, part, off, dropped)
            if needs_key
            else raw_k
        )
        values = (
            self._decode(self.in_value, raw_v, "value", topic, part, off, dropped)
            if needs_value
            else raw_v
        )
        origin = [i for i in range(n) if i not in dropped] if dropped else list(range(n))
        K = [keys[i] for i in origin]
        V = [values[i] for i in origin]
        ts = [ts_in[i] for i in origin]
        sub: list[int] | None = None

        if self.timestamp_extractor is not None:
            extract = self.timestamp_extractor
            record_ts = ts
            if type(extract) not in _RECORD_TIMESTAMP:  # those return ts as it is
                ts = self._guard(
                    None,
                    lambda: [extract(k, v, t) for k, v, t in zip(K, V, ts, strict=True)],
                    K,
                    V,
                    origin,
                    topic,
                    part,
                    off,
                )
            checked = [
                t if type(t) is int and 0 <= t <= MAX_TIMESTAMP else valid_timestamp(t) for t in ts
            ]
            bad = [j for j, t in enumerate(checked) if t is None]
            if bad and policy_of(extract, self.invalid_timestamps) == "fail":
                j = bad[0]
                raise self._invalid_timestamp(
                    ts[j], K[j], V[j], record_ts[j], origin[j], topic, part, off
                )
            ts = checked
            if bad:
                badset = set(bad)
                for j in bad:
                    dropped[origin[j]] = "invalid_timestamp"
                keep = [j for j in range(len(K)) if j not in badset]
                K, V, ts, origin = ([lst[j] for j in keep] for lst in (K, V, ts, origin))
        elif self.invalid_timestamps == "fail":
            j = next((j for j, t in enumerate(ts) if t is None or t < 0), None)
            if j is not None:
                raise self._invalid_timestamp(ts[j], K[j], V[j], ts[j], origin[j], topic, part, off)

        for op in self.ops:
            K, V, ts, origin, sub = self._apply(op, K, V, ts, origin, sub, topic, part, off)

        # Output columns: whatever derives from the input record goes through Arrow's take by
        # origin index (C speed); only changed keys/values are encoded from Python objects.
        take = pa.array(origin, pa.int64())
        if key_changed or self.in_key != self.out_key:
            out_k = self._encode_arrow(self.out_key, K, "key")
        else:
            out_k = batch.column(0).take(take)
        if value_changed or self.in_value != self.out_value:
            out_v = self._encode_arrow(self.out_value, V, "value")
        else:
            out_v = batch.column(1).take(take)
        out_ts = (
            batch.column(2).take(take)
            if self.timestamp_extractor is None
            else pa.array(ts, pa.int64())
        )
        out_seq = batch.column(5).take(take)
        if sub is not None:
            out_seq = pc.add(pc.multiply(out_seq, 1024), pa.array(sub, pa.int64()))
        cols: list[pa.Array] = [
            out_k,
            out_v,
            out_ts,
            batch.column(3).take(take),
            batch.column(4).take(take),
            out_seq,
            batch.column(6).take(take),
        ]
        if self.emit_dropped:
            gone = pa.array(list(dropped), pa.int64())
            for c in (0, 1):
                cols[c] = pa.concat_arrays([cols[c], pa.nulls(len(dropped), pa.binary())])
            for c in (2, 3, 4, 5, 6):
                cols[c] = pa.concat_arrays([cols[c], batch.column(c).take(gone)])
            cols.append(pa.array([None] * len(origin) + list(dropped.values()), pa.string()))
        if self.partitioner is not None:
            parts = self._partitions(K, V) + [None] * len(dropped if self.emit_dropped else ())
            cols.append(pa.array(parts, pa.int32()))
        return pa.RecordBatch.from_arrays(
            [c.cast(f.type) if c.type != f.type else c for c, f in zip(cols, schema, strict=True)],
            schema=schema,
        )

    def _encode_arrow(self, codec: Codec, objs: list[Any], what: str) -> pa.Array:
        serde = codec.serde()
        if (
            serde is not None
            and serde.kind == "string"
            and all(type(o) is str or o is None for o in objs)
        ):
            # Arrow encodes UTF-8 in C; lone surrogates (which Java replaces) take the slow path
            try:
                return pa.array(objs, pa.string()).cast(pa.binary())
            except (pa.ArrowException, UnicodeEncodeError, TypeError):
                pass
        return pa.array(self._encode(codec, objs, what), pa.binary())

    def _decode(
        self,
        codec: Codec,
        raw: list[Any],
        what: str,
        topic: Sequence[str],
        part: Sequence[int],
        off: Sequence[int],
        dropped: dict[int, str],
    ) -> list[Any]:
        try:
            return codec.decode_many(raw)
        except SerializationError:
            if self.source_errors is None:
                raise
        # find the bad records one by one, then fail or skip them
        out: list[Any] = []
        for i, d in enumerate(raw):
            try:
                out.extend(codec.decode_many([d]))
            except SerializationError as e:
                if self.source_errors == "fail":
                    raise DeserializationError(
                        f"Failed to deserialize the {what} of the record at topic {topic[i]!r} "
                        f"partition {part[i]} offset {off[i]}: {e}. Kafka Streams' LogAndFail "
                        "handler stops the application; set "
                        "'default.deserialization.exception.handler'='log_and_continue' to skip "
                        "such records (they are counted as dropped)."
                    ) from e
                dropped[i] = "deserialization"
                out.append(None)
        return out

    def _encode(self, codec: Codec, objs: list[Any], what: str) -> list[Any]:
        try:
            return codec.encode_many(objs)
        except SerializationError as e:
            raise SerializationError(
                f"Failed to serialize a {what} for the next operator: {e}. Pass a serde that "
                f"fits the {what} type (key_serde=/value_serde=)."
            ) from e

    def _partitions(self, K: list[Any], V: list[Any]) -> list[int | None]:
        fn, n = self.partitioner, self.num_partitions
        assert fn is not None
        out = []
        for k, v in zip(K, V, strict=True):
            p = fn(k, v, n)
            if p is not None and not (0 <= p < n):
                raise StreamsError(
                    f"The partitioner returned partition {p} for key {k!r}; the sink topic has "
                    f"{n} partitions (0..{n - 1})."
                )
            out.append(p)
        return out

    def _invalid_timestamp(
        self,
        got: Any,
        key: Any,
        value: Any,
        record_ts: Any,
        i: int,
        topic: Sequence[str],
        part: Sequence[int],
        off: Sequence[int],
    ) -> StreamsError:
        """The error of the ``"fail"`` policy for record ``i`` of the batch."""
        extract = self.timestamp_extractor
        where = f"topic {topic[i]!r} partition {part[i]} offset {off[i]}"
        if extract is None:
            what = f"The record at {where} has the invalid timestamp {got!r}"
            why = "its Kafka record timestamp (-1 means none was set)"
        else:
            what = (
                f"The timestamp extractor {describe_extractor(extract)} returned {got!r} for "
                f"the record at {where}"
            )
            why = ""
            if isinstance(extract, TimestampExtractor):
                why = extract.explain_invalid(key, value, record_ts)
        if getattr(extract, "on_invalid", None) == "fail":
            fix = (
                "of the extractor ('fail') stops the application; give it on_invalid='skip' "
                "(or use LogAndSkipOnInvalidTimestamp for the record timestamp) to skip such "
                "records"
            )
        else:
            fix = (
                "'streamtable.invalid.timestamp.policy'='fail' (Kafka Streams' "
                "FailOnInvalidTimestamp) stops the application; set it to 'skip' to skip such "
                "records"
            )
        counter = "negative_timestamp" if extract is None else "invalid_timestamp"
        return StreamsError(
            f"{what}{f' ({why})' if why else ''}: a timestamp must be an int >= 0 (ms since "
            f"the epoch). The invalid-timestamp policy {fix} (counted as dropped "
            f"{counter!r})."
        )

    def _guard(
        self,
        node: str | None,
        thunk: Callable[[], Any],
        K: list[Any],
        V: list[Any],
        origin: list[int],
        topic: Sequence[str],
        part: Sequence[int],
        off: Sequence[int],
    ) -> Any:
        try:
            return thunk()
        except (StreamsError, SerializationError):
            raise
        except Exception as e:
            where = f" in operator {node!r}" if node else " in the timestamp extractor"
            src = origin[0] if origin else None
            coords = (
                ""
                if src is None
                else f" (a record of batch starting at topic {topic[src]!r} partition "
                f"{part[src]} offset {off[src]})"
            )
            raise StreamsError(
                f"User code raised {type(e).__name__}: {e}{where}{coords}. Kafka Streams' "
                "default processing exception handler (LogAndFail) stops the application."
            ) from e

    def _apply(
        self,
        op: StageOp,
        K: list[Any],
        V: list[Any],
        ts: list[int],
        origin: list[int],
        sub: list[int] | None,
        topic: Sequence[str],
        part: Sequence[int],
        off: Sequence[int],
    ) -> tuple[list[Any], list[Any], list[int], list[int], list[int] | None]:
        fn = op.fn
        kind = op.kind

        def run() -> tuple[list[Any], list[Any], list[int], list[int], list[int] | None]:
            if kind is RecordOpKind.FILTER:
                keep = [j for j, (k, v) in enumerate(zip(K, V, strict=True)) if fn(k, v)]
                return (
                    [K[j] for j in keep],
                    [V[j] for j in keep],
                    [ts[j] for j in keep],
                    [origin[j] for j in keep],
                    None if sub is None else [sub[j] for j in keep],
                )
            if kind is RecordOpKind.MAP_VALUES:
                return K, [fn(v) for v in V], ts, origin, sub
            if kind is RecordOpKind.SELECT_KEY:
                return [fn(k, v) for k, v in zip(K, V, strict=True)], V, ts, origin, sub
            if kind is RecordOpKind.MAP:
                pairs = [fn(k, v) for k, v in zip(K, V, strict=True)]
                return [p[0] for p in pairs], [p[1] for p in pairs], ts, origin, sub
            if kind is RecordOpKind.PEEK:
                for k, v in zip(K, V, strict=True):
                    fn(k, v)
                return K, V, ts, origin, sub
            # flat maps: whole lists per input record (C-level extends, not per-item appends)
            nk: list[Any] = []
            nv: list[Any] = []
            nts: list[int] = []
            norigin: list[int] = []
            nsub: list[int] = []
            values_only = kind is RecordOpKind.FLAT_MAP_VALUES
            for j, (k, v) in enumerate(zip(K, V, strict=True)):
                items = fn(v) if values_only else fn(k, v)
                if items is None:
                    continue
                items = items if isinstance(items, list) else list(items)
                n = len(items)
                if not n:
                    continue
                if values_only:
                    nk.extend([k] * n)
                    nv.extend(items)
                else:
                    nk.extend([item[0] for item in items])
                    nv.extend([item[1] for item in items])
                nts.extend([ts[j]] * n)
                norigin.extend([origin[j]] * n)
                if sub is None:
                    nsub.extend(range(n))
                else:
                    b = sub[j] * 1024
                    nsub.extend(range(b, b + n))
            return nk, nv, nts, norigin, nsub

        return self._guard(op.node_name, run, K, V, origin, topic, part, off)
