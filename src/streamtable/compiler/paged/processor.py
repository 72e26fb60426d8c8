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

import json
import pickle
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from streamtable.compiler.flat_row import FlatRow, ddl_columns
from streamtable.compiler.paged.partition_time import (
    advance_partition_times,
    low_watermark,
    resolve_stream_times,
    unpack_records,
)
from streamtable.compiler.paged.records import arrival_order, time_order

#: Drop reason of records that arrived for a closed window (Kafka Streams' dropped-records
#: metric for expired windows).
LATE = "late"

#: Output schema: records/changes, plus rows counting dropped records (``dropped`` > 0): a
#: count per reason with a null key, or one dropped record itself with its coordinates and a
#: JSON ``detail`` (kernels that report late records individually).
OUTPUT_DDL = (
    "key binary, value binary, old binary, ts bigint, partition int, offset bigint, "
    "seq bigint, topic string, dropped bigint, reason string, detail string"
)


class OutputRow(FlatRow):
    """A row of :data:`OUTPUT_DDL` (see :mod:`streamtable.compiler.flat_row`).

    >>> r = OutputRow(b"k", b"v", None, 5, 0, 7, 0, "t", 0, None, None)
    >>> r.ts, r.asDict(True)["topic"]
    (5, 't')
    """

    __fields__ = ddl_columns(OUTPUT_DDL)


#: The processors' state: one value state of this name per page (group), one column
#: ``page`` (binary) holding the pickled page.
STATE_VAR = "page"


def decode_page(blob: bytes | None) -> dict[str, Any]:
    """A page as :class:`PagedProcessor` stores it: ``{"entries": {group key: entry}, "meta":
    {...}}`` (``AggregateProcessor``'s pages have no ``meta``). Our own state, written by our
    own processors: unpickling it never touches topic data.

    >>> decode_page(pickle.dumps({"entries": {b"k": 1}, "meta": {}}))["entries"]
    {b'k': 1}
    >>> decode_page(None)
    {'entries': {}, 'meta': {}}
    """
    if blob is None:
        return {"entries": {}, "meta": {}}
    return pickle.loads(blob)


class PagedProcessor(StatefulProcessor):
    """Runs ``kernel`` over every key of a page; see the module doc."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: D102
        self.handle = handle
        self.state = handle.getValueState(STATE_VAR, "page binary")

    def _load(self) -> dict[str, Any]:
        stored = self.state.get()
        return decode_page(None if stored is None else stored[0])

    def _after(self, page: dict[str, Any], watermark: int) -> list[Row]:
        """The kernel's end-of-batch work, then (re)register the page timer it asks for."""
        after = getattr(self.kernel, "after_batch", None)
        if after is None:
            return []
        meta = page["meta"]
        rows = [_row(o) for o in after(page["entries"], meta, watermark)]
        sync_timer(self.handle, meta, meta.get("next_timer"))
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
            _unpack(row, groups)
        page = self._load()
        self.kernel.drops = {}
        out = self._process_keys(page, groups, lambda recs: sorted(recs, key=time_order))
        out.extend(self._after(page, timerValues.getCurrentWatermarkInMs()))
        self._save(page)
        out.extend(_drop_rows(self.kernel))
        return iter(out)

    def _process_keys(
        self,
        page: dict[str, Any],
        groups: dict[bytes | None, list[Any]],
        order: Callable[[list[Any]], list[Any]],
    ) -> list[Row]:
        """Run the kernel over each key's records (in ``order``), keeping the returned state."""
        entries, meta = page["entries"], page["meta"]
        out: list[Row] = []
        for gk in _key_order(groups):
            entry, outs = self.kernel.process(gk, order(groups[gk]), entries.get(gk), meta)
            if entry is None or gk is None:
                entries.pop(gk, None)
            else:
                entries[gk] = entry
            out.extend(map(_row, outs))
        return out

    def close(self) -> None:  # noqa: D102
        pass


class PartitionTimeProcessor(PagedProcessor):
    """A :class:`PagedProcessor` for kernels that decide lateness by partition time.

    Input rows come from :class:`~.partition_time.PartitionTimePack`: record rows and
    chunk-summary rows. Each record gets its partition's stream time, each key's records are
    handed over in arrival order (:func:`~.records.arrival_order`), and the kernel's
    ``after_batch`` receives the low watermark instead of Spark's watermark (the operator
    runs without Spark timers: stream time only advances with records, and every page hears
    of every record through the chunk summaries).
    """

    def handleInputRows(  # noqa: D102, N802
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        groups: dict[bytes | None, list[Any]] = {}
        chunks: list[Any] = []
        for row in rows:
            if row.chunks is not None:
                chunks.extend(pickle.loads(row.chunks))
            else:
                unpack_records(row.value, groups)
        page = self._load()
        times = page["meta"].setdefault("partition_times", {})
        groups = resolve_stream_times(groups, chunks, times)
        kernel = self.kernel
        kernel.drops = {}
        kernel.late = []
        out = self._process_keys(page, groups, arrival_order)
        advance_partition_times(times, chunks)
        low = low_watermark(times)
        out.extend(map(_row, kernel.after_batch(page["entries"], page["meta"], low)))
        self._save(page)
        out.extend(_drop_rows(kernel))
        return iter(out)

    def _save(self, page: dict[str, Any]) -> None:
        self.state.update((pickle.dumps(page, protocol=5),))  # partition times always


def sync_timer(handle: StatefulProcessorHandle, meta: dict[str, Any], want: int | None) -> None:
    """Keep the one timer a state group registers (``meta["timer"]``) at ``want`` (``None``:
    no timer): delete the old one, register the new one.
    """
    have = meta.get("timer")
    if want != have:
        if have is not None:
            handle.deleteTimer(have)
        if want is not None:
            handle.registerTimer(want)
        meta["timer"] = want


def _unpack(row: Row, groups: dict[bytes | None, list[Any]]) -> None:
    """Add a packed row's ``{group key: [Rec]}`` to ``groups``."""
    for gk, recs in pickle.loads(row.value).items():
        groups.setdefault(gk, []).extend(recs)


def _key_order(groups: dict[bytes | None, Any]) -> list[bytes | None]:
    """The group keys of ``groups`` in the order a page runs them: ``None`` (records without
    a group key) first, then by their bytes.

    >>> _key_order({b"b": 1, None: 2, b"a": 3})
    [None, b'a', b'b']
    """
    keys: list[bytes | None] = sorted(g for g in groups if g is not None)  # type: ignore[type-var]
    if None in groups:
        keys.insert(0, None)
    return keys


def _drop_rows(kernel: Any) -> list[Row]:
    """Rows reporting the kernel's dropped records: each late record the kernel kept (reason
    :data:`LATE`, one row each), then a count per reason not reported record by record.
    """
    rows = []
    individually: set[str] = set()
    for rec, detail in getattr(kernel, "late", ()):
        individually.add(LATE)
        rows.append(
            OutputRow(
                rec.key,
                rec.value,
                None,
                rec.ts,
                rec.partition,
                rec.offset,
                rec.seq,
                rec.topic,
                1,
                LATE,
                json.dumps(detail),
            )
        )
    for reason, n in kernel.drops.items():
        if n and reason not in individually:
            rows.append(output_row(dropped=n, reason=reason))
    return rows


#: The columns of :data:`OUTPUT_DDL` with their values in a row that sets none of them.
_NO_OUTPUT = dict.fromkeys(OutputRow.__fields__) | {"dropped": 0}


def output_row(**fields: Any) -> Row:
    """An output row with ``fields`` set and every other column null (``dropped`` 0).

    >>> output_row(dropped=3, reason="late").dropped
    3
    """
    unknown = fields.keys() - _NO_OUTPUT.keys()
    if unknown:
        raise TypeError(f"output_row: no column {sorted(unknown)} in {OUTPUT_DDL!r}")
    return OutputRow(*(_NO_OUTPUT | fields).values())


def _row(o: Any) -> Row:
    """The output row of a kernel's :class:`~.records.Out` (built with ``tuple.__new__``:
    one per output, where ``OutputRow(...)`` would add a Python call checking the length).

    >>> from streamtable.compiler.paged.records import Out
    >>> _row(Out(b"k", b"v", None, 5, "t", 0, 7)) == OutputRow(
    ...     b"k", b"v", None, 5, 0, 7, 0, "t", 0, None, None)
    True
    """
    return tuple.__new__(
        OutputRow,
        (o.key, o.value, o.old, o.ts, o.partition, o.offset, o.seq, o.topic, 0, None, None),
    )
