"""Exact conversions to milliseconds, as Java's ``Duration.toMillis`` and
``Instant.toEpochMilli`` make them.

``int(td.total_seconds() * 1000)`` goes through a float and comes out 1 ms short for many
values (``timedelta(milliseconds=1001)`` gives 1000); these divide exactly instead.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def duration_ms(d: timedelta) -> int:
    """Whole milliseconds of ``d``, truncated toward zero (``Duration.toMillis``, JDK 11+).

    >>> duration_ms(timedelta(milliseconds=1001)), duration_ms(timedelta(microseconds=-1500))
    (1001, -1)
    """
    whole = abs(d) // _MS
    return whole if d >= timedelta(0) else -whole


def epoch_ms(t: datetime) -> int:
    """Milliseconds since the epoch of ``t``, rounded down (``Instant.toEpochMilli``); a
    naive ``t`` is local time, as :meth:`datetime.timestamp` takes it.

    >>> epoch_ms(datetime(2026, 11, 24, 0, 0, 1, 1000, tzinfo=UTC))
    1795478401001
    """
    if t.tzinfo is None:
        t = t.astimezone()
    return (t - _EPOCH) // _MS
