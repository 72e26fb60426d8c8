"""Packing a frame's records by state page and key for a paged processor (``mapInArrow``)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.compiler.pack_stage import page_of
from streamtable.compiler.paged.records import Rec

#: Output of the pack stage; ``event_time`` is the latest record timestamp of the row.
PAGED_DDL = "page int, value binary, ts bigint, event_time timestamp"

#: With ``latest_per_key``, how many records (one per key, plus those without a key) a task
#: keeps before it packs what it has, checked after each Arrow batch: bounds the pack's
#: memory (to this plus one batch) when a first run reads a large table in one micro-batch.
LATEST_KEYS_PER_FLUSH = 50_000


def latest_order(rec: Rec) -> tuple[Any, ...]:
    """Which of a key's records a :class:`~.table_kernels.TableSourceKernel` keeps (and a
    :class:`~.join_kernels.TableTableJoinKernel` of each side): the last
    in offset order (:func:`~.records.source_order`), ties (records of a stateful upstream
    carry no offset) to the larger timestamp, then to the later arrival, as the processor's
    time sort followed by the kernel's stable offset sort picks it.
    """
    return (rec.topic, rec.partition, rec.offset, rec.seq, rec.ts)


@dataclass(frozen=True)
class KernelPack:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]``: one row per page per Arrow batch.

    The row's ``value`` is ``pickle({group key: [Rec, ...]})``. The group key is the
    ``group_key`` column when present (a GlobalKTable lookup key), else ``key``. ``side``
    tags the records of one join input. Records without a group key (a left join's null-key
    stream records) are packed on page 0 under the group key ``None``: the kernel keeps no
    state for them. With ``latest_per_key`` only each key's latest record of the task is
    packed (see :meth:`_pack_latest`).
    """

    side: int = 0
    latest_per_key: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Pack each non-empty batch (``latest_per_key``: the task's latest records)."""
        if self.latest_per_key:
            yield from self._pack_latest(batches)
            return
        for batch in batches:
            if batch.num_rows:
                pages: dict[int, dict[bytes | None, list[Rec]]] = {}
                for gk, rec in self._records(batch):
                    page = 0 if gk is None else page_of(gk)
                    pages.setdefault(page, {}).setdefault(gk, []).append(rec)
                yield _packed(pages)

    def _pack_latest(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Only the latest record (:func:`latest_order`) of each key of the task, packed at
        its end or every :data:`LATEST_KEYS_PER_FLUSH` records. For kernels that read
        nothing else of a key's batch (``TableSourceKernel``, and ``TableTableJoinKernel``
        per side; each side is packed on its own): the kernel's result is unchanged, and
        the shuffle and the processor see one record per key and task instead of every
        update (Kafka Streams' record cache keeps one per key as well). Records without a
        group key are all kept.
        """
        latest: dict[bytes | None, Rec] = {}
        unkeyed: list[Rec] = []
        for batch in batches:
            if not batch.num_rows:
                continue
            for gk, rec in self._records(batch_latest(batch)):
                if gk is None:
                    unkeyed.append(rec)
                    continue
                kept = latest.get(gk)
                if kept is None or latest_order(rec) >= latest_order(kept):
                    latest[gk] = rec
            if len(latest) + len(unkeyed) >= LATEST_KEYS_PER_FLUSH:
                yield _packed(_by_page(latest, unkeyed))
                latest, unkeyed = {}, []
        if latest or unkeyed:
            yield _packed(_by_page(latest, unkeyed))

    def _records(self, batch: pa.RecordBatch) -> Iterator[tuple[bytes | None, Rec]]:
        """Each row of ``batch`` as ``(group key, Rec)``."""
        names = batch.schema.names
        col = {n: batch.column(i).to_pylist() for i, n in enumerate(names)}
        keys = col["key"]
        group_keys = col.get("group_key", keys)
        olds = col.get("old") or [None] * batch.num_rows
        for i, gk in enumerate(group_keys):
            rec = Rec(
                col["ts"][i],
                col["topic"][i] or "",
                col["partition"][i] or 0,
                col["offset"][i] or 0,
                col["seq"][i] or 0,
                self.side,
                keys[i],
                col["value"][i],
                olds[i],
            )
            yield gk, rec


def batch_latest(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of ``batch`` :class:`KernelPack` keeps with ``latest_per_key``: each group
    key's latest (:func:`latest_order`; of rows tied on all of it, the later one) and every
    row without a group key, in their order in ``batch``. Sorted by Arrow, so that only
    these rows become Python objects.

    >>> b = pa.RecordBatch.from_pydict({"key": [b"a", b"b", b"a", None], "value": [b"1", b"2",
    ...     b"3", b"4"], "ts": [9, 1, 2, 3], "partition": [0, 0, 0, 0], "offset": [0, 1, 2, 3],
    ...     "seq": [0, 0, 0, 0], "topic": ["t"] * 4})
    >>> batch_latest(b).column(1).to_pylist()
    [b'2', b'3', b'4']
    """
    names = batch.schema.names
    n = batch.num_rows
    if n == 0:
        return batch

    def column(name: str) -> pa.Array:
        return batch.column(names.index(name))

    gk = column("group_key" if "group_key" in names else "key")
    table = pa.table(
        {
            "gk": gk,
            "topic": pc.fill_null(column("topic"), ""),
            "partition": pc.fill_null(column("partition"), 0),
            "offset": pc.fill_null(column("offset"), 0),
            "seq": pc.fill_null(column("seq"), 0),
            "ts": column("ts"),
            "row": pa.array(range(n), pa.int64()),
        }
    )
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in table.column_names])
    keys = gk.take(order)
    # the last row of each run of equal group keys; every row without one
    differs = pc.fill_null(pc.not_equal(keys.slice(0, n - 1), keys.slice(1)), True)
    last = pa.concat_arrays([differs, pa.array([True])])
    kept = pc.filter(order, pc.or_(last, pc.is_null(keys)))
    return batch.take(pc.take(kept, pc.sort_indices(kept)))


def _by_page(
    latest: dict[bytes | None, Rec], unkeyed: list[Rec]
) -> dict[int, dict[bytes | None, list[Rec]]]:
    """``{page: {group key: [Rec]}}`` of one record per key, plus the records without one."""
    pages: dict[int, dict[bytes | None, list[Rec]]] = {}
    for gk, rec in latest.items():
        pages.setdefault(page_of(gk), {})[gk] = [rec]  # type: ignore[arg-type]
    if unkeyed:
        pages.setdefault(0, {})[None] = unkeyed
    return pages


def _packed(pages: dict[int, dict[bytes | None, list[Rec]]]) -> pa.RecordBatch:
    """One row per page: ``pickle({group key: [Rec, ...]})`` and the latest timestamp."""
    max_ts = [max(r.ts for recs in g.values() for r in recs) for g in pages.values()]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(list(pages), pa.int32()),
            pa.array([pickle.dumps(g, protocol=5) for g in pages.values()], pa.binary()),
            pa.array(max_ts, pa.int64()),
            pa.array([t * 1000 for t in max_ts], pa.timestamp("us", tz="UTC")),
        ],
        names=["page", "value", "ts", "event_time"],
    )
