"""Window specifications: ``TimeWindows`` (tumbling and hopping).

Durations are :class:`datetime.timedelta`; an ``int`` is taken as milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from streamtable.errors import TopologyError
from streamtable.topology.nodes import TimeWindowSpec


def to_millis(d: timedelta | int, argument: str) -> int:
    """A duration in whole milliseconds; ``argument`` names it in errors."""
    if isinstance(d, bool) or not isinstance(d, timedelta | int):
        raise TopologyError(f"{argument} must be a datetime.timedelta (or int ms); got {d!r}.")
    if isinstance(d, timedelta):
        return (d.days * 86_400_000) + (d.seconds * 1000) + (d.microseconds // 1000)
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
            raise TopologyError(f"TimeWindows size must be positive; got {size_ms} ms.")
        if grace_ms < 0:
            raise TopologyError(f"TimeWindows grace must not be negative; got {grace_ms} ms.")
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
                f"({self.size_ms} ms); got {advance_ms} ms."
            )
        return TimeWindows(self.size_ms, advance_ms, self.grace_ms)

    def spec(self) -> TimeWindowSpec:
        """The topology-level window specification."""
        return TimeWindowSpec(self.size_ms, self.advance_ms, self.grace_ms)

    def windows_for(self, timestamp: int) -> list[int]:
        """Start times (ms) of the windows containing ``timestamp``."""
        return self.spec().windows_for(timestamp)
