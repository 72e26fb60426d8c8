"""The ``transformWithState`` operator running a ``KStream.process`` node: one Kafka Streams
task per input partition.

Kafka Streams runs a processor as one instance per task, a task per input partition (task
``i`` reads partition ``i`` of each source topic), each with its own slice of every connected
store and its own stream time. streamtable does the same: :class:`TaskPack` groups the input
records by source partition, and the operator's grouping key is that task number. Per task
and micro-batch, :func:`~.processor_pages.run_page` creates a processor instance when the task
has records or a punctuation is due.

State of a task, two variables:

- ``meta`` (value state): pickled ``{"stream_time", "schedules", "run", "wall_clock",
  "timer"}``; ``run`` names the run of the application that saved the schedules (a restart
  schedules afresh, as Kafka Streams' ``init`` does: :func:`~.punctuation.schedules_for_run`);
- ``pages`` (map state): the task's stores split into :data:`STORE_PAGES` pages by key bytes,
  page number -> pickled ``{store name: {key bytes: value bytes}}``. A store operation loads
  only the page of its key (a scan loads all pages), and only changed pages are written back.

Stream time is the largest timestamp of the task's records so far (Kafka Streams'
``PartitionGroup`` stream time), its records taken in Kafka Streams' order
(:func:`~.records.arrival_order`). Wall-clock time is the micro-batch's processing time
(``TimerValues``), or, in the TopologyTestDriver, its mocked clock, which reaches every task
as tick rows (:class:`WallClockTicks`). When the processor schedules wall-clock punctuation,
the operator runs in Spark's ``ProcessingTime`` mode and keeps a processing-time timer at each
task's next wall-clock punctuation, so punctuation also fires when no records arrive.

Outputs (:data:`~.processor.OUTPUT_DDL`): forwarded records; store updates to log (``reason``
:data:`CHANGELOG`, ``topic`` = the store's name); counts of skipped records.
"""

from __future__ import annotations

import pickle
import struct
import time
import zlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from streamtable.compiler.paged.processor import _row, output_row, sync_timer
from streamtable.compiler.paged.processor_pages import (
    PROCESSING,
    ProcessorSpec,
    needs_run,
    run_page,
)
from streamtable.compiler.paged.punctuation import (
    WALL_CLOCK_TIME,
    ScheduleState,
    schedules_for_run,
)
from streamtable.compiler.paged.records import Rec, arrival_order

#: Input of the operator: records grouped by task, or a wall-clock tick for a task.
TASK_INPUT_DDL = "task int, value binary, wall_clock bigint"

#: ``reason`` of output rows that are store updates for the changelog.
CHANGELOG = "changelog"

META_VAR, PAGES_VAR = "meta", "pages"

#: Pages per task of the connected stores.
STORE_PAGES = 64

_TICK = struct.Struct(">q")


def store_page(key: bytes) -> int:
    """The page of a store key within its task.

    >>> store_page(b"alice")
    7
    """
    return zlib.crc32(key) % STORE_PAGES


@dataclass(frozen=True)
class TaskPack:
    """``mapInArrow``: the records of each Arrow batch grouped by task (source partition),
    one row per task holding its pickled :class:`~.records.Rec` list.
    """

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One row per task per batch."""
        for batch in batches:
            if not batch.num_rows:
                continue
            col = {n: batch.column(i).to_pylist() for i, n in enumerate(batch.schema.names)}
            tasks: dict[int, list[Rec]] = {}
            for i, key in enumerate(col["key"]):
                part = col["partition"][i]
                rec = Rec(
                    col["ts"][i],
                    col["topic"][i] or "",
                    -1 if part is None else part,
                    col["offset"][i] or 0,
                    col["seq"][i] or 0,
                    0,
                    key,
                    col["value"][i],
                )
                tasks.setdefault(max(part or 0, 0), []).append(rec)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(list(tasks), pa.int32()),
                    pa.array([pickle.dumps(r, protocol=5) for r in tasks.values()], pa.binary()),
                    pa.nulls(len(tasks), pa.int64()),
                ],
                names=["task", "value", "wall_clock"],
            )


@dataclass(frozen=True)
class WallClockTicks:
    """``mapInArrow`` over the driver's wall-clock topic: each tick (an 8-byte big-endian ms
    value) becomes one row per task, so every task sees the clock move.
    """

    tasks: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One row per task per tick."""
        for batch in batches:
            for v in batch.column(batch.schema.names.index("value")).to_pylist():
                (ms,) = _TICK.unpack(v)
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array(range(self.tasks), pa.int32()),
                        pa.nulls(self.tasks, pa.binary()),
                        pa.array([ms] * self.tasks, pa.int64()),
                    ],
                    names=["task", "value", "wall_clock"],
                )


def encode_tick(ms: int) -> bytes:
    """The value of a wall-clock tick record (8 bytes, big-endian ms).

    >>> encode_tick(1000).hex()
    '00000000000003e8'
    """
    return _TICK.pack(ms)


class TaskPages:
    """The task's store pages, loaded from the map state on first use."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.pages: dict[int, dict[str, dict[bytes, bytes]]] = {}
        self.dirty: set[int] = set()
        self.complete = False

    def page(self, p: int) -> dict[str, dict[bytes, bytes]]:
        """Page ``p`` (loaded if needed)."""
        got = self.pages.get(p)
        if got is None:
            stored = None if self.complete else self.state.getValue((p,))
            got = self.pages[p] = {} if stored is None else pickle.loads(stored[0])
        return got

    def load_all(self) -> None:
        """Load every page (for scans)."""
        if self.complete:
            return
        for (p,), (blob,) in self.state.iterator():
            if p not in self.pages:
                self.pages[p] = pickle.loads(blob)
        self.complete = True

    def save(self) -> None:
        """Write back the changed pages (empty ones removed)."""
        for p in self.dirty:
            page = {s: d for s, d in self.pages[p].items() if d}
            if page:
                self.state.updateValue((p,), (pickle.dumps(page, protocol=5),))
            else:
                self.state.removeKey((p,))
        self.dirty.clear()


class StoreData(MutableMapping):
    """One store's entries of a task (key bytes -> value bytes) over :class:`TaskPages`."""

    def __init__(self, pages: TaskPages, store: str) -> None:
        self._pages = pages
        self._store = store

    def _entries(self, key: bytes, create: bool = False) -> dict[bytes, bytes] | None:
        page = self._pages.page(store_page(key))
        if create:
            return page.setdefault(self._store, {})
        return page.get(self._store)

    def __getitem__(self, key: bytes) -> bytes:
        entries = self._entries(key)
        if entries is None:
            raise KeyError(key)
        return entries[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        entries = self._entries(key, create=True)
        assert entries is not None
        entries[key] = value
        self._pages.dirty.add(store_page(key))

    def __delitem__(self, key: bytes) -> None:
        entries = self._entries(key)
        if entries is None or key not in entries:
            raise KeyError(key)
        del entries[key]
        self._pages.dirty.add(store_page(key))

    def __iter__(self) -> Iterator[bytes]:
        self._pages.load_all()
        for page in list(self._pages.pages.values()):
            yield from list(page.get(self._store, ()))

    def __len__(self) -> int:
        self._pages.load_all()
        return sum(len(page.get(self._store, ())) for page in self._pages.pages.values())


class ProcessorApiProcessor(StatefulProcessor):
    """See the module doc."""

    def __init__(
        self,
        spec: ProcessorSpec,
        *,
        mocked_clock: bool,
        wall_clock_timers: bool,
        run_id: str = "",
    ) -> None:
        self.spec = spec
        self.mocked_clock = mocked_clock
        self.wall_clock_timers = wall_clock_timers
        #: the run of the application (a new one per compilation)
        self.run_id = run_id

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: D102
        self.handle = handle
        self.meta_state = handle.getValueState(META_VAR, "meta binary")
        self.pages_state = handle.getMapState(PAGES_VAR, "page int", "blob binary")

    def handleInputRows(  # noqa: D102, N802
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        records: list[Rec] = []
        tick = None
        for row in rows:
            if row.wall_clock is not None:
                tick = row.wall_clock if tick is None else max(tick, row.wall_clock)
            else:
                records.extend(pickle.loads(row.value))
        meta = self._load_meta()
        if tick is not None:
            meta["wall_clock"] = tick
        before = meta.get("stream_time")
        st = before
        ordered = []
        for rec in arrival_order(records):
            if st is None or rec.ts > st:
                st = rec.ts
            ordered.append(rec._replace(stream_time=st))
        meta["stream_time"] = st
        return iter(self._run(key[0], meta, ordered, before, st, timerValues))

    def handleExpiredTimer(  # noqa: D102, N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        meta = self._load_meta()
        meta["timer"] = None  # this one fired
        st = meta.get("stream_time")
        return iter(self._run(key[0], meta, [], st, st, timerValues))

    def _now(self, meta: dict[str, Any], timer_values: TimerValues) -> int | None:
        if self.mocked_clock:
            return meta.get("wall_clock")
        now = timer_values.getCurrentProcessingTimeInMs()
        return now if now is not None and now >= 0 else int(time.time() * 1000)

    def _run(
        self,
        task: int,
        meta: dict[str, Any],
        records: list[Rec],
        before: int | None,
        after: int | None,
        timer_values: TimerValues,
    ) -> list[Row]:
        now = self._now(meta, timer_values)
        schedules = schedules_for_run(meta, self.run_id)
        rows: list[Row] = []
        if needs_run(records, schedules, after, now):
            pages = TaskPages(self.pages_state)
            result = run_page(
                self.spec,
                task,
                records,
                lambda name: StoreData(pages, name),
                schedules,
                before,
                after,
                now,
            )
            meta["schedules"] = [s.to_tuple() for s in result.schedules]
            rows.extend(_row(o) for o in result.outputs)
            for store, changes in result.changes.items():
                for k, (v, ts) in changes.items():
                    rows.append(_changelog_row(store, k, v, ts))
            pages.save()
            if result.skipped:
                rows.append(_skipped_row(result.skipped))
            schedules = result.schedules
        if self.wall_clock_timers:
            self._set_timer(meta, schedules)
        self.meta_state.update((pickle.dumps(meta, protocol=5),))
        return rows

    def _load_meta(self) -> dict[str, Any]:
        stored = self.meta_state.get()
        return {} if stored is None else pickle.loads(stored[0])

    def _set_timer(self, meta: dict[str, Any], schedules: list[ScheduleState] | None) -> None:
        """Keep one processing-time timer at the task's next wall-clock punctuation."""
        want = min(
            (s.next for s in schedules or () if s.kind == WALL_CLOCK_TIME and not s.cancelled),
            default=None,
        )
        sync_timer(self.handle, meta, want)

    def close(self) -> None:  # noqa: D102
        pass


def _changelog_row(store: str, key: bytes, value: bytes | None, ts: int) -> Row:
    return output_row(key=key, value=value, ts=ts, seq=0, topic=store, reason=CHANGELOG)


def _skipped_row(n: int) -> Row:
    return output_row(dropped=n, reason=PROCESSING)
