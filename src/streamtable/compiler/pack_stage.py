"""Packing records by state page before a ``transformWithState`` aggregation.

Spark's Python ``transformWithState`` pays per group and per state call (a round trip to the
JVM's state server): measured ~2 ms per key on 2 cores with realistic payloads, which is far too
slow to keep one group per user key. So the state of a Python aggregation is *paged*: keys are
hashed (CRC-32 of the group key bytes, stable across processes) into :data:`STATE_PAGES` pages; a
page is one ``transformWithState`` group whose state holds the aggregates of all its keys. Before
the aggregation, each Arrow batch is packed into one row per page whose value maps each group key
to its records ``(value, ts, topic, partition, offset, seq)``; the processor unpacks and sorts
them, so the fold order is the same as record by record.

Pure Python and pyarrow: runs inside Spark's Python workers.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from streamtable.compiler.record_stage import frame_columns

#: Number of state pages of a Python aggregation. Part of the checkpoint layout: changing it
#: makes existing checkpoints incompatible (it is in the topology fingerprint).
STATE_PAGES = 128

#: Output of the pack stage.
PACKED_DDL = "page int, value binary, ts bigint"


def page_of(group_key: bytes) -> int:
    """The state page of a group key (stable across processes and Python versions)."""
    return zlib.crc32(group_key) % STATE_PAGES


@dataclass(frozen=True)
class PackStage:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]`` for ``mapInArrow``; see module doc."""

    def output_ddl(self) -> str:
        """The Spark DDL of the packed rows."""
        return PACKED_DDL

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Pack each batch's records by page and group key."""
        for batch in batches:
            if batch.num_rows:
                yield self._pack(batch)

    def _pack(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        keys, values, ts, part, off, seq, topic = frame_columns(batch)
        pages: dict[int, dict[bytes, list[tuple[Any, ...]]]] = {}
        for i, k in enumerate(keys):
            rec = (values[i], ts[i], topic[i] or "", part[i] or 0, off[i] or 0, seq[i])
            pages.setdefault(page_of(k), {}).setdefault(k, []).append(rec)
        max_ts = [max(r[1] for recs in groups.values() for r in recs) for groups in pages.values()]
        return pa.RecordBatch.from_arrays(
            [
                pa.array(list(pages), pa.int32()),
                pa.array([pickle.dumps(g, protocol=5) for g in pages.values()], pa.binary()),
                pa.array(max_ts, pa.int64()),
            ],
            names=["page", "value", "ts"],
        )
