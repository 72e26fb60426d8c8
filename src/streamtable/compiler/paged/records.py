"""The record tuple kernels receive, and the rows they emit."""

from __future__ import annotations

import heapq
from operator import itemgetter
from typing import Any, NamedTuple

import pyarrow as pa


class Rec(NamedTuple):
    """One input record of a kernel; tuples sort by (ts, topic, partition, offset, seq, side).

    ``side`` tells the inputs of a join apart (0 = left/stream, 1 = right/table); ``key`` is
    the record's own key (a stream record's key in a GlobalKTable join, where records are
    grouped by the lookup key); ``value``/``old`` are encoded bytes (``old``: the value before
    a table change, when the input carries it). ``stream_time`` is set for kernels that
    decide lateness (see :mod:`.partition_time`): the stream time of the record's source
    partition once the record is read, in ms; ``time_before`` the same just before it (``None``
    when nothing of the partition came before it), which tells a record that ties an earlier
    record's timestamp from one that moves stream time itself.
    """

    ts: int
    topic: str
    partition: int
    offset: int
    seq: int
    side: int
    key: bytes | None
    value: bytes | None
    old: bytes | None = None
    stream_time: int | None = None
    time_before: int | None = None


class Out(NamedTuple):
    """One output row: a record or a table change (``old`` set when the kernel tracks it)."""

    key: bytes | None
    value: bytes | None
    old: bytes | None
    ts: int
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    seq: int = 0

    @classmethod
    def of(
        cls,
        rec: Rec,
        key: bytes | None,
        value: bytes | None,
        old: bytes | None = None,
        ts: int | None = None,
    ) -> Out:
        """An output carrying ``rec``'s coordinates (so downstream order stays defined)."""
        # tuple.__new__: the named tuple's own __new__ is a Python call (one per output)
        return tuple.__new__(  # type: ignore[return-value]
            cls,
            (
                key,
                value,
                old,
                rec.ts if ts is None else ts,
                rec.topic,
                rec.partition,
                rec.offset,
                rec.seq,
            ),
        )


def time_order(rec: Rec) -> tuple[Any, ...]:
    """(ts, topic, partition, offset, seq, side): the order kernels receive a key's records
    in. Keys and values are never compared (a null key must not meet a bytes key); records
    tied on all six keep their input order.
    """
    return rec[:6]


def arrival_order(records: list[Rec]) -> list[Rec]:
    """The order Kafka Streams' task would process ``records`` in: offset order within each
    source partition, and across partitions the one whose next record has the smallest
    timestamp first (``PartitionGroup`` picks the partition with the smallest head timestamp).

    Records of a single partition keep their offset order whatever their timestamps, so a
    kernel folding in this order gives the same result however the input was cut into
    micro-batches.

    >>> r = lambda ts, p, off: Rec(ts, "t", p, off, 0, 0, b"k", None)
    >>> [(x.partition, x.offset) for x in arrival_order([r(9, 0, 1), r(5, 0, 2), r(7, 1, 0)])]
    [(1, 0), (0, 1), (0, 2)]
    """
    if len(records) < 2:
        return records[:]
    by_partition: dict[tuple[str, int], list[Rec]] = {}
    for rec in records:
        by_partition.setdefault((rec.topic, rec.partition), []).append(rec)
    if len(by_partition) == 1:
        return sorted(records, key=_SOURCE_ORDER)
    runs = [sorted(rs, key=_SOURCE_ORDER) for rs in by_partition.values()]
    # heapq.merge pops the smallest head and refills from the same run: head-timestamp picking
    return list(heapq.merge(*runs, key=_HEAD_ORDER))


def source_order(rec: Rec) -> tuple[Any, ...]:
    """Offset order: how Kafka Streams applies the updates of one table partition."""
    return (rec.topic, rec.partition, rec.offset, rec.seq)


#: :func:`source_order` and ``(ts, topic, partition)`` as sort keys called from C.
_SOURCE_ORDER = itemgetter(1, 2, 3, 4)
_HEAD_ORDER = itemgetter(0, 1, 2)


def frame_schema(*extra: tuple[str, pa.DataType]) -> pa.Schema:
    """The Arrow schema of a frame's columns (``FRAME_DDL``) followed by ``extra`` columns, for
    Python stages that build their output batches column by column (``mapInArrow`` matches
    columns by position).
    """
    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("ts", pa.int64()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("seq", pa.int64()),
            ("topic", pa.string()),
            *extra,
        ]
    )
