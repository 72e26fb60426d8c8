"""The Python side of a fused chain of stateless operations, run by Spark's ``mapInArrow``.

A chain of consecutive record operations (filter, map, map_values, flat_map, flat_map_values,
peek, ...) becomes one :class:`RecordStage`: per Arrow batch it decodes the key and value
columns, applies each operation to whole lists (not per-row UDF calls), and encodes the output.
Columns not touched by the chain are passed through as raw bytes.

Pure Python and pyarrow: this module runs inside Spark's Python workers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.compiler.codecs import Codec, PresenceCodec, same_bytes
from streamtable.compiler.dead_letters import (
    DESERIALIZATION,
    PROCESSING,
    DeadLetter,
    DeadLetterSpec,
    DeadLetterWriter,
)
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

log = logging.getLogger("streamtable")

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


#: The types of values Arrow encodes as UTF-8 itself (str subclasses take the serde).
_STR_OR_NONE = frozenset({str, type(None)})
#: Extractors that return the record timestamp unchanged (no per-record call needed).
_RECORD_TIMESTAMP = (RecordTimestamp, LogAndSkipOnInvalidTimestamp, FailOnInvalidTimestamp)


def accepts_any_bytes(codec: Codec) -> bool:
    """Whether ``codec``'s serde deserializes any bytes (String replaces invalid UTF-8 as
    Java does; Bytes takes them as they are), so validating with it is never needed.
    """
    serde = codec.serde()
    return serde is not None and serde.kind in ("string", "bytes")


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
class _Batch:
    """The input columns of one Arrow batch a stage works on, and the dead letters it found."""

    raw_k: list[Any]
    raw_v: list[Any]
    ts: list[Any]
    part: list[Any]
    off: list[Any]
    topic: list[Any]
    letters: list[DeadLetter]

    def where(self, i: int) -> str:
        """Input record ``i``'s coordinates, for messages."""
        if self.topic[i] is None:
            return "a record produced by an upstream operator (no source coordinates)"
        return (
            f"the record at topic {self.topic[i]!r} partition {self.part[i]} offset {self.off[i]}"
        )


def _null_where_none(raw: pa.Array, decoded: list[Any] | None) -> pa.Array:
    """``raw`` (the input's bytes, passed through) with a null wherever the serde decoded the
    bytes to ``None``: a Debezium delete event, a JSON ``null``. Downstream operators tell
    tombstones and null keys by missing bytes, as Kafka Streams tells them by the
    deserialized ``null`` (``KTableSource`` deletes the key, aggregations skip the record).

    >>> _null_where_none(pa.array([b"1", b"null", None]), [1, None, None]).to_pylist()
    [b'1', None, None]
    """
    if decoded is None or decoded.count(None) == raw.null_count:
        return raw
    mask = pa.array([v is None for v in decoded], pa.bool_())
    return pc.if_else(mask, pa.scalar(None, raw.type), raw)


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
        When the input comes straight from a topic: what to do with a record whose key or value
        cannot be deserialized (Kafka Streams' ``LogAndFail`` / ``LogAndContinue``
        deserialization handlers); ``None`` otherwise. Source stages always deserialize both
        key and value, as Kafka Streams' source nodes do.
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
    emit_dropped : bool
        Append a row per reported dropped record (null key and value, a ``dropped`` reason)
        for the caller to count.
    processing_errors : {"fail", "continue"}
        What to do when user code (an operation or the timestamp extractor) raises on a
        record: stop with a :class:`StreamsError` naming the operator and the record (Kafka
        Streams' ``LogAndFailProcessingExceptionHandler``), or skip only that record, log a
        warning and report it as dropped ``processing`` (``LogAndContinue...``).
    source_name : str or None
        The source node (operator named for deserialization and timestamp-extractor errors).
    report_source : bool
        Whether this stage reports (counts, logs, dead-letters) the records it drops for the
        source's sake (deserialization, invalid timestamps, extractor errors). A source read
        by several queries is reported by the first one only; the others drop silently.
    unreported : frozenset of str
        Operations (node names) whose processing errors another stage already reports: such
        records are dropped silently here.
    dead_letters : DeadLetterSpec or None
        Where reported skipped records go (``errors.dead.letter.queue.topic.name``); with a
        dead-letter topic the record a ``fail`` handler stops on is written too (KIP-1034).

    Notes
    -----
    A batch is processed with one list-level call per operation. When user code raises under
    ``continue`` (or under ``fail``, to name the record), the failing operation is re-run
    record by record on that batch, so the other records of the batch go on; the functions of
    records before the failing one are then called twice (``peek``/``foreach`` are never
    re-run: they step over the failing record instead).
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
    processing_errors: str = "fail"
    source_name: str | None = None
    report_source: bool = True
    unreported: frozenset[str] = frozenset()
    dead_letters: DeadLetterSpec | None = None
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
        """Run the chain over Arrow batches; write dead letters at the end of the task."""
        schema = self._schema()
        kinds = {op.kind for op in self.ops}
        # a windowed sink's partitions come from the keys' bytes; a custom partitioner's from
        # the deserialized records
        over_bytes = getattr(self.partitioner, "over_bytes", None)
        by_bytes = (
            None if over_bytes is None else over_bytes(self.out_key.serde(), self.num_partitions)
        )
        by_records = self.partitioner is not None and by_bytes is None
        rekey = not same_bytes(self.in_key, self.out_key)
        revalue = not same_bytes(self.in_value, self.out_value)
        needs_key = bool(kinds & _KEY_OPS) or self.timestamp_extractor is not None
        needs_key = needs_key or by_records or rekey
        # a source stage deserializes key and value to validate them (Kafka Streams' source
        # node deserializes both), unless the serde accepts any bytes
        validate = self.source_errors is not None
        needs_key = needs_key or (validate and not accepts_any_bytes(self.in_key))
        key_changed = bool(kinds & KEY_CHANGING)
        value_changed = bool(kinds & VALUE_CHANGING)
        needs_value = bool(self.ops) or self.timestamp_extractor is not None
        needs_value = needs_value or by_records or revalue
        needs_value = needs_value or (validate and not accepts_any_bytes(self.in_value))
        writer = None if self.dead_letters is None else DeadLetterWriter(self.dead_letters)
        letters: list[DeadLetter] = []
        slot: str | None = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if slot is None and writer is not None and self.dead_letters.by_source_partition:
                    slot = f"{batch.column(6)[0].as_py()}-{batch.column(3)[0].as_py()}"
                out = self._run_batch(
                    batch,
                    schema,
                    needs_key or key_changed,
                    needs_value,
                    key_changed or rekey,
                    value_changed or revalue,
                    letters,
                    by_bytes,
                )
                if writer is not None and letters:
                    writer.write(letters, slot)
                    letters.clear()
                yield out
        except BaseException:
            if writer is not None:
                try:
                    writer.write(letters, slot)  # the dead letter of the record that stops it
                finally:
                    writer.fail()
            raise
        if writer is not None:
            writer.close()

    # -- one batch -----------------------------------------------------------------------

    def _run_batch(
        self,
        batch: pa.RecordBatch,
        schema: pa.Schema,
        needs_key: bool,
        needs_value: bool,
        key_changed: bool,
        value_changed: bool,
        letters: list[DeadLetter],
        by_bytes: Callable[[pa.Array], pa.Array] | None,
    ) -> pa.RecordBatch:
        raw_k, raw_v, ts_in, part, off, seq_in, topic = frame_columns(batch)
        cols = _Batch(raw_k, raw_v, ts_in, part, off, topic, letters)
        n = len(raw_k)
        # input rows dropped before the operations, with the reason to report (None: silent)
        dropped: dict[int, str | None] = {}
        # records the operations dropped (several per input row after a flat map), reported
        failures: list[tuple[int, str]] = []

        try:
            keys = self._decode(self.in_key, raw_k, "key", cols, dropped) if needs_key else raw_k
        except DeserializationError as e:
            if needs_value:
                self._fail_on_an_earlier_value(e, raw_v, cols, dropped)
            raise
        values = (
            self._decode(self.in_value, raw_v, "value", cols, dropped) if needs_value else raw_v
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
                new_ts, kept = self._extract(extract, K, V, ts, origin, cols, dropped)
                if kept is not None:  # the extractor raised on some records: they are gone
                    K, V, record_ts, origin = ([lst[j] for j in kept] for lst in (K, V, ts, origin))
                ts = new_ts
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
                    dropped[origin[j]] = "invalid_timestamp" if self.report_source else None
                keep = [j for j in range(len(K)) if j not in badset]
                K, V, ts, origin = ([lst[j] for j in keep] for lst in (K, V, ts, origin))
        elif self.invalid_timestamps == "fail":
            j = next((j for j, t in enumerate(ts) if t is None or t < 0), None)
            if j is not None:
                raise self._invalid_timestamp(ts[j], K[j], V[j], ts[j], origin[j], topic, part, off)

        for op in self.ops:
            K, V, ts, origin, sub = self._apply(op, K, V, ts, origin, sub, cols, failures)

        # Output columns: whatever derives from the input record goes through Arrow's take by
        # origin index (C speed); only changed keys/values are encoded from Python objects.
        take = pa.array(origin, pa.int64())
        if key_changed:
            out_k = self._encode_arrow(self.out_key, K, "key")
        else:
            out_k = _null_where_none(batch.column(0).take(take), K if needs_key else None)
        if value_changed:
            out_v = self._encode_arrow(self.out_value, V, "value")
        else:
            out_v = _null_where_none(batch.column(1).take(take), V if needs_value else None)
        out_ts = (
            batch.column(2).take(take)
            if self.timestamp_extractor is None
            else pa.array(ts, pa.int64())
        )
        out_seq = batch.column(5).take(take)
        if sub is not None:
            out_seq = pc.add(pc.multiply(out_seq, 1024), pa.array(sub, pa.int64()))
        arrays: list[pa.Array] = [
            out_k,
            out_v,
            out_ts,
            batch.column(3).take(take),
            batch.column(4).take(take),
            out_seq,
            batch.column(6).take(take),
        ]
        reported: list[tuple[int, str]] = []
        if self.emit_dropped:
            reported = [(i, r) for i, r in dropped.items() if r is not None] + failures
            gone = pa.array([i for i, _ in reported], pa.int64())
            for c in (0, 1):
                arrays[c] = pa.concat_arrays([arrays[c], pa.nulls(len(reported), pa.binary())])
            for c in (2, 3, 4, 5, 6):
                arrays[c] = pa.concat_arrays([arrays[c], batch.column(c).take(gone)])
            reasons = [None] * len(origin) + [r for _, r in reported]
            arrays.append(pa.array(reasons, pa.string()))
        if by_bytes is not None:
            arrays.append(by_bytes(arrays[0]))  # the reported rows' null keys: null partitions
        elif self.partitioner is not None:
            parts = self._partitions(K, V) + [None] * len(reported)
            arrays.append(pa.array(parts, pa.int32()))
        return pa.RecordBatch.from_arrays(
            [
                c.cast(f.type) if c.type != f.type else c
                for c, f in zip(arrays, schema, strict=True)
            ],
            schema=schema,
        )

    def _encode_arrow(self, codec: Codec, objs: list[Any], what: str) -> pa.Array:
        if isinstance(codec, PresenceCodec):
            # every value present (a native count's input): n empty binaries, from one buffer
            # (not `None in objs`: it would call each value's __eq__)
            if type(None) not in set(map(type, objs)):
                return _empty_binaries(len(objs))
            return pa.array(self._encode(codec, objs, what), pa.binary())
        serde = codec.serde()
        if serde is not None and serde.kind == "string" and set(map(type, objs)) <= _STR_OR_NONE:
            # Arrow encodes UTF-8 in C; lone surrogates (which Java replaces) take the slow path
            try:
                return pa.array(objs, pa.string()).cast(pa.binary())
            except (pa.ArrowException, UnicodeEncodeError, TypeError):
                pass
        return pa.array(self._encode(codec, objs, what), pa.binary())

    # -- bad records ---------------------------------------------------------------------

    def _letter(
        self, cols: _Batch, i: int, e: BaseException, operator: str, reason: str
    ) -> DeadLetter:
        """The dead letter of input record ``i``: its bytes when they are a user serde's (the
        source record's own bytes in a source stage), else null key and value.
        """
        return DeadLetter.of(
            e,
            key=cols.raw_k[i] if self.in_key.serde() is not None else None,
            value=cols.raw_v[i] if self.in_value.serde() is not None else None,
            timestamp=cols.ts[i],
            topic=cols.topic[i],
            partition=cols.part[i],
            offset=cols.off[i],
            operator=operator,
            reason=reason,
        )

    def _fail_on_an_earlier_value(
        self,
        e: DeserializationError,
        raw_v: list[Any],
        cols: _Batch,
        dropped: dict[int, str | None],
    ) -> None:
        """The log-and-fail handler stopped on the key of record ``e.record_index``: raise
        for an earlier record's bad value instead, if there is one (its dead letter replacing
        the key's), as Kafka Streams fails on the first bad record in offset order.
        """
        i = getattr(e, "record_index", None)
        if i is None or i == 0:
            return
        try:
            self.in_value.decode_many(raw_v[:i])
        except SerializationError:
            if self.dead_letters is not None and cols.letters:
                cols.letters.pop()  # the key's, appended just before it raised
            self._decode(self.in_value, raw_v[:i], "value", cols, dropped)  # raises

    def _decode(
        self,
        codec: Codec,
        raw: list[Any],
        what: str,
        cols: _Batch,
        dropped: dict[int, str | None],
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
                out.append(None)
                if i in dropped:  # its key was bad already
                    continue
                err = DeserializationError(
                    f"Failed to deserialize the {what} of {cols.where(i)}: {e}"
                )
                err.__cause__ = e
                report = self.report_source or self.source_errors == "fail"
                if report and self.dead_letters is not None:
                    cols.letters.append(self._letter(cols, i, err, self._source(), DESERIALIZATION))
                if self.source_errors == "fail":
                    failed = DeserializationError(
                        f"{err}. Kafka Streams' LogAndFail handler stops the application; set "
                        "'deserialization.exception.handler'='log_and_continue' to skip such "
                        "records (they are counted as dropped)."
                    )
                    failed.record_index = i  # type: ignore[attr-defined]
                    raise failed from e
                dropped[i] = DESERIALIZATION if self.report_source else None
                if self.report_source:
                    log.warning(
                        "Skipping %s: %s (deserialization.exception.handler=log_and_continue)",
                        cols.where(i),
                        err,
                    )
        return out

    def _source(self) -> str:
        return self.source_name or "source"

    def _processing_error(
        self,
        e: Exception,
        node: str,
        role: str,
        i: int,
        cols: _Batch,
        report: bool,
    ) -> None:
        """Record ``i`` made user code of ``node`` raise ``e``: raise the fail handler's error,
        or (continue) log it and add its dead letter when this stage reports ``node``.
        """
        fail = self.processing_errors != "continue"
        if self.dead_letters is not None and (report or fail):
            cols.letters.append(self._letter(cols, i, e, node, PROCESSING))
        if fail:
            raise StreamsError(
                f"User code raised {type(e).__name__}: {e} in {role} on {cols.where(i)}. "
                "Kafka Streams' default processing exception handler (LogAndFail) stops the "
                "application; set 'processing.exception.handler'='log_and_continue' to skip "
                "such records (they are counted as dropped 'processing')."
            ) from e
        if report:
            log.warning(
                "Skipping %s: user code raised %s: %s in %s "
                "(processing.exception.handler=log_and_continue)",
                cols.where(i),
                type(e).__name__,
                e,
                role,
            )

    def _one_by_one(
        self,
        run: Callable[..., tuple[Any, ...]],
        inputs: tuple[list[Any] | None, ...],
        width: int,
        origin: list[int],
        first: Exception,
        node: str,
        role: str,
        cols: _Batch,
        report: bool,
    ) -> tuple[tuple[Any, ...], list[int]]:
        """Re-run ``run`` (which raised ``first`` on the whole batch) record by record.

        Returns the concatenated ``width`` outputs and the indices of the records that
        passed. Under
        the ``fail`` handler the first failing record raises; if none fails this time (user
        code that is not deterministic), ``first`` does, naming the batch.
        """
        parts: list[tuple[Any, ...]] = []
        kept: list[int] = []
        for j in range(len(origin)):
            args = tuple(None if c is None else c[j : j + 1] for c in inputs)
            try:
                parts.append(run(*args))
            except StreamsError:
                raise
            except Exception as e:
                self._processing_error(e, node, role, origin[j], cols, report)
                continue
            kept.append(j)
        if len(kept) == len(origin) and self.processing_errors != "continue":
            where = cols.where(origin[0]) if origin else "an empty batch"
            raise StreamsError(
                f"User code raised {type(first).__name__}: {first} in {role} on a batch "
                f"starting at {where} (not again when re-run record by record). Kafka "
                "Streams' default processing exception handler (LogAndFail) stops the "
                "application."
            ) from first
        joined: list[Any] = []
        for c in range(width):
            pieces = [p[c] for p in parts]
            if pieces and all(x is None for x in pieces):
                joined.append(None)
            else:
                joined.append([x for piece in pieces if piece is not None for x in piece])
        return tuple(joined), kept

    def _extract(
        self,
        extract: Callable[..., Any],
        K: list[Any],
        V: list[Any],
        ts: list[int],
        origin: list[int],
        cols: _Batch,
        dropped: dict[int, str | None],
    ) -> tuple[list[Any], list[int] | None]:
        """The extractor's timestamps; records it raised on are dropped as ``processing``.

        Returns the timestamps of the kept records and their indices (``None``: all kept).
        """

        def run(K: list[Any], V: list[Any], ts: list[int]) -> tuple[list[Any]]:
            return ([extract(k, v, t) for k, v, t in zip(K, V, ts, strict=True)],)

        try:
            return run(K, V, ts)[0], None
        except StreamsError:
            raise
        except Exception as first:
            role = f"the timestamp extractor {describe_extractor(extract)} of {self._source()!r}"
            (new_ts,), kept = self._one_by_one(
                run, (K, V, ts), 1, origin, first, self._source(), role, cols, self.report_source
            )
        keptset = set(kept)
        for j, i in enumerate(origin):
            if j not in keptset:
                dropped[i] = PROCESSING if self.report_source else None
        return new_ts, kept

    # -- ops -----------------------------------------------------------------------------

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
            if p is not None and (isinstance(p, bool) or not isinstance(p, int)):
                raise StreamsError(
                    f"The partitioner returned {p!r} for key {k!r}; it must return one partition "
                    f"(an int from 0 to {n - 1}) or None for the default partitioner. Kafka "
                    "Streams' multicast (a set of partitions, KIP-837) is not supported: write "
                    "the record to each partition with a sink of its own."
                )
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

    def _apply(
        self,
        op: StageOp,
        K: list[Any],
        V: list[Any],
        ts: list[int],
        origin: list[int],
        sub: list[int] | None,
        cols: _Batch,
        failures: list[tuple[int, str]],
    ) -> tuple[list[Any], list[Any], list[int], list[int], list[int] | None]:
        fn = op.fn
        kind = op.kind
        report = op.node_name not in self.unreported
        role = f"operator {op.node_name!r}"

        def run(
            K: list[Any], V: list[Any], ts: list[int], origin: list[int], sub: list[int] | None
        ) -> tuple[list[Any], list[Any], list[int], list[int], list[int] | None]:
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
                    ks = [k] * n
                    vs = items
                else:
                    ks = [item[0] for item in items]
                    vs = [item[1] for item in items]
                nk.extend(ks)
                nv.extend(vs)
                nts.extend([ts[j]] * n)
                norigin.extend([origin[j]] * n)
                if sub is None:
                    nsub.extend(range(n))
                else:
                    b = sub[j] * 1024
                    nsub.extend(range(b, b + n))
            return nk, nv, nts, norigin, nsub

        if kind is RecordOpKind.PEEK:
            return self._peek(op, K, V, ts, origin, sub, cols, failures, report, role)
        try:
            return run(K, V, ts, origin, sub)
        except StreamsError:
            raise
        except Exception as first:
            out, kept = self._one_by_one(
                run, (K, V, ts, origin, sub), 5, origin, first, op.node_name, role, cols, report
            )
        if report:
            keptset = set(kept)
            failures.extend((origin[j], PROCESSING) for j in range(len(origin)) if j not in keptset)
        return out  # type: ignore[return-value]

    def _peek(
        self,
        op: StageOp,
        K: list[Any],
        V: list[Any],
        ts: list[int],
        origin: list[int],
        sub: list[int] | None,
        cols: _Batch,
        failures: list[tuple[int, str]],
        report: bool,
        role: str,
    ) -> tuple[list[Any], list[Any], list[int], list[int], list[int] | None]:
        """``peek``/``foreach``: called once per record, stepping over a record that raises
        (no re-run: the action has side effects).
        """
        fn = op.fn
        n = len(K)
        bad: list[int] = []
        j = 0
        while j < n:
            try:
                for j in range(j, n):  # noqa: B020 - resumes after a failing record
                    fn(K[j], V[j])
                j = n
            except StreamsError:
                raise
            except Exception as e:
                self._processing_error(e, op.node_name, role, origin[j], cols, report)
                bad.append(j)
                j += 1
        if not bad:
            return K, V, ts, origin, sub
        if report:
            failures.extend((origin[j], PROCESSING) for j in bad)
        badset = set(bad)
        keep = [j for j in range(n) if j not in badset]
        return (
            [K[j] for j in keep],
            [V[j] for j in keep],
            [ts[j] for j in keep],
            [origin[j] for j in keep],
            None if sub is None else [sub[j] for j in keep],
        )


def _empty_binaries(n: int) -> pa.Array:
    """``n`` empty (not null) binary values: one zeroed offsets buffer, no Python objects.

    >>> _empty_binaries(3).to_pylist()
    [b'', b'', b'']
    """
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(bytes(4 * (n + 1))), pa.py_buffer(b"")]
    )
