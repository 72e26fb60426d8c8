"""Kernel of sliding-window aggregations (``KStreamSlidingWindowAggregate``).

Kafka Streams' sliding windows ``[start, start + d]`` (both ends inclusive) exist only where a
record enters or leaves a window: each record at ``ts`` has its *left* window ``[ts - d, ts]``
and, when a later record falls within ``d`` of it, its *right* window ``[ts + 1, ts + 1 + d]``.
For each record (in arrival order) the kernel replays what Kafka Streams' processor does with
its window store (the reverse-iterator path, which the default stores support):

- stream time ``st`` (see :meth:`WindowKernel.stream_time`), close time ``st - grace``; a record
  whose latest possible window ``[ts, ts + d]`` ends before the close time is dropped (counted
  once);
- the windows of the key starting in ``[ts - 2d, ts + 1]``, by start descending: a window
  starting at ``ts + 1`` is the record's right window (already there); a window ending after
  ``ts`` contains the record and is updated (the first one's aggregate, before the update, is
  the content of the record's right window); a window ending at ``ts`` is the record's left
  window, updated (if its largest timestamp is ``ts`` already, nothing else is to be done); the
  first window ending before ``ts`` gives the previous record's timestamp and the content of
  the record's left window;
- then the previous record's right window (if missing and the record falls in it), the
  record's left window (from that content, or ``initializer()``) and the record's right window
  (a copy of the aggregate found above, if it holds records later than ``ts``) are created;
- records before ``d`` (whose left window would start before 0) go to the window ``[0, d]``
  instead (``processEarly``);
- every update checks the window: one ending before the close time is skipped and the record
  counted as late for it (Kafka Streams' dropped-records sensor counts each skipped window);
  an update whose aggregate is ``None`` deletes the window, as the processor's ``put`` of a
  null aggregate does: later records no longer find it. Its tombstone carries the deleting
  record's timestamp, and a window that was not in state before the micro-batch sends none
  (Kafka Streams' caching window store flush). With ``spec.with_old`` each output also carries
  the window's aggregate before the micro-batch (``old``, pickled; ``None`` for a new window),
  as the cache flush forwards the store's value when a ``KTable.filter`` asks for old values;
  a final result carries the window's aggregate before the last micro-batch that changed it.

A window's timestamp is the largest timestamp of its records; windowed keys are written with
the window start (``TimeWindowedSerializer`` with window size ``d``).

``suppress(until_window_closes)`` (``spec.emit_final``): Kafka Streams' suppression buffer emits
a window once stream time reaches ``end + grace`` (``GraphGraceSearchUtil``: a sliding
aggregation's grace), but the aggregation still accepts records for it at exactly that stream
time, and the buffer then emits the updated window again at once. The kernel reproduces both
(:class:`BoundaryEmitKernel`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from streamtable.compiler.paged.records import Out, Rec
from streamtable.compiler.paged.window_kernels import WindowKernel
from streamtable.topology.nodes import SlidingWindowSpec

Window = list[Any]  # [aggregate, ts, emitted]


def copy_aggregate(agg: Any) -> Any:
    """A private copy of an aggregate that seeds another window (Kafka Streams' store holds
    serialized aggregates, so windows never share an object an aggregator could mutate).
    """
    return pickle.loads(pickle.dumps(agg, protocol=5))


def time_before(rec: Rec, st: int) -> int:
    """Stream time just before ``rec`` was read (``st`` includes it): ``st`` when ``rec`` is not
    ahead of it, or ties the timestamp of an earlier record of its partition
    (``rec.time_before``); otherwise below ``ts`` (``st - 1``: no window a record can change
    closes between the two).

    >>> rec = lambda ts, before: Rec(ts, "t", 0, 1, 0, 0, b"k", None, None, ts, before)
    >>> time_before(rec(37, 37), 37), time_before(rec(37, 33), 37), time_before(rec(37, None), 37)
    (37, 36, 36)
    """
    if rec.ts < st or (rec.time_before is not None and rec.time_before >= st):
        return st
    return st - 1


@dataclass
class BoundaryEmitKernel(WindowKernel):
    """Window kernels whose windows can change at the stream time that closes them.

    With ``spec.emit_final``, Kafka Streams' suppression buffer emits a window when stream time
    reaches its close time and emits every later update of it at once. :meth:`after_batch`
    emits closed windows at their key time; these helpers add what happens between records:

    - :meth:`before_change`: a window about to change (or be merged away) whose close time had
      already been reached before the record was read is emitted first, with its old value;
    - :meth:`after_change`: a changed window whose close time the record's stream time has
      reached is emitted at once; otherwise it is pending again (emitted at its close time).

    Both judge by :meth:`~.window_kernels.WindowKernel.release_time`: for a key read from
    several partitions, only :meth:`after_batch` releases windows, by the key time (a slower
    partition of the key can still change them). With ``olds`` (the micro-batch's old values
    per window, for final results read by a table filter), a window released between records
    has the value it was released with as the old value of its next change: that change
    follows the release, as a later commit follows a flushed one in Kafka Streams.

    Without ``emit_final`` both do nothing.
    """

    def before_change(
        self,
        gk: bytes,
        window: tuple[int, int],
        w: Window,
        rec: Rec,
        before: int,
        outs: list[Out],
        olds: dict[tuple[int, int], bytes | None] | None = None,
    ) -> None:
        """Emit ``w`` (its value before ``rec``) if suppression had released it already."""
        if (
            self.spec.emit_final
            and not w[2]
            and self.close_time(*window) <= self.release_time(before)
        ):
            w[2] = True
            outs.append(self.final_out(gk, window, w, rec, olds))

    def after_change(
        self,
        gk: bytes,
        window: tuple[int, int],
        w: Window,
        rec: Rec,
        st: int,
        outs: list[Out],
        meta: dict[str, Any],
        olds: dict[tuple[int, int], bytes | None] | None = None,
    ) -> None:
        """Emit ``w`` now if it is closed at ``st``, else leave it to :meth:`after_batch`."""
        if not self.spec.emit_final:
            return
        if self.close_time(*window) <= self.release_time(st):
            w[2] = True
            outs.append(self.final_out(gk, window, w, rec, olds))
        else:
            w[2] = False
            self.schedule(meta, *window)

    def final_out(
        self,
        gk: bytes,
        window: tuple[int, int],
        w: Window,
        rec: Rec,
        olds: dict[tuple[int, int], bytes | None] | None = None,
    ) -> Out:
        """The suppressed (final) record of a window, with the window's kept old value
        (``WindowAggregateSpec.with_old``), which it no longer needs then; with ``olds``, the
        value released becomes the old value of the window's next change in the micro-batch.
        """
        value = self.encode(w[0])
        prev = w[3] if len(w) > 3 else None
        del w[3:]
        if olds is not None:
            olds[window] = value
        return Out.of(rec, self.window_key(gk, *window), value, prev, ts=w[1])


@dataclass
class SlidingWindowKernel(BoundaryEmitKernel):
    """Sliding windows (``KStreamSlidingWindowAggregate``), see the module doc.

    The ``SlidingWindows`` javadoc example: ``d`` = 5 s, records at 8 s, 9.2 s and 12.4 s.

    >>> from streamtable.compiler.codecs import PickleCodec, SerdeCodec
    >>> from streamtable.serde import Serdes
    >>> from streamtable.topology.nodes import Aggregation
    >>> from streamtable.compiler.paged.window_kernels import WindowAggregateSpec
    >>> agg = Aggregation(lambda: 0, lambda k, v, a: a + 1)
    >>> spec = WindowAggregateSpec("agg", agg, SerdeCodec(Serdes.bytes()), PickleCodec(),
    ...                            SlidingWindowSpec(5000, 0), retention_ms=10000)
    >>> k = SlidingWindowKernel(spec)
    >>> rec = lambda ts, off: Rec(ts, "t", 0, off, 0, 0, b"k", pickle.dumps(1), None, ts)
    >>> entry, outs = k.process(b"k", [rec(8000, 0), rec(9200, 1), rec(12400, 2)], None, {})
    >>> sorted((s, e, w[0], w[1]) for (s, e), w in entry.items())  # doctest: +NORMALIZE_WHITESPACE
    [(3000, 8000, 1, 8000), (4200, 9200, 2, 9200), (7400, 12400, 3, 12400),
     (8001, 13001, 2, 12400), (9201, 14201, 1, 12400)]
    """

    def close_time(self, start: int, end: int) -> int:  # noqa: D102
        # suppression releases a window at end + grace (GraphGraceSearchUtil); the aggregation
        # accepts records for it up to and including that stream time (end >= st - grace)
        return end + self.spec.windows.grace_ms

    def expire_time(self, start: int, end: int) -> int:  # noqa: D102
        # a record the aggregation accepts (ts + d >= st - grace) reads the windows starting
        # from ts - 2d >= st - grace - 3d: they stay until no later record can read them, so
        # what a record finds never depends on when earlier windows left state. (Kafka
        # Streams' store hides windows from its retention, 2d + grace by default, on: that
        # only ever hides windows whose effect is on already-closed windows, i.e. on how many
        # times a late record is counted; see the report in the tests.)
        w = self.spec.windows
        return start + 3 * w.size_ms + w.grace_ms + 1

    def process_key(  # noqa: D102
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any], floor: int | None
    ) -> tuple[Any, list[Out]]:
        w = self.spec.windows
        assert isinstance(w, SlidingWindowSpec)
        key, values = self.decode(gk, records)
        windows: dict[tuple[int, int], Window] = entry if entry is not None else {}
        run = _SlidingRun(self, gk, key, windows, meta, w.time_difference_ms, w.grace_ms)
        for rec, value in zip(records, values, strict=True):
            run.record(rec, value, self.stream_time(rec, floor))
        outs = run.finals
        if not self.spec.emit_final:
            # a window created and deleted within the micro-batch forwards nothing (Kafka
            # Streams' caching window store skips a flush with neither new nor old value)
            olds = run.olds or {}
            outs = [
                self.update_out(gk, s, e, windows[(s, e)], r, olds.get((s, e)))
                if (s, e) in windows
                else Out.of(
                    r, self.window_key(gk, s, e), None, olds.get((s, e)), run.deleted[(s, e)]
                )
                for (s, e), r in run.changed.items()
                if (s, e) in windows or (s, e) not in run.created
            ]
        return (windows or None), outs


class _SlidingRun:
    """One key's records of a micro-batch through ``KStreamSlidingWindowAggregate``."""

    def __init__(
        self,
        kernel: SlidingWindowKernel,
        gk: bytes,
        key: Any,
        windows: dict[tuple[int, int], Window],
        meta: dict[str, Any],
        d: int,
        grace: int,
    ) -> None:
        self.k, self.gk, self.key, self.windows, self.meta = kernel, gk, key, windows, meta
        self.d, self.grace = d, grace
        self.changed: dict[tuple[int, int], Rec] = {}
        self.deleted: dict[tuple[int, int], int] = {}  # window -> its tombstone's timestamp
        self.created: set[tuple[int, int]] = set()  # windows not in state before the batch
        # with old values: each changed window's aggregate before the micro-batch, pickled at
        # its first touch (before the aggregator may change it in place)
        track_old = kernel.spec.with_old
        self.olds: dict[tuple[int, int], bytes | None] | None = {} if track_old else None
        # with final results, a changed window keeps that value as its fourth item, the old
        # value of its final result (see WindowAggregateSpec.with_old)
        self.keep_old = track_old and kernel.spec.emit_final
        # where released windows note their value, the old value of their next change
        self.released = self.olds if self.keep_old else None
        self.finals: list[Out] = []

    def record(self, rec: Rec, value: Any, st: int) -> None:
        """Process one record (``process`` of the Kafka Streams processor)."""
        self.rec, self.value, self.st, self.before = rec, value, st, time_before(rec, st)
        self.close = st - self.grace  # windowCloseTime
        ts, d = rec.ts, self.d
        if ts + d < self.close:
            self.k.drop_late(rec, ts, ts + d, self.st)
        elif ts < d:
            self.early()
        else:
            self.regular()

    # -- the two paths ------------------------------------------------------------------------

    def regular(self) -> None:
        """``processReverse``: windows starting in ``[ts - 2d, ts + 1]``, latest first."""
        ts, d = self.rec.ts, self.d
        lo = max(0, ts - 2 * d)
        starts = sorted((s for s, _ in self.windows if lo <= s <= ts + 1), reverse=True)
        left_agg: tuple[Any, int] | None = None
        right_agg: tuple[Any, int] | None = None
        left_exists = right_exists = False
        previous: int | None = None
        for s in starts:
            e = s + d
            w = self.windows[(s, e)]
            if s == ts + 1:
                right_exists = True
            elif e > ts:
                if right_agg is None:
                    right_agg = (copy_aggregate(w[0]), w[1])
                self.update((s, e), w[0], w[1])
            elif e == ts:
                left_exists = True
                max_ts = w[1]
                self.update((s, e), w[0], w[1])
                if max_ts < ts:
                    previous = max_ts
                else:
                    return
            else:
                left_agg = (w[0], w[1])
                previous = w[1]
                break
        if previous is not None:  # the previous record's right window
            ps = previous + 1
            if ps not in starts and ps + d >= ts:
                self.update((ps, ps + d), self.k.initial(self.rec), ts)
        if not left_exists:
            if previous is not None and ts - d <= previous:
                assert left_agg is not None
                self.update((ts - d, ts), copy_aggregate(left_agg[0]), ts)
            else:
                self.update((ts - d, ts), self.k.initial(self.rec), ts)
        if not right_exists and right_agg is not None and right_agg[1] > ts:
            self.create_right(right_agg)

    def early(self) -> None:
        """``processEarly``: ``0 <= ts < d``; the window ``[0, d]`` stands for the record's left
        window.
        """
        ts, d = self.rec.ts, self.d
        starts = sorted(s for s, _ in self.windows if s <= ts + 1)
        combined: Window | None = None
        right_agg: tuple[Any, int] | None = None
        right_exists = False
        previous: int | None = None
        for s in starts:
            w = self.windows[(s, s + d)]
            if s == 0:
                combined = w
                if w[1] < ts:
                    previous = w[1]
            elif s <= ts:
                right_agg = (copy_aggregate(w[0]), w[1])
                self.update((s, s + d), w[0], w[1])
            else:  # s == ts + 1
                right_exists = True
        if right_agg is None and combined is not None and combined[1] > ts:
            right_agg = (copy_aggregate(combined[0]), combined[1])
        if not right_exists and right_agg is not None and right_agg[1] > ts:
            self.create_right(right_agg)
        if previous is not None and previous + 1 not in starts:
            self.update((previous + 1, previous + 1 + d), self.k.initial(self.rec), ts)
        if combined is None:
            self.update((0, d), self.k.initial(self.rec), ts)
        else:
            self.update((0, d), combined[0], combined[1])

    # -- window operations --------------------------------------------------------------------

    def update(self, window: tuple[int, int], agg: Any, agg_ts: int) -> None:
        """``updateWindowAndForward``: fold the record into ``agg`` (the window's aggregate, or
        the seed of a new window) unless the window has closed.
        """
        rec, k = self.rec, self.k
        if window[1] < self.close:
            k.drop_late(rec, *window, self.st)
            return
        w = self.windows.get(window)
        self.note_old(window, w)
        if w is not None:
            k.before_change(self.gk, window, w, rec, self.before, self.finals, self.released)
        elif window not in self.changed:
            self.created.add(window)
        new = k.fold(self.key, self.value, agg, rec)
        new_ts = rec.ts if agg is None else max(rec.ts, agg_ts)
        self.changed.pop(window, None)
        self.changed[window] = rec
        if new is None:  # the processor puts a null aggregate: the window is gone
            self.windows.pop(window, None)
            # at the deleting record's time, as the caching store flushes a deletion
            self.deleted[window] = rec.ts
            return
        self.deleted.pop(window, None)
        if w is None:
            w = self.windows[window] = [new, new_ts, False]
            k.schedule(self.meta, *window)
        else:
            w[0], w[1] = new, new_ts
        self.keep(window, w)
        k.after_change(self.gk, window, w, rec, self.st, self.finals, self.meta, self.released)

    def create_right(self, right_agg: tuple[Any, int]) -> None:
        """``createCurrentRecordRightWindow``: ``[ts + 1, ts + 1 + d]`` holds what the window
        found after the record held before it (no fold, no close check: it ends after any
        window the record could be dropped from).
        """
        ts = self.rec.ts
        window = (ts + 1, ts + 1 + self.d)
        self.note_old(window, self.windows.get(window))
        if window not in self.windows and window not in self.changed:
            self.created.add(window)
        w = self.windows[window] = [right_agg[0], right_agg[1], False]
        self.k.schedule(self.meta, *window)
        self.changed.pop(window, None)
        self.changed[window] = self.rec
        self.keep(window, w)
        self.k.after_change(
            self.gk, window, w, self.rec, self.st, self.finals, self.meta, self.released
        )

    def keep(self, window: tuple[int, int], w: Window) -> None:
        """With final results and old values: ``window``, just changed, keeps its aggregate
        from before the micro-batch (:meth:`note_old`) for its final result.
        """
        if self.keep_old:
            assert self.olds is not None
            w[3:] = [self.olds[window]]

    def note_old(self, window: tuple[int, int], w: Window | None) -> None:
        """Keep ``window``'s aggregate before the micro-batch at its first touch (with old
        values): ``w``, its state now, is that state then (``None``: not in state).
        """
        if self.olds is not None and window not in self.olds:
            self.olds[window] = None if w is None else pickle.dumps(w[0], 5)
