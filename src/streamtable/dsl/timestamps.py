"""Timestamp extractors: where a source record's event time comes from (Kafka Streams'
``TimestampExtractor``), and what happens when there is none.

Pass one as ``StreamsBuilder.stream(..., timestamp_extractor=...)``:

- :class:`RecordTimestamp` -- the Kafka record's timestamp (the default without an extractor);
- :class:`WallclockTimestamp` -- the wall-clock time when the record is read;
- :class:`FieldTimestamp` -- a field of a dict (JSON) value;
- any callable ``fn(key, value, record_timestamp_ms) -> int``.

A timestamp is valid when it is an ``int >= 0`` (ms since the epoch). A record without one --
the extractor returned ``None``, a negative number, or anything else -- goes to the
invalid-timestamp policy: ``"skip"`` drops the record and counts it in
``KafkaStreams.metrics()["dropped-records"]["invalid_timestamp"]`` (Kafka Streams'
:class:`LogAndSkipOnInvalidTimestamp`, streamtable's default), ``"fail"`` stops the application
with a :class:`~streamtable.errors.StreamsError` naming the record's topic, partition and
offset (:class:`FailOnInvalidTimestamp`). The policy comes from the extractor's ``on_invalid=``,
else from the config key ``streamtable.invalid.timestamp.policy``. An extractor that raises is
a processing error: ``processing.exception.handler`` stops the application (the default) or
skips the record and counts it as ``processing``.

Extractors run in Spark's Python workers: they must be picklable (these are) and must not rely
on state kept between records.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from streamtable.errors import TopologyError

__all__ = [
    "TimestampExtractor",
    "RecordTimestamp",
    "LogAndSkipOnInvalidTimestamp",
    "FailOnInvalidTimestamp",
    "WallclockTimestamp",
    "FieldTimestamp",
    "POLICIES",
    "valid_timestamp",
    "policy_of",
]

#: The invalid-timestamp policies.
POLICIES = ("skip", "fail")
#: The largest timestamp a record can carry (Java's ``Long.MAX_VALUE``).
MAX_TIMESTAMP = 2**63 - 1

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_UNITS = {"ms": 1, "s": 1000}
_EXTENSION = (
    "FieldTimestamp is a streamtable extension: in Kafka Streams you write this "
    "TimestampExtractor yourself"
)


def _check_policy(on_invalid: object, owner: str) -> str | None:
    if on_invalid is None or on_invalid in POLICIES:
        return on_invalid  # type: ignore[return-value]
    raise TopologyError(
        f"{owner}: on_invalid must be 'skip', 'fail' or None (use the config's "
        f"'streamtable.invalid.timestamp.policy'); got {on_invalid!r}. 'skip' and 'fail' are "
        "Kafka Streams' LogAndSkipOnInvalidTimestamp and FailOnInvalidTimestamp."
    )


def valid_timestamp(t: object) -> int | None:
    """``t`` as a timestamp in ms if it is a valid one (an integer in ``0 .. 2**63 - 1``).

    Integers of other types (``numpy.int64``) are accepted; ``bool``, floats and everything
    else are not.

    Examples
    --------
    >>> valid_timestamp(5), valid_timestamp(-1), valid_timestamp(5.0), valid_timestamp(None)
    (5, None, None, None)
    """
    if type(t) is not int:
        if isinstance(t, bool) or not hasattr(t, "__index__"):
            return None
        try:
            t = operator.index(t)  # type: ignore[arg-type]
        except TypeError:
            return None
    return t if 0 <= t <= MAX_TIMESTAMP else None  # type: ignore[operator,return-value]


def policy_of(extractor: object, default: str) -> str:
    """The invalid-timestamp policy of a source: the extractor's ``on_invalid``, else ``default``.

    Examples
    --------
    >>> policy_of(RecordTimestamp(on_invalid="fail"), "skip"), policy_of(None, "skip")
    ('fail', 'skip')
    """
    own = getattr(extractor, "on_invalid", None)
    return own if own in POLICIES else default


class TimestampExtractor:
    """Base of streamtable's extractors: ``extractor(key, value, record_timestamp_ms)``.

    Subclasses implement :meth:`extract`; they may override :meth:`explain_invalid` to say
    why a record has no valid timestamp (it appears in the error of the ``"fail"`` policy).
    A plain function ``fn(key, value, record_timestamp_ms) -> int`` works as well; derive from
    this class to give it its own ``on_invalid`` policy.

    Parameters
    ----------
    on_invalid : {"skip", "fail"}, optional
        What to do with a record for which :meth:`extract` gives no valid timestamp; default:
        the config's ``streamtable.invalid.timestamp.policy``.

    Examples
    --------
    >>> class Doubled(TimestampExtractor):
    ...     def extract(self, key, value, record_timestamp_ms):
    ...         return 2 * record_timestamp_ms
    >>> Doubled(on_invalid="fail")("k", "v", 21)
    42
    """

    __slots__ = ("on_invalid",)

    def __init__(self, *, on_invalid: str | None = None) -> None:
        self.on_invalid = _check_policy(on_invalid, type(self).__name__)

    def extract(self, key: Any, value: Any, record_timestamp_ms: int) -> Any:
        """The record's timestamp in ms; anything but an ``int >= 0`` means "invalid"."""
        raise NotImplementedError(f"{type(self).__name__} must implement extract().")

    def __call__(self, key: Any, value: Any, record_timestamp_ms: int) -> Any:
        """Same as :meth:`extract`: extractors are used as plain functions."""
        return self.extract(key, value, record_timestamp_ms)

    def explain_invalid(self, key: Any, value: Any, record_timestamp_ms: int) -> str:
        """Why the record has no valid timestamp (``""``: nothing to add)."""
        return ""

    def _args(self) -> list[str]:
        return []

    def _state(self) -> tuple[Any, ...]:
        return (self.on_invalid,)

    def __repr__(self) -> str:
        args = self._args()
        if self.on_invalid is not None:
            args.append(f"on_invalid={self.on_invalid!r}")
        return f"{type(self).__name__}({', '.join(args)})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._state() == self._state()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._state()))


class RecordTimestamp(TimestampExtractor):
    """The Kafka record's own timestamp (Kafka Streams' ``ExtractRecordMetadataTimestamp``).

    It is CreateTime or LogAppendTime, per the topic's ``message.timestamp.type``. Kafka's
    "no timestamp" (-1, from old clients) is invalid.

    Parameters
    ----------
    on_invalid : {"skip", "fail"}, optional
        Default: the config's ``streamtable.invalid.timestamp.policy``.

    Examples
    --------
    >>> RecordTimestamp()("key", {"x": 1}, 1_700_000_000_000)
    1700000000000
    >>> RecordTimestamp(on_invalid="fail")
    RecordTimestamp(on_invalid='fail')
    """

    __slots__ = ()

    def extract(self, key: Any, value: Any, record_timestamp_ms: int) -> int:
        """The record timestamp, unchanged."""
        return record_timestamp_ms

    def explain_invalid(self, key: Any, value: Any, record_timestamp_ms: int) -> str:
        """Say that the record carries no valid timestamp of its own."""
        return "the Kafka record carries no valid timestamp (-1 means none was set)"


class LogAndSkipOnInvalidTimestamp(RecordTimestamp):
    """The record timestamp; records without a valid one are skipped and counted.

    streamtable's default policy (``streamtable.invalid.timestamp.policy`` = ``"skip"``):
    skipped records appear in ``KafkaStreams.metrics()["dropped-records"]`` as
    ``invalid_timestamp``. **Kafka Streams' own default is** :class:`FailOnInvalidTimestamp`,
    which stops the application instead; streamtable skips by default so that one bad record
    does not stop a long-running query. Same as ``RecordTimestamp(on_invalid="skip")``.

    Kafka Streams' third choice, ``UsePartitionTimeOnInvalidTimestamp`` (use the partition's
    highest timestamp so far), is not provided: it needs each partition's stream time carried
    across micro-batches into the source stage.

    Examples
    --------
    >>> LogAndSkipOnInvalidTimestamp().on_invalid
    'skip'
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(on_invalid="skip")

    def __repr__(self) -> str:
        return "LogAndSkipOnInvalidTimestamp()"


class FailOnInvalidTimestamp(RecordTimestamp):
    """The record timestamp; a record without a valid one stops the application.

    Kafka Streams' default extractor. The application goes to ``ERROR`` with a
    :class:`~streamtable.errors.StreamsError` naming the record's topic, partition and offset,
    the value the extractor returned and the config key to change. Same as
    ``RecordTimestamp(on_invalid="fail")``; for every source at once, set
    ``streamtable.invalid.timestamp.policy`` to ``"fail"`` instead.

    Examples
    --------
    >>> FailOnInvalidTimestamp().on_invalid
    'fail'
    >>> FailOnInvalidTimestamp() == FailOnInvalidTimestamp()
    True
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(on_invalid="fail")

    def __repr__(self) -> str:
        return "FailOnInvalidTimestamp()"


class WallclockTimestamp(TimestampExtractor):
    """The wall-clock time when the record is read, in ms (``WallclockTimestampExtractor``).

    Processing-time semantics: windows follow the clock of the Spark worker that reads the
    record, not the data. Results therefore differ between runs; reprocessing the same input
    gives other timestamps.

    Parameters
    ----------
    on_invalid : {"skip", "fail"}, optional
        Only matters for a clock before 1970.

    Examples
    --------
    >>> import time
    >>> before = time.time_ns() // 1_000_000
    >>> before <= WallclockTimestamp()("key", "value", 0) <= time.time_ns() // 1_000_000
    True
    """

    __slots__ = ()

    def extract(self, key: Any, value: Any, record_timestamp_ms: int) -> int:
        """The current time in ms since the epoch."""
        return time.time_ns() // 1_000_000


class FieldTimestamp(TimestampExtractor):
    """A field of the record's value (a dict, e.g. from ``Serdes.json()``) as its timestamp.

    The field may hold:

    - an ``int`` or ``float`` epoch time in ``unit`` (fractions of a ms are dropped);
    - an ISO-8601 string such as ``"2024-05-01T12:00:00Z"`` or ``"2024-05-01 12:00:00.250+02:00"``
      (anything :meth:`datetime.datetime.fromisoformat` reads; without a UTC offset: UTC);
    - a :class:`datetime.datetime` (naive: UTC).

    A value that is not a dict, a missing field, ``None``, an unparseable string, NaN or a time
    before 1970 makes the record's timestamp invalid: it goes to the invalid-timestamp policy
    (by default skipped and counted as ``invalid_timestamp``).

    Parameters
    ----------
    field : str
        The key of the field in the value dict.
    unit : {"ms", "s"}
        The unit of numeric fields: milliseconds (default) or seconds since the epoch.
    on_invalid : {"skip", "fail"}, optional
        Default: the config's ``streamtable.invalid.timestamp.policy``.

    Raises
    ------
    TopologyError
        For an empty field name, an unknown unit or policy.

    Examples
    --------
    >>> at = FieldTimestamp("at")
    >>> at(None, {"at": 1_700_000_000_123}, 0)
    1700000000123
    >>> at(None, {"at": "2024-01-01T00:00:00.5Z"}, 0)
    1704067200500
    >>> FieldTimestamp("at", unit="s")(None, {"at": 1_700_000_000.25}, 0)
    1700000000250
    >>> from datetime import datetime, timezone
    >>> at(None, {"at": datetime(2024, 1, 1, tzinfo=timezone.utc)}, 0)
    1704067200000
    >>> print(at(None, {"other": 1}, 0), at(None, {"at": "yesterday"}, 0), at(None, None, 0))
    None None None
    >>> at.explain_invalid(None, {"at": "yesterday"}, 0)
    "field 'at' of the value holds str 'yesterday', not an epoch number in ms, ..."
    """

    __slots__ = ("field", "unit")

    def __init__(self, field: str, *, unit: str = "ms", on_invalid: str | None = None) -> None:
        super().__init__(on_invalid=on_invalid)
        if not isinstance(field, str) or not field:
            raise TopologyError(
                f"FieldTimestamp: field must be a non-empty str; got {field!r} ({_EXTENSION})."
            )
        if unit not in _UNITS:
            raise TopologyError(
                f"FieldTimestamp: unit must be 'ms' or 's'; got {unit!r} ({_EXTENSION})."
            )
        self.field = field
        self.unit = unit

    def extract(self, key: Any, value: Any, record_timestamp_ms: int) -> int | None:
        """The field's time in ms since the epoch, or ``None`` when there is none."""
        if not isinstance(value, Mapping):
            return None
        return self._millis(value.get(self.field))

    def _millis(self, x: Any) -> int | None:
        if x is None or isinstance(x, bool):
            return None
        if isinstance(x, int):
            return x * _UNITS[self.unit]
        if isinstance(x, float | Decimal):
            # through the shortest decimal repr: 1.1 s is 1100 ms, not 1100.0000000000002
            exact = Decimal(repr(x)) if isinstance(x, float) else x
            try:
                return math.floor(exact * _UNITS[self.unit])
            except (ArithmeticError, ValueError):  # NaN, infinities
                return None
        if isinstance(x, str):
            try:
                x = datetime.fromisoformat(x.strip())
            except ValueError:
                return None
        if isinstance(x, datetime):
            if x.tzinfo is None:
                x = x.replace(tzinfo=UTC)
            return (x - _EPOCH) // _MS
        return None

    def explain_invalid(self, key: Any, value: Any, record_timestamp_ms: int) -> str:
        """Say what the field held (or that the value has no such field)."""
        if not isinstance(value, Mapping):
            return f"the value is {type(value).__name__}, not a dict with field {self.field!r}"
        if self.field not in value:
            return f"the value has no field {self.field!r}"
        x = value[self.field]
        if x is None:
            return f"field {self.field!r} of the value is None"
        got = self._millis(x)
        if got is not None:
            return f"field {self.field!r} of the value holds {x!r}: {got} ms, out of range"
        return (
            f"field {self.field!r} of the value holds {type(x).__name__} {x!r}, not an epoch "
            f"number in {self.unit}, an ISO-8601 string or a datetime"
        )

    def _args(self) -> list[str]:
        return [repr(self.field)] + ([] if self.unit == "ms" else [f"unit={self.unit!r}"])

    def _state(self) -> tuple[Any, ...]:
        return (self.field, self.unit, self.on_invalid)


def describe_extractor(extractor: Callable[..., Any]) -> str:
    """A short name of an extractor for messages: its repr for ours, else the callable's name."""
    if isinstance(extractor, TimestampExtractor):
        return repr(extractor)
    from streamtable.dsl._callables import describe_callable

    return describe_callable(extractor)
