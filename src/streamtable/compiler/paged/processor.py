"""The generic paged ``transformWithState`` processor: loads a page, runs its kernel per key.

A kernel implements ``process(group_key, records, entry, page_meta) -> (entry, outputs)``
where ``records`` are the key's :class:`~.records.Rec` of this micro-batch sorted by (ts,
topic, partition, offset, seq, side) (``group_key`` is ``None`` for records without one,
which never get state), ``entry`` is the key's state (``None`` when absent; a
returned ``None`` deletes it) and ``page_meta`` a dict shared by the page's keys (for
example a stream-time estimate). Optional: ``after_batch(entries, page_meta, watermark)``
for eviction, ``drops`` (a dict reason -> count the kernel fills).

State: one ``ValueState`` per page, ``pickle({"entries": {gk: entry}, "meta": {...}})``.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from streamtable.compiler.paged.records import time_order

#: Output schema: records/changes, plus rows with a null key counting dropped records.
OUTPUT_DDL = (
    "key binary, value binary, old binary, ts bigint, partition int, offset bigint, "
    "seq bigint, topic string, dropped bigint, reason string"
)


class PagedProcessor(StatefulProcessor):
    """Runs ``kernel`` over every key of a page; see the module doc."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: D102
        self.handle = handle
        self.state = handle.getValueState("page", "page binary")

    def _load(self) -> dict[str, Any]:
        stored = self.state.get()
        return pickle.loads(stored[0]) if stored is not None else {"entries": {}, "meta": {}}

    def _after(self, page: dict[str, Any], watermark: int) -> list[Row]:
        """The kernel's end-of-batch work, then (re)register the page timer it asks for."""
        after = getattr(self.kernel, "after_batch", None)
        if after is None:
            return []
        meta = page["meta"]
        rows = [_row(o) for o in after(page["entries"], meta, watermark)]
        want, have = meta.get("next_timer"), meta.get("timer")
        if want != have:
            if have is not None:
                self.handle.deleteTimer(have)
            if want is not None:
                self.handle.registerTimer(want)
            meta["timer"] = want
        return rows

    def _save(self, page: dict[str, Any]) -> None:
        if page["entries"] or page["meta"].get("timer") is not None:
            self.state.update((pickle.dumps(page, protocol=5),))
        else:
            self.state.clear()

    def handleExpiredTimer(  # noqa: D102, N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        page = self._load()
        page["meta"]["timer"] = None  # this one fired
        self.kernel.drops = {}
        rows = self._after(page, timerValues.getCurrentWatermarkInMs())
        self._save(page)
        return iter(rows)

    def handleInputRows(  # noqa: D102, N802
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        groups: dict[bytes | None, list[Any]] = {}
        for row in rows:
            for gk, recs in pickle.loads(row.value).items():
                groups.setdefault(gk, []).extend(recs)
        page = self._load()
        entries, meta = page["entries"], page["meta"]
        kernel = self.kernel
        kernel.drops = {}
        out: list[Row] = []
        for gk in sorted(groups, key=lambda g: (g is not None, g or b"")):
            records = sorted(groups[gk], key=time_order)
            entry, outs = kernel.process(gk, records, entries.get(gk), meta)
            if entry is None or gk is None:
                entries.pop(gk, None)
            else:
                entries[gk] = entry
            out.extend(_row(o) for o in outs)
        out.extend(self._after(page, timerValues.getCurrentWatermarkInMs()))
        self._save(page)
        for reason, n in kernel.drops.items():
            if n:
                out.append(
                    Row(
                        key=None,
                        value=None,
                        old=None,
                        ts=None,
                        partition=None,
                        offset=None,
                        seq=None,
                        topic=None,
                        dropped=n,
                        reason=reason,
                    )
                )
        return iter(out)

    def close(self) -> None:  # noqa: D102
        pass


def _row(o: Any) -> Row:
    return Row(
        key=o.key,
        value=o.value,
        old=o.old,
        ts=o.ts,
        partition=o.partition,
        offset=o.offset,
        seq=o.seq,
        topic=o.topic,
        dropped=0,
        reason=None,
    )
