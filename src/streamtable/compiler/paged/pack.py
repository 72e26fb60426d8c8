"""Packing a frame's records by state page and key for a paged processor (``mapInArrow``)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from streamtable.compiler.pack_stage import page_of
from streamtable.compiler.paged.records import Rec

#: Output of the pack stage; ``event_time`` is the latest record timestamp of the row.
PAGED_DDL = "page int, value binary, ts bigint, event_time timestamp"


@dataclass(frozen=True)
class KernelPack:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]``: one row per page per Arrow batch.

    The row's ``value`` is ``pickle({group key: [Rec, ...]})``. The group key is the
    ``group_key`` column when present (a GlobalKTable lookup key), else ``key``. ``side``
    tags the records of one join input. Records without a group key (a left join's null-key
    stream records) are packed on page 0 under the group key ``None``: the kernel keeps no
    state for them.
    """

    side: int = 0

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Pack each non-empty batch."""
        for batch in batches:
            if batch.num_rows:
                yield self._pack(batch)

    def _pack(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        names = batch.schema.names
        col = {n: batch.column(i).to_pylist() for i, n in enumerate(names)}
        keys = col["key"]
        group_keys = col.get("group_key", keys)
        olds = col.get("old") or [None] * batch.num_rows
        pages: dict[int, dict[bytes, list[Rec]]] = {}
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
            page = 0 if gk is None else page_of(gk)
            pages.setdefault(page, {}).setdefault(gk, []).append(rec)
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
