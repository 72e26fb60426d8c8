"""Kernel of session-window aggregations (``KStreamSessionWindowAggregate``).

For each record at ``ts`` (in arrival order), as Kafka Streams' processor does:

- stream time ``st`` (see :meth:`WindowKernel.stream_time`) and close time
  ``st - gap - grace``;
- the key's sessions ending at or after ``ts - gap`` and starting at or before ``ts + gap`` are
  found, in the session store's order (end, then start), among those the store still returns:
  a session store hides sessions ending at or before its observed stream time minus the
  retention (retention defaults to gap + grace, measured against the session's end), a time
  that does not include the record being processed yet (``AbstractSegmentedBytesStore``
  advances it on ``put``): with no grace, a record exactly one gap after a session's end still
  finds and extends it;
- the aggregate starts from ``initializer()`` and each found session's aggregate is merged in,
  ``merger(key, agg, session_agg)``; the merged window spans the record and the found sessions;
- if the merged window ends before the close time the record is dropped (counted once, for the
  merged window); otherwise, if the merged window is not ``[ts, ts]``, every found session is
  removed and a tombstone is sent for its windowed key (even when the merged window equals it),
  then ``aggregator(key, value, agg)`` gives the merged session's aggregate, sent as an update;
  an aggregate of ``None`` deletes the merged session instead (its tombstone is sent), as the
  processor's ``put`` of a null aggregate does.

Updates and tombstones carry the window end as timestamp (``SessionCacheFlushListener``).
Windowed keys are the key bytes, the 8-byte end and the 8-byte start
(``SessionWindowedSerializer``). One update or tombstone goes out per changed session and
micro-batch, as Kafka Streams' caching session store flushes it: a session not in state before
the micro-batch and gone after it sends nothing (``CachingSessionStore.putAndMaybeForward``
skips an entry with neither a new nor an old value). With ``spec.with_old`` each output also
carries the session's aggregate before the micro-batch (``old``, pickled; ``None`` for a new
session), the store's value the cache flush forwards as the old value when a ``KTable.filter``
asks for old values; a final result carries the session's aggregate before the last
micro-batch that changed it (``None`` when the session, with its bounds, was new in it).

``suppress(until_window_closes)`` (``spec.emit_final``): the suppression buffer releases a
session when stream time reaches ``end + gap + grace`` (``GraphGraceSearchUtil``: a session
aggregation's grace is gap + grace) and drops the tombstones of merged sessions. With the
default retention a session is hidden from the store at exactly that stream time, so it never
changes after its final result; with a longer retention it can still be extended or merged: a
merged-away session that was already released stays released (its tombstone is dropped), the
merged session is released when it closes, and a session changed at exactly its close time is
released again at once (:class:`~.sliding_kernels.BoundaryEmitKernel`).

"Released before the record" and what the store still returns are judged by the stream time
before the record (:func:`~.sliding_kernels.time_before`): the partition's stream time just
before it, as the pack stage stamps it, so a record that ties the timestamp of an earlier record
of its partition (another key's, say) finds what that record did: a session it closed is
released before the record changes it, and one it hid from the store stays hidden.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any

from streamtable.compiler.paged.records import Out, Rec
from streamtable.compiler.paged.sliding_kernels import BoundaryEmitKernel, Window, time_before
from streamtable.compiler.paged.user_code import call_user
from streamtable.errors import TopologyError
from streamtable.topology.nodes import SessionWindowSpec

_END_START = struct.Struct(">qq")


@dataclass
class SessionWindowKernel(BoundaryEmitKernel):
    """Session windows (``KStreamSessionWindowAggregate``), see the module doc.

    >>> import pickle
    >>> from streamtable.compiler.codecs import PickleCodec, SerdeCodec
    >>> from streamtable.serde import Serdes
    >>> from streamtable.topology.nodes import Aggregation
    >>> from streamtable.compiler.paged.window_kernels import WindowAggregateSpec
    >>> agg = Aggregation(lambda: 0, lambda k, v, a: a + 1, merger=lambda k, a, b: a + b)
    >>> spec = WindowAggregateSpec("agg", agg, SerdeCodec(Serdes.bytes()), PickleCodec(),
    ...                            SessionWindowSpec(5, 10), retention_ms=15)
    >>> k = SessionWindowKernel(spec)
    >>> rec = lambda ts, off: Rec(ts, "t", 0, off, 0, 0, b"k", pickle.dumps(1), None, 10)
    >>> # stream time 10 for all: 10 - gap - grace = -5, nothing is late
    >>> entry, outs = k.process(b"k", [rec(0, 0), rec(10, 1)], None, {})
    >>> entry
    {(0, 0): [1, 0, False], (10, 10): [1, 10, False]}
    >>> entry, outs = k.process(b"k", [rec(5, 2)], entry, {})  # bridges both sessions
    >>> entry
    {(0, 10): [3, 10, False]}
    >>> [(o.key[1:].hex(), None if o.value is None else pickle.loads(o.value), o.ts)
    ...  for o in outs]  # doctest: +NORMALIZE_WHITESPACE
    [('00000000000000000000000000000000', None, 0),
     ('000000000000000a000000000000000a', None, 10),
     ('000000000000000a0000000000000000', 3, 10)]
    """

    def close_time(self, start: int, end: int) -> int:  # noqa: D102
        w = self.spec.windows
        return end + w.inactivity_gap_ms + w.grace_ms

    def expire_time(self, start: int, end: int) -> int:  # noqa: D102
        # hidden from every later record once st >= end + retention (see module doc)
        return end + self.retention()

    def retention(self) -> int:
        """The session store's retention (ms, against session ends): at least gap + grace."""
        w = self.spec.windows
        return max(self.spec.retention_ms, w.inactivity_gap_ms + w.grace_ms)

    def window_key(self, gk: bytes, start: int, end: int) -> bytes:  # noqa: D102
        return gk + _END_START.pack(end, start)

    def merge(self, key: Any, agg1: Any, agg2: Any, rec: Rec) -> Any:
        """``merger(key, agg1, agg2)`` (errors name the operator and ``rec``).

        Raises
        ------
        TopologyError
            If the aggregation has no merger.
        """
        if self.counting:  # the DSL's count(): the counts add up
            return agg1 + agg2
        fn = self.spec.aggregation.merger
        if fn is None:
            raise TopologyError(
                f"Session-windowed aggregation {self.spec.node_name!r} has no merger: pass "
                "merger=fn(key, agg1, agg2) (Kafka Streams' SessionWindowedKStream.aggregate "
                "requires a Merger too)."
            )
        return call_user(fn, (key, agg1, agg2), self.spec.node_name, "merger", rec)

    def process_key(  # noqa: D102
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any], floor: int | None
    ) -> tuple[Any, list[Out]]:
        w = self.spec.windows
        assert isinstance(w, SessionWindowSpec)
        gap = w.inactivity_gap_ms
        retention = self.retention()
        key, values = self.decode(gk, records)
        sessions: dict[tuple[int, int], Window] = entry if entry is not None else {}
        changed: dict[tuple[int, int], Rec] = {}
        created: set[tuple[int, int]] = set()  # sessions not in state before the micro-batch
        # each changed session's aggregate before the micro-batch, pickled at its first touch
        # (before a merger or the aggregator may change it in place)
        olds: dict[tuple[int, int], bytes | None] = {}
        track_old = self.spec.with_old
        # with final results, a changed session keeps that value as its fourth item, the old
        # value of its final result (see WindowAggregateSpec.with_old)
        keep_old = track_old and self.spec.emit_final
        released = olds if keep_old else None  # a release is the old value of the next change
        finals: list[Out] = []
        # the latest session end put: the store has seen at least that time
        seen = max((e for _, e in sessions), default=None)
        for rec, value in zip(records, values, strict=True):
            ts = rec.ts
            st = self.stream_time(rec, floor)
            before = time_before(rec, st)
            if seen is not None and seen > before:
                before = seen  # a record of this key at the same largest timestamp came first
            # the store hides by the time it has seen, which this record is not part of yet
            visible_from = before - retention + 1
            earliest_end = max(ts - gap, visible_from)
            found = sorted(
                ((s, e) for s, e in sessions if e >= earliest_end and s <= ts + gap),
                key=lambda se: (se[1], se[0]),
            )
            if track_old:
                for window in found:
                    if window not in olds:
                        olds[window] = pickle.dumps(sessions[window][0], 5)
            agg = self.initial(rec)
            start = end = ts
            for s, e in found:
                agg = self.merge(key, agg, sessions[(s, e)][0], rec)
                start, end = min(start, s), max(end, e)
            if end < st - gap - w.grace_ms:
                self.drop_late(rec, start, end, st)
                continue
            merged = (start, end)
            # the found sessions change; so does a session the store no longer returns that
            # has the merged window (the put overwrites it)
            hidden = [merged] if merged in sessions and merged not in found else []
            for window in found + hidden:
                self.before_change(gk, window, sessions[window], rec, before, finals, released)
            if (start, end) != (ts, ts):
                for window in found:
                    del sessions[window]
                    changed.pop(window, None)
                    changed[window] = rec
            if merged not in changed:  # its first touch in the micro-batch
                if merged not in sessions:
                    created.add(merged)
                if track_old and merged not in olds:
                    session = sessions.get(merged)
                    olds[merged] = None if session is None else pickle.dumps(session[0], 5)
            agg = self.fold(key, value, agg, rec)
            seen = end if seen is None else max(seen, end)
            changed.pop(merged, None)
            changed[merged] = rec
            if agg is None:  # KStreamSessionWindowAggregate puts null: the session is gone
                sessions.pop(merged, None)
                continue
            session = sessions.get(merged)
            if session is None:
                session = sessions[merged] = [agg, end, False]
                self.schedule(meta, start, end)
            else:
                session[0] = agg
            if keep_old:
                session[3:] = [olds[merged]]
            self.after_change(gk, merged, session, rec, st, finals, meta, released)
        if self.spec.emit_final:
            return (sessions or None), finals
        outs = []
        for (s, e), rec in changed.items():
            session = sessions.get((s, e))
            if session is not None:
                outs.append(self.update_out(gk, s, e, session, rec, olds.get((s, e))))
            elif (s, e) not in created:
                outs.append(Out.of(rec, self.window_key(gk, s, e), None, olds.get((s, e)), ts=e))
        return (sessions or None), outs
