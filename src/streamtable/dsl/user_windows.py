"""User-defined time windows: subclass :class:`Windows` (Kafka Streams' ``Windows<TimeWindow>``).

Kafka Streams lets an application define its own windows by extending ``Windows`` with
``windowsFor(timestamp)``, ``size()`` and ``gracePeriodMs()``; its ``TimeWindows`` is one such
subclass. streamtable accepts the same contract in ``windowed_by``: the aggregation, grace,
suppression and retention then work as for :class:`~streamtable.TimeWindows`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from streamtable.dsl.windows import to_millis
from streamtable.errors import TopologyError
from streamtable.topology.nodes import CustomWindowSpec


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A time window ``[start, end)``: epoch milliseconds, start inclusive, end exclusive
    (Kafka's ``TimeWindow``).

    Raises
    ------
    ValueError
        If ``start`` is negative or ``end`` is not after ``start`` (as Kafka's ``Window`` and
        ``TimeWindow`` constructors refuse them).

    Examples
    --------
    >>> TimeWindow(0, 86_400_000)
    TimeWindow(start=0, end=86400000)
    >>> TimeWindow(5, 5)
    Traceback (most recent call last):
    ...
    ValueError: TimeWindow end (5 ms) must be after its start (5 ms).
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"TimeWindow {name} must be an int (epoch ms); got {v!r}.")
        if self.start < 0:
            raise ValueError(f"TimeWindow start must not be negative; got {self.start} ms.")
        if self.end <= self.start:
            raise ValueError(
                f"TimeWindow end ({self.end} ms) must be after its start ({self.start} ms)."
            )


class Windows(ABC):
    """Base class of user-defined time windows (Kafka Streams' ``Windows<TimeWindow>``).

    Subclass it and pass an instance to ``windowed_by``. A record with timestamp ``t`` updates
    every window ``windows_for(t)`` returns; a window accepts records until stream time
    reaches its ``end + grace_period()`` (later records are dropped and counted as late, as
    for :class:`~streamtable.TimeWindows`), ``suppress(Suppressed.until_window_closes())``
    emits it once then, and it stays in the store for ``size() + grace_period()`` after its
    start unless a longer ``retention`` is given.

    Methods to implement
    --------------------
    windows_for(timestamp) -> Mapping[int, TimeWindow]
        The windows a record at ``timestamp`` (epoch ms) belongs to, keyed by their start.
        Called for every record, where the aggregation runs (on Spark's Python workers):
        keep it deterministic and cheap, and the object picklable.
    size() -> timedelta or int ms
        The window size. A windowed key written to a topic carries only the start; readers
        (Kafka's ``TimeWindowedDeserializer``, ``Serdes.time_windowed``) rebuild the end as
        ``start + size()``, and so does every operator after the aggregation.
    grace_period() -> timedelta or int ms
        How long after its end a window still accepts out-of-order records.

    Notes
    -----
    A checkpoint remembers the subclass's name, size and grace: a restart with other values
    is refused as an incompatible topology. A change inside ``windows_for`` alone is not
    detected; reset the application when it moves window boundaries.

    Examples
    --------
    Kafka's own example of a custom window: days that start at 18:00 UTC.

    >>> from datetime import datetime, timezone
    >>> class DailyWindows(Windows):
    ...     DAY = 86_400_000
    ...     def __init__(self, start_hour=18, grace=timedelta(hours=1)):
    ...         self.offset, self.grace = start_hour * 3_600_000, grace
    ...     def windows_for(self, timestamp):
    ...         start = (timestamp - self.offset) // self.DAY * self.DAY + self.offset
    ...         return {start: TimeWindow(start, start + self.DAY)}
    ...     def size(self):
    ...         return timedelta(days=1)
    ...     def grace_period(self):
    ...         return self.grace
    >>> noon = int(datetime(2026, 11, 24, 12, tzinfo=timezone.utc).timestamp() * 1000)
    >>> [(datetime.fromtimestamp(s / 1000, timezone.utc).isoformat(), w.end - w.start)
    ...  for s, w in DailyWindows().windows_for(noon).items()]
    [('2026-11-23T18:00:00+00:00', 86400000)]
    >>> DailyWindows().spec()
    CustomWindowSpec(name='DailyWindows', size_ms=86400000, grace_ms=3600000)
    """

    @abstractmethod
    def windows_for(self, timestamp: int) -> Mapping[int, TimeWindow]:
        """The windows containing ``timestamp`` (epoch ms), keyed by their start (ms)."""

    @abstractmethod
    def size(self) -> timedelta | int:
        """The window size (a ``timedelta``, or an ``int`` of ms)."""

    @abstractmethod
    def grace_period(self) -> timedelta | int:
        """How long after its end a window accepts late records (``timedelta`` or ms)."""

    def spec(self) -> CustomWindowSpec:
        """The topology-level window specification.

        Raises
        ------
        TopologyError
            If ``size()`` is not positive or ``grace_period()`` is negative.
        """
        name = type(self).__qualname__
        size_ms = to_millis(self.size(), f"{name}.size()")
        grace_ms = to_millis(self.grace_period(), f"{name}.grace_period()")
        if size_ms <= 0:
            kafka = (
                "Kafka Streams' window store refuses it too: 'windowSize cannot be negative'"
                if size_ms < 0
                else "Kafka Streams accepts a zero size, streamtable does not yet: return a "
                "positive one"
            )
            raise TopologyError(f"{name}.size() must be positive; got {size_ms} ms ({kafka}).")
        if grace_ms < 0:
            raise TopologyError(
                f"{name}.grace_period() must not be negative; got {grace_ms} ms (Kafka Streams "
                "refuses it too: the window store's retention, size + grace, would be shorter "
                "than the size)."
            )
        return CustomWindowSpec(name, size_ms, grace_ms, self)
