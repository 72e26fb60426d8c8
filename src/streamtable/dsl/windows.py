"""Window specifications: ``TimeWindows`` (tumbling and hopping), ``SlidingWindows``,
``SessionWindows`` and ``JoinWindows``.

Durations are :class:`datetime.timedelta`; an ``int`` is taken as milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from streamtable._millis import duration_ms
from streamtable.errors import TopologyError
from streamtable.topology.nodes import (
    JoinWindowSpec,
    SessionWindowSpec,
    SlidingWindowSpec,
    TimeWindowSpec,
)


def to_millis(d: timedelta | int, argument: str) -> int:
    """A duration in whole milliseconds; ``argument`` names it in errors."""
    if isinstance(d, bool) or not isinstance(d, timedelta | int):
        raise TopologyError(
            f"{argument} must be a datetime.timedelta (or int ms); got {d!r} (Kafka Streams "
            "takes a java.time.Duration and refuses null with IllegalArgumentException)."
        )
    if isinstance(d, timedelta):
        return duration_ms(d)
    return d


@dataclass(frozen=True)
class TimeWindows:
    """Epoch-aligned fixed-size windows ``[start, start + size)``, in ms (Kafka's ``TimeWindows``).

    Tumbling when the advance equals the size (the default), hopping when it is smaller.
    A record with timestamp ``t`` belongs to every window with ``start <= t < start + size``,
    where ``start`` is a multiple of the advance and ``start >= 0``. A window accepts records
    until stream time reaches ``end + grace``; later records for it are dropped.

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = TimeWindows.of_size_and_grace(timedelta(minutes=5), timedelta(minutes=1))
    >>> w.size_ms, w.advance_ms, w.grace_ms
    (300000, 300000, 60000)
    >>> w.advance_by(timedelta(minutes=1)).windows_for(420_000)
    [180000, 240000, 300000, 360000, 420000]
    """

    size_ms: int
    advance_ms: int
    grace_ms: int

    @classmethod
    def of_size_with_no_grace(cls, size: timedelta | int) -> TimeWindows:
        """Tumbling windows of ``size`` with zero grace (``TimeWindows.ofSizeWithNoGrace``).

        Raises
        ------
        TopologyError
            If ``size`` is not positive.
        """
        return cls.of_size_and_grace(size, timedelta(0))

    @classmethod
    def of_size_and_grace(cls, size: timedelta | int, grace: timedelta | int) -> TimeWindows:
        """Tumbling windows of ``size`` accepting records up to ``grace`` after their end.

        Raises
        ------
        TopologyError
            If ``size`` is not positive or ``grace`` is negative.
        """
        size_ms = to_millis(size, "TimeWindows size")
        grace_ms = to_millis(grace, "TimeWindows grace")
        if size_ms <= 0:
            raise TopologyError(
                f"TimeWindows size must be positive; got {size_ms} ms (Kafka Streams' "
                "TimeWindows.ofSizeAndGrace rejects it too)."
            )
        if grace_ms < 0:
            raise TopologyError(
                f"TimeWindows grace must not be negative; got {grace_ms} ms (Kafka Streams' "
                "TimeWindows.ofSizeAndGrace rejects it too)."
            )
        return cls(size_ms, size_ms, grace_ms)

    def advance_by(self, advance: timedelta | int) -> TimeWindows:
        """Hopping windows: a new window every ``advance`` (``TimeWindows.advanceBy``).

        Raises
        ------
        TopologyError
            If ``advance`` is not positive or larger than the window size.
        """
        advance_ms = to_millis(advance, "TimeWindows advance")
        if advance_ms <= 0 or advance_ms > self.size_ms:
            raise TopologyError(
                f"TimeWindows advance must be positive and at most the window size "
                f"({self.size_ms} ms); got {advance_ms} ms (Kafka Streams' "
                "TimeWindows.advanceBy rejects it too)."
            )
        return TimeWindows(self.size_ms, advance_ms, self.grace_ms)

    def spec(self) -> TimeWindowSpec:
        """The topology-level window specification."""
        return TimeWindowSpec(self.size_ms, self.advance_ms, self.grace_ms)

    def windows_for(self, timestamp: int) -> list[int]:
        """Start times (ms) of the windows containing ``timestamp``."""
        return self.spec().windows_for(timestamp)


_FACTORIES = {
    "SlidingWindows": "ofTimeDifferenceAndGrace",
    "SessionWindows": "ofInactivityGapAndGrace",
}


def _grace(grace: timedelta | int, owner: str) -> int:
    g = to_millis(grace, f"{owner} grace")
    if g < 0:
        raise TopologyError(
            f"{owner} grace must not be negative; got {g} ms (Kafka Streams' "
            f"{owner}.{_FACTORIES[owner]} rejects it too)."
        )
    return g


@dataclass(frozen=True)
class SlidingWindows:
    """Windows of a fixed length sliding along the records' timestamps (``SlidingWindows``).

    A window ``[start, start + time_difference]`` (both ends inclusive, ms) exists wherever a
    record enters or leaves it, so every distinct set of records lying within
    ``time_difference`` of each other has exactly one window. Records arriving after stream
    time has passed their window's end + grace are dropped (Kafka Streams' rule).

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = SlidingWindows.of_time_difference_and_grace(timedelta(seconds=5), timedelta(0))
    >>> w.time_difference_ms, w.grace_ms
    (5000, 0)
    """

    time_difference_ms: int
    grace_ms: int

    @classmethod
    def of_time_difference_with_no_grace(cls, difference: timedelta | int) -> SlidingWindows:
        """Sliding windows of ``difference`` without grace (``ofTimeDifferenceWithNoGrace``).

        Raises
        ------
        TopologyError
            If ``difference`` is not positive.
        """
        return cls.of_time_difference_and_grace(difference, timedelta(0))

    @classmethod
    def of_time_difference_and_grace(
        cls, difference: timedelta | int, grace: timedelta | int
    ) -> SlidingWindows:
        """Sliding windows of ``difference`` accepting records up to ``grace`` late.

        Raises
        ------
        TopologyError
            If ``difference`` is not positive or ``grace`` is negative.
        """
        d = to_millis(difference, "SlidingWindows time difference")
        if d <= 0:
            kafka = (
                "Kafka Streams' SlidingWindows.ofTimeDifferenceAndGrace rejects it too"
                if d < 0
                else "Kafka Streams accepts 0 (windows of records with equal timestamps), "
                "streamtable does not yet: use a positive difference"
            )
            raise TopologyError(
                f"SlidingWindows time difference must be positive; got {d} ms ({kafka})."
            )
        return cls(d, _grace(grace, "SlidingWindows"))

    def spec(self) -> SlidingWindowSpec:
        """The topology-level window specification."""
        return SlidingWindowSpec(self.time_difference_ms, self.grace_ms)


@dataclass(frozen=True)
class SessionWindows:
    """Sessions of activity per key, separated by an inactivity gap (``SessionWindows``).

    A record at ``t`` belongs to a session ``[start, end]`` (both inclusive, ms) when it is
    within ``inactivity_gap`` of it; a record bridging two sessions merges them. When sessions
    merge, a tombstone is emitted for each merged-away session's windowed key, then the
    merged session (Kafka Streams' ``KStreamSessionWindowAggregate``); a session made and
    merged away within one micro-batch sends nothing, as Kafka Streams' record cache does not
    flush it. Records arriving after
    stream time has passed their session's end + gap + grace are dropped.

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = SessionWindows.of_inactivity_gap_and_grace(timedelta(hours=6), timedelta(hours=1))
    >>> w.inactivity_gap_ms, w.grace_ms
    (21600000, 3600000)
    """

    inactivity_gap_ms: int
    grace_ms: int

    @classmethod
    def of_inactivity_gap_with_no_grace(cls, gap: timedelta | int) -> SessionWindows:
        """Sessions separated by ``gap``, without grace (``ofInactivityGapWithNoGrace``).

        Raises
        ------
        TopologyError
            If ``gap`` is not positive.
        """
        return cls.of_inactivity_gap_and_grace(gap, timedelta(0))

    @classmethod
    def of_inactivity_gap_and_grace(
        cls, gap: timedelta | int, grace: timedelta | int
    ) -> SessionWindows:
        """Sessions separated by ``gap``, accepting records up to ``grace`` late.

        Raises
        ------
        TopologyError
            If ``gap`` is not positive or ``grace`` is negative.
        """
        g = to_millis(gap, "SessionWindows inactivity gap")
        if g <= 0:
            raise TopologyError(
                f"SessionWindows inactivity gap must be positive; got {g} ms (Kafka Streams' "
                "SessionWindows.ofInactivityGapAndGrace rejects it too)."
            )
        return cls(g, _grace(grace, "SessionWindows"))

    def spec(self) -> SessionWindowSpec:
        """The topology-level window specification."""
        return SessionWindowSpec(self.inactivity_gap_ms, self.grace_ms)


@dataclass(frozen=True)
class JoinWindows:
    """The time bound of a stream-stream join (Kafka Streams' ``JoinWindows``), in ms.

    A left record at ``t`` joins right records with ``t - before <= t' <= t + after`` (both
    ends inclusive). Left/outer non-matches are emitted once the window has closed: stream
    time (over both inputs) has passed the record's ``t + after + grace`` (left records) or
    ``t + before + grace`` (right records), as in Kafka Streams 3.1+.

    Examples
    --------
    >>> from datetime import timedelta
    >>> w = JoinWindows.of_time_difference_and_grace(timedelta(seconds=10), timedelta(seconds=5))
    >>> w.before_ms, w.after_ms, w.grace_ms
    (10000, 10000, 5000)
    >>> w.after(timedelta(0)).after_ms
    0
    """

    before_ms: int
    after_ms: int
    grace_ms: int

    @classmethod
    def of_time_difference_with_no_grace(cls, difference: timedelta | int) -> JoinWindows:
        """Records within ``difference`` of each other join; no grace.

        Raises
        ------
        TopologyError
            If ``difference`` is negative.
        """
        return cls.of_time_difference_and_grace(difference, timedelta(0))

    @classmethod
    def of_time_difference_and_grace(
        cls, difference: timedelta | int, grace: timedelta | int
    ) -> JoinWindows:
        """Records within ``difference`` of each other join; late records up to ``grace``.

        Raises
        ------
        TopologyError
            If ``difference`` or ``grace`` is negative.
        """
        d = to_millis(difference, "JoinWindows time difference")
        g = to_millis(grace, "JoinWindows grace")
        if d < 0:
            raise TopologyError(
                f"JoinWindows time difference must not be negative; got {d} ms (Kafka "
                "Streams' JoinWindows.ofTimeDifferenceAndGrace rejects it too)."
            )
        if g < 0:
            raise TopologyError(
                f"JoinWindows grace must not be negative; got {g} ms (Kafka Streams' "
                "JoinWindows.ofTimeDifferenceAndGrace rejects it too)."
            )
        return cls(d, d, g)

    def before(self, before: timedelta | int) -> JoinWindows:
        """How far before a left record's timestamp right records may be (``before``).

        Raises
        ------
        TopologyError
            If the window would be empty (``before + after < 0``).
        """
        b = to_millis(before, "JoinWindows before")
        if b + self.after_ms < 0:
            raise TopologyError(
                f"JoinWindows before + after must not be negative; got before {b} ms, after "
                f"{self.after_ms} ms (Kafka Streams' JoinWindows.before rejects it too)."
            )
        return JoinWindows(b, self.after_ms, self.grace_ms)

    def after(self, after: timedelta | int) -> JoinWindows:
        """How far after a left record's timestamp right records may be (``after``).

        Raises
        ------
        TopologyError
            If the window would be empty (``before + after < 0``).
        """
        a = to_millis(after, "JoinWindows after")
        if a + self.before_ms < 0:
            raise TopologyError(
                f"JoinWindows before + after must not be negative; got before "
                f"{self.before_ms} ms, after {a} ms (Kafka Streams' JoinWindows.after rejects "
                "it too)."
            )
        return JoinWindows(self.before_ms, a, self.grace_ms)

    def spec(self) -> JoinWindowSpec:
        """The topology-level window specification."""
        return JoinWindowSpec(self.before_ms, self.after_ms, self.grace_ms)
