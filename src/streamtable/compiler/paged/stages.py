"""Python stages (``mapInArrow``) around paged operators: table ops on changes, re-grouping
a table for an aggregation, and computing GlobalKTable lookup keys.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from streamtable.compiler.codecs import Codec, PickleCodec
from streamtable.compiler.dead_letters import (
    PROCESSING,
    DeadLetter,
    DeadLetterSpec,
    DeadLetterWriter,
)
from streamtable.compiler.paged.records import frame_schema
from streamtable.compiler.paged.table_kernels import ADD, SUBTRACT
from streamtable.compiler.paged.user_code import user_code_error
from streamtable.errors import StreamsError
from streamtable.topology.nodes import TableOpKind

#: A frame whose ``old`` column holds the value before each change.
CHANGE_DDL = (
    "key binary, value binary, ts bigint, partition int, offset bigint, seq bigint, "
    "topic string, old binary"
)
#: :data:`CHANGE_DDL` plus whether user code raised on the change (``TableOpStage`` under
#: ``log_and_continue``): such rows are counted as ``processing`` and removed.
SKIPPING_CHANGE_DDL = CHANGE_DDL + ", skipped boolean"
LOOKUP_DDL = (
    "key binary, value binary, ts bigint, partition int, offset bigint, seq bigint, "
    "topic string, group_key binary"
)
_FRAME = ("key", "value", "ts", "partition", "offset", "seq", "topic")
_PICKLE = PickleCodec()
log = logging.getLogger("streamtable")


def _columns(batch: pa.RecordBatch) -> dict[str, list[Any]]:
    return {n: batch.column(i).to_pylist() for i, n in enumerate(batch.schema.names)}


def _error(e: Exception, node: str, role: str, col: dict[str, list[Any]], i: int) -> Exception:
    """The user-code error for row ``i`` (built only when user code raised)."""
    return user_code_error(e, node, role, col["topic"][i], col["partition"][i], col["offset"][i])


def apply_table_op(kind: TableOpKind, fn: Callable[..., Any], key: Any, value: Any) -> Any:
    """A table operation on one value: ``None`` (absent) stays ``None``, the function is
    never called for it (Kafka Streams' ``KTableFilter``/``KTableMapValues``).
    """
    if value is None:
        return None
    if kind is TableOpKind.FILTER:
        return value if fn(key, value) else None
    return fn(value)


class _TableOpFailed(Exception):
    """User code of table operation ``node`` (``role``) raised ``error`` on a change."""

    def __init__(self, error: Exception, node: str, role: str) -> None:
        super().__init__(error)
        self.error, self.node, self.role = error, node, role


@dataclass(frozen=True)
class TableOpStage:
    """A chain of table operations applied to new and old values of each change.

    Output: :data:`CHANGE_DDL`, values pickled. A ``filter`` after which a change's new and
    old values are both ``None`` forwards nothing (Kafka Streams' ``KTableFilter`` with old
    values enabled: a row that neither passes nor passed); ``map_values`` forwards every
    change, as ``KTableMapValues`` does.

    ``handled``: the changes are read as upserts, so ``processing.exception.handler`` covers
    the chain's user code. A change on which it raises is then written to the dead-letter
    topic (``dead_letters``; when another query reports the failing operator, listed in
    ``unreported``, only if the handler fails) and, with ``continue_on_error``
    (``log_and_continue``), logged and kept with ``skipped`` true
    (:data:`SKIPPING_CHANGE_DDL`), to be counted and removed (removed silently for an
    unreported operator); otherwise the error stops the application. The dead letter holds
    the change's key bytes (null unless the key has a user serde), a null value (the
    aggregate is held pickled) and the timestamp and coordinates of the record that made the
    change.
    """

    ops: tuple[tuple[TableOpKind, Callable[..., Any], str], ...]
    key_codec: Codec
    value_codec: Codec
    continue_on_error: bool = False
    handled: bool = False
    dead_letters: DeadLetterSpec | None = None
    unreported: frozenset[str] = frozenset()

    def _apply(self, key: Any, new: Any, old: Any) -> tuple[Any, Any] | None:
        """``(new, old)`` of a change after the chain, or ``None`` where a filter forwards
        nothing.

        Raises
        ------
        _TableOpFailed
            When user code raises.
        """
        for kind, fn, node in self.ops:
            try:
                new, old = apply_table_op(kind, fn, key, new), apply_table_op(kind, fn, key, old)
            except Exception as e:
                raise _TableOpFailed(e, node, kind.value) from e
            if kind is TableOpKind.FILTER and new is None and old is None:
                return None
        return new, old

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Apply the chain to every change of every batch."""
        writer = None if self.dead_letters is None else DeadLetterWriter(self.dead_letters)
        letters: list[DeadLetter] = []
        try:
            for batch in batches:
                out = self._batch(batch, letters)
                if writer is not None and letters:  # before the batch goes on, as RecordStage
                    writer.write(letters)
                    letters.clear()
                yield out
        except BaseException:
            if writer is not None:
                try:
                    writer.write(letters)  # the dead letter of the change that stops it
                finally:
                    writer.fail()
            raise
        if writer is not None:
            writer.close()

    def _batch(self, batch: pa.RecordBatch, letters: list[DeadLetter]) -> pa.RecordBatch:
        col = _columns(batch)
        keep: list[int] = []
        news: list[bytes | None] = []
        olds: list[bytes | None] = []
        keys = self.key_codec.decode_many(col["key"])
        new_in = self.value_codec.decode_many(col["value"])
        old_in = self.value_codec.decode_many(col["old"])
        skipped: list[bool] = []
        for i, k in enumerate(keys):
            try:
                vals = self._apply(k, new_in[i], old_in[i])
            except _TableOpFailed as failed:
                self._failed(failed, col, i, letters)
                if failed.node in self.unreported:
                    continue  # another query counts it
                vals = (None, None)
                skipped.append(True)
            else:
                if vals is None:
                    continue
                skipped.append(False)
            keep.append(i)
            news.append(vals[0])
            olds.append(vals[1])
        idx = pa.array(keep, pa.int64())
        arrays = [batch.column(batch.schema.get_field_index(n)).take(idx) for n in _FRAME]
        arrays[1] = pa.array(_PICKLE.encode_many(news), pa.binary())
        arrays.append(pa.array(_PICKLE.encode_many(olds), pa.binary()))
        names = [*_FRAME, "old"]
        if self.continue_on_error:
            arrays.append(pa.array(skipped, pa.bool_()))
            names.append("skipped")
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _failed(
        self, failed: _TableOpFailed, col: dict[str, list[Any]], i: int, letters: list[DeadLetter]
    ) -> None:
        """Change ``i`` made user code raise: add its dead letter, then raise the error that
        stops the application or (continue) log it.
        """
        e = failed.error
        if not (self.handled or self.continue_on_error):  # feeding a stateful operator
            raise _error(e, failed.node, failed.role, col, i) from e
        reports = failed.node not in self.unreported
        if self.dead_letters is not None and (reports or not self.continue_on_error):
            letter = DeadLetter.of(
                e,
                key=col["key"][i] if self.key_codec.serde() is not None else None,
                value=None,
                timestamp=col["ts"][i],
                topic=col["topic"][i],
                partition=col["partition"][i],
                offset=col["offset"][i],
                operator=failed.node,
                reason=PROCESSING,
            )
            letters.append(letter)
        where = _where(col, i)
        if not self.continue_on_error:
            raise StreamsError(
                f"User code raised {type(e).__name__}: {e} in operator {failed.node!r} "
                f"({failed.role}) on {where}. Kafka Streams' default processing exception "
                "handler (LogAndFail) stops the application; set "
                "'processing.exception.handler'='log_and_continue' to skip such changes "
                "(they are counted as dropped 'processing')."
            ) from e
        if reports:
            log.warning(
                "Skipping %s: user code raised %s: %s in operator %r (%s) "
                "(processing.exception.handler=log_and_continue)",
                where,
                type(e).__name__,
                e,
                failed.node,
                failed.role,
            )


def _where(col: dict[str, list[Any]], i: int) -> str:
    """The change ``i`` named by the record that made it."""
    topic = col["topic"][i]
    if topic is None:
        return "an update of an upstream stateful operator (no source topic, partition, offset)"
    return (
        f"the update made by the record at topic {topic!r} partition {col['partition'][i]} "
        f"offset {col['offset'][i]}"
    )


@dataclass(frozen=True)
class RegroupStage:
    """``KTable.group_by``: each change becomes a subtraction from the old group and an
    addition to the new one (in that order), keyed by the new key encoded with ``out_key``.

    Values become ``pickle((op, value))``; ``seq`` = 2 * seq + op keeps the order. Changes
    mapped to a ``None`` key are dropped (``dropped`` = ``"null_key"``); a selector that returns
    ``None``, or a pair with a ``None`` value, adds and subtracts nothing (Kafka Streams'
    ``KTableRepartitionMap`` forwards only pairs whose key and value are non-null).
    """

    selector: Callable[[Any, Any], tuple[Any, Any]]
    node_name: str
    key_codec: Codec
    value_codec: Codec
    out_key: Codec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Re-group every change of every batch."""
        for batch in batches:
            col = _columns(batch)
            keys = self.key_codec.decode_many(col["key"])
            by_op = (
                (SUBTRACT, self.value_codec.decode_many(col["old"])),
                (ADD, self.value_codec.decode_many(col["value"])),
            )
            rows: dict[str, list[Any]] = {n: [] for n in (*_FRAME, "dropped")}
            for i, k in enumerate(keys):
                for op, values in by_op:
                    v = values[i]
                    if v is None:
                        continue
                    try:
                        pair = self.selector(k, v)
                    except Exception as e:
                        raise _error(e, self.node_name, "group_by", col, i) from e
                    if pair is None:
                        continue  # KTableRepartitionMap skips a null pair
                    if not isinstance(pair, tuple) or len(pair) != 2:
                        raise TypeError(
                            f"KTable.group_by selector of {self.node_name!r} must return a "
                            f"(key, value) tuple; got {pair!r}."
                        )
                    nk, nv = pair
                    if nv is None:
                        continue  # nor is a null value added or subtracted (the same rule)
                    rows["key"].append(nk)
                    rows["value"].append(pickle.dumps((op, nv), protocol=5))
                    rows["ts"].append(col["ts"][i])
                    rows["partition"].append(col["partition"][i])
                    rows["offset"].append(col["offset"][i])
                    rows["seq"].append(2 * (col["seq"][i] or 0) + op)
                    rows["topic"].append(col["topic"][i])
                    rows["dropped"].append("null_key" if nk is None else None)
            rows["key"] = self.out_key.encode_many(rows["key"])
            yield pa.RecordBatch.from_pydict(rows, schema=_REGROUP_SCHEMA)


_REGROUP_SCHEMA = frame_schema(("dropped", pa.string()))


REGROUP_DDL = (
    "key binary, value binary, ts bigint, partition int, offset bigint, seq bigint, "
    "topic string, dropped string"
)


@dataclass(frozen=True)
class LookupKeyStage:
    """The GlobalKTable lookup key ``key_selector(key, value)`` of each stream record,
    encoded like the table's keys, in a ``group_key`` column (``None`` when it is null).
    """

    selector: Callable[[Any, Any], Any]
    node_name: str
    key_codec: Codec
    value_codec: Codec
    out_key: Codec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Add the lookup key column to every batch."""
        for batch in batches:
            col = _columns(batch)
            keys = self.key_codec.decode_many(col["key"])
            values = self.value_codec.decode_many(col["value"])
            lookup = []
            for i, (k, v) in enumerate(zip(keys, values, strict=True)):
                try:
                    lookup.append(self.selector(k, v))
                except Exception as e:
                    raise _error(e, self.node_name, "key_selector", col, i) from e
            lookup = self.out_key.encode_many(lookup)
            arrays = [batch.column(batch.schema.get_field_index(n)) for n in _FRAME]
            yield pa.RecordBatch.from_arrays(
                [*arrays, pa.array(lookup, pa.binary())], names=[*_FRAME, "group_key"]
            )
