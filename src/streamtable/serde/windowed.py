"""Windowed keys and their serdes, byte-compatible with Kafka's ``WindowedSerdes``.

Wire formats (Kafka's ``WindowKeySchema`` and ``SessionKeySchema``):

- time window: ``[inner key bytes][8-byte big-endian window start]``; the end is rebuilt from
  the window size given to the serde;
- session window: ``[inner key bytes][8-byte big-endian end][8-byte big-endian start]``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from streamtable.serde.base import Serde

__all__ = ["Windowed", "TimeWindowedSerde", "SessionWindowedSerde"]

K = TypeVar("K")

_LONG = struct.Struct(">q")
_TWO_LONGS = struct.Struct(">qq")
_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """A key with the window it belongs to, as Kafka's ``Windowed<K>``.

    Parameters
    ----------
    key : object
        The record key (deserialized).
    start : int
        Window start, epoch milliseconds, inclusive.
    end : int
        Window end, epoch milliseconds, exclusive for time windows and inclusive for session
        windows (as in Kafka).

    Examples
    --------
    >>> w = Windowed("kafka", 0, 5000)
    >>> str(w)
    '[kafka@0/5000]'
    """

    key: K
    start: int
    end: int

    def __str__(self) -> str:
        return f"[{self.key}@{self.start}/{self.end}]"


def _check_window_bounds(serde: Serde, obj: Any) -> Windowed[Any]:
    if not isinstance(obj, Windowed):
        raise serde._ser_error(f"expected Windowed, got {type(obj).__name__}")
    for attr in ("start", "end"):
        v = getattr(obj, attr)
        if isinstance(v, bool) or not isinstance(v, int) or not _LONG_MIN <= v <= _LONG_MAX:
            raise serde._ser_error(f"window {attr} must be a 64-bit int (ms), got {v!r}")
    return obj


def _check_deserialized_window(serde: Serde, start: int, end: int) -> None:
    """Refuse a window Kafka's ``Window`` constructor refuses when a deserializer builds it.

    Raises
    ------
    SerializationError
        If ``start`` is negative or ``end`` before ``start`` (Kafka: IllegalArgumentException
        "Window startMs time cannot be negative." / "Window endMs time cannot be smaller than
        window startMs time.").
    """
    if start < 0:
        raise serde._de_error(
            f"window start {start} is negative (Kafka: 'Window startMs time cannot be "
            "negative.'): these bytes are not a windowed key of this kind"
        )
    if end < start:
        raise serde._de_error(
            f"window end {end} is before its start {start} (Kafka: 'Window endMs time cannot "
            "be smaller than window startMs time.'): these bytes are not a windowed key of "
            "this kind"
        )


class TimeWindowedSerde(Serde):
    r"""Keys of tumbling/hopping windows: inner key bytes + 8-byte big-endian window start.

    As Kafka's ``TimeWindowedSerializer``/``TimeWindowedDeserializer``: the window end is not
    on the wire; deserialization rebuilds ``end = start + window_size_ms``, capped at
    ``2**63 - 1`` on overflow (Java's ``Long.MAX_VALUE``). An empty byte string deserializes
    to ``None``, as in Java.

    Parameters
    ----------
    inner : Serde
        Serde of the key inside the window.
    window_size_ms : int
        Window size in milliseconds (> 0).

    Examples
    --------
    >>> from streamtable.serde import Serdes
    >>> s = Serdes.time_windowed(Serdes.string(), 5000)
    >>> s.serialize(Windowed("a", 10000, 15000))
    b"a\x00\x00\x00\x00\x00\x00'\x10"
    >>> str(s.deserialize(b"a\x00\x00\x00\x00\x00\x00'\x10"))
    '[a@10000/15000]'
    """

    kind: ClassVar[str] = "windowed"

    def __init__(self, inner: Serde, window_size_ms: int) -> None:
        if not isinstance(inner, Serde):
            raise TypeError(f"time_windowed(): inner must be a Serde, got {type(inner).__name__}")
        if isinstance(window_size_ms, bool) or not isinstance(window_size_ms, int):
            raise TypeError(
                "time_windowed(): window_size_ms must be an int, "
                f"got {type(window_size_ms).__name__}"
            )
        if window_size_ms <= 0:
            raise ValueError(f"time_windowed(): window_size_ms must be > 0, got {window_size_ms}")
        self.inner = inner
        self.window_size_ms = window_size_ms
        self.name = f"TimeWindowed{inner.name}"

    def _params(self) -> tuple[Any, ...]:
        return (self.inner, self.window_size_ms)

    def _factory_name(self) -> str:
        return "time_windowed"

    def _repr_args(self) -> str:
        return f"{self.inner!r}, {self.window_size_ms}"

    def _serialize(self, obj: Any) -> bytes:
        w = _check_window_bounds(self, obj)
        key_bytes = self.inner.serialize(w.key)
        if key_bytes is None:
            raise self._ser_error("the key inside a Windowed key must not be None")
        return key_bytes + _LONG.pack(w.start)

    def _deserialize(self, data: bytes) -> Any:
        if len(data) == 0:
            return None
        if len(data) < 8:
            raise self._de_error(
                f"expected inner key bytes + 8-byte big-endian window start, got {len(data)} bytes"
            )
        start = _LONG.unpack_from(data, len(data) - 8)[0]
        _check_deserialized_window(self, start, start)
        end = start + self.window_size_ms
        if end > _LONG_MAX:
            end = _LONG_MAX
        return Windowed(self.inner.deserialize(data[:-8]), start, end)


class SessionWindowedSerde(Serde):
    """Keys of session windows: inner key bytes + 8-byte BE end + 8-byte BE start.

    As Kafka's ``SessionWindowedSerializer``/``SessionWindowedDeserializer`` (``SessionKeySchema``).
    An empty byte string deserializes to ``None``, as in Java.

    Examples
    --------
    >>> from streamtable.serde import Serdes
    >>> s = Serdes.session_windowed(Serdes.string())
    >>> s.serialize(Windowed("a", 1, 2)).hex()
    '6100000000000000020000000000000001'
    >>> s.deserialize(bytes.fromhex('6100000000000000020000000000000001'))
    Windowed(key='a', start=1, end=2)
    """

    kind: ClassVar[str] = "session_windowed"

    def __init__(self, inner: Serde) -> None:
        if not isinstance(inner, Serde):
            raise TypeError(
                f"session_windowed(): inner must be a Serde, got {type(inner).__name__}"
            )
        self.inner = inner
        self.name = f"SessionWindowed{inner.name}"

    def _params(self) -> tuple[Any, ...]:
        return (self.inner,)

    def _factory_name(self) -> str:
        return "session_windowed"

    def _repr_args(self) -> str:
        return repr(self.inner)

    def _serialize(self, obj: Any) -> bytes:
        w = _check_window_bounds(self, obj)
        key_bytes = self.inner.serialize(w.key)
        if key_bytes is None:
            raise self._ser_error("the key inside a Windowed key must not be None")
        return key_bytes + _TWO_LONGS.pack(w.end, w.start)

    def _deserialize(self, data: bytes) -> Any:
        if len(data) == 0:
            return None
        if len(data) < 16:
            raise self._de_error(
                "expected inner key bytes + 8-byte big-endian end + 8-byte big-endian start, "
                f"got {len(data)} bytes"
            )
        end, start = _TWO_LONGS.unpack_from(data, len(data) - 16)
        _check_deserialized_window(self, start, end)
        return Windowed(self.inner.deserialize(data[:-16]), start, end)
