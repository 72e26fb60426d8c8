"""Punctuation schedules of the Processor API, as Kafka Streams' ``PunctuationSchedule`` keeps them.

A schedule has a kind (stream time or wall-clock time), an interval and the time it is next
due. ``schedule()`` in a processor's ``init`` creates one per call; since streamtable creates
a new processor instance per state page and micro-batch, schedules are persisted with the
page (:class:`ScheduleState`) and rebound by call order when the next instance's ``init``
calls ``schedule()`` again.

Kafka Streams' rules (``StreamTask.schedule``, ``PunctuationSchedule.next``):

- a stream-time schedule starts at 0, so it is due as soon as stream time is known;
- a wall-clock schedule is first due one interval after it was scheduled;
- when due at time ``now`` it fires once, with ``now``, however many intervals were missed,
  and is next due at the first ``start + k * interval`` after ``now``;
- a restarted application's ``init`` schedules afresh: its wall-clock punctuation is first due
  one interval after the restart (not at once for the intervals missed while it was down), its
  stream-time punctuation as soon as stream time is known (:func:`schedules_for_run`).

Pure Python; runs in Spark's Python workers.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kinds, as :class:`streamtable.processor.api.PunctuationType` values.
STREAM_TIME = "stream_time"
WALL_CLOCK_TIME = "wall_clock_time"


def next_due(due: int, interval_ms: int, now: int) -> int:
    """When a schedule due at ``due`` that fired at ``now`` is due next.

    Missed intervals collapse; the result stays aligned to ``due``.

    >>> next_due(0, 10, 5)      # first stream-time punctuation at stream time 5
    10
    >>> next_due(10, 10, 37)    # 20 and 30 were missed: one call, next at 40
    40
    >>> next_due(1_000, 10, 1_000)
    1010
    """
    nxt = due + interval_ms
    if now >= nxt:
        missed = (now - due) // interval_ms
        nxt = due + (missed + 1) * interval_ms
    return nxt


@dataclass
class ScheduleState:
    """One schedule as persisted in a page's meta: kind, interval (ms), next due time (ms),
    cancelled.

    >>> s = ScheduleState.first(STREAM_TIME, 10, now=None)
    >>> s.due_at(None), s.due_at(3)
    (False, True)
    >>> s.fired(3); s.next
    10
    >>> w = ScheduleState.first(WALL_CLOCK_TIME, 1000, now=5000)
    >>> w.next, w.due_at(5999), w.due_at(6000)
    (6000, False, True)
    """

    kind: str
    interval_ms: int
    next: int
    cancelled: bool = False

    @classmethod
    def first(cls, kind: str, interval_ms: int, now: int | None) -> ScheduleState:
        """A new schedule: stream time due at 0, wall-clock time one interval from ``now``."""
        start = 0 if kind == STREAM_TIME else (now or 0) + interval_ms
        return cls(kind, interval_ms, start)

    def due_at(self, now: int | None) -> bool:
        """Whether it fires at time ``now`` (``None``: the clock is not known yet)."""
        return not self.cancelled and now is not None and self.next <= now

    def fired(self, now: int) -> None:
        """Record a firing at ``now``."""
        self.next = next_due(self.next, self.interval_ms, now)

    def to_tuple(self) -> tuple[str, int, int, bool]:
        """The persisted form."""
        return (self.kind, self.interval_ms, self.next, self.cancelled)

    @classmethod
    def from_tuple(cls, t: tuple[str, int, int, bool]) -> ScheduleState:
        """Inverse of :meth:`to_tuple`."""
        return cls(*t)


def schedules_for_run(meta: dict, run_id: str) -> list[ScheduleState] | None:
    """A task's persisted schedules, or ``None`` (``init`` schedules anew) when they were saved
    by an earlier run of the application than ``run_id``; marks ``meta`` with ``run_id``.

    Kafka Streams calls ``init`` at each start of a task, and ``schedule()`` there starts a
    wall-clock schedule one interval after that moment and a stream-time one at 0
    (``StreamTask.schedule``); streamtable keeps the schedules in state between micro-batches
    of one run, but not across runs.

    >>> meta = {"schedules": [(WALL_CLOCK_TIME, 1000, 5000, False)], "run": "a"}
    >>> schedules_for_run(meta, "a")
    [ScheduleState(kind='wall_clock_time', interval_ms=1000, next=5000, cancelled=False)]
    >>> schedules_for_run(meta, "b") is None, meta["run"]
    (True, 'b')
    """
    persisted = meta.get("schedules")
    same_run = meta.get("run") == run_id
    meta["run"] = run_id
    if persisted is None or not same_run:
        return None
    return [ScheduleState.from_tuple(t) for t in persisted]
