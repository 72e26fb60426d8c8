"""Interactive queries of window and session stores (Kafka Streams' ``ReadOnlyWindowStore`` and
``ReadOnlySessionStore``) over the changelog-fed replica.

The changelog keys are Kafka Streams' store key binaries, so the replica's byte order is
Kafka Streams' store order:

- window stores (``WindowKeySchema``): key bytes + 8-byte big-endian window start + 4-byte
  sequence number (0: no duplicates);
- session stores (``SessionKeySchema``): key bytes + 8-byte end + 8-byte start.

Times are ms since the epoch (``datetime``/``timedelta`` are not taken). Time ranges are
inclusive, as in Kafka Streams.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from streamtable.serde import Windowed
from streamtable.state.queries import ReplicaView

if TYPE_CHECKING:
    from streamtable.compiler.changelog import ChangelogInfo
    from streamtable.state.replica import StoreReplica

__all__ = ["ReadOnlySessionStore", "ReadOnlyWindowStore"]

_TS = struct.Struct(">q")
#: ``key_to`` not given: a session store's ``fetch(key)`` of one key
_ONE_KEY: Any = object()
_SEQ0 = b"\x00\x00\x00\x00"
_MIN_TS, _MAX_TS = 0, (1 << 63) - 1


def window_store_key(key: bytes, start: int) -> bytes:
    """Kafka Streams' window store key binary (sequence number 0).

    >>> window_store_key(b"k", 1).hex()
    '6b000000000000000100000000'
    """
    return key + _TS.pack(start) + _SEQ0


class ReadOnlyWindowStore(ReplicaView):
    """Kafka Streams' ``ReadOnlyWindowStore`` of a windowed aggregation's named store.

    ``fetch(key, from, to)`` gives ``(window start, value)`` pairs; the forms over several
    keys give ``(Windowed(key, start, end), value)`` pairs. Windows come in start order per
    key, keys in byte order. As in Kafka Streams, windows starting at or before the store's
    observed stream time minus its retention are not returned: its largest window start,
    taken per changelog partition (Kafka Streams: per task) and the smallest of those.
    """

    def __init__(self, info: ChangelogInfo, replica: StoreReplica) -> None:
        super().__init__(info, replica)
        self.window_size_ms = info.window_size_ms or 0
        self.retention_ms = info.retention_ms

    def fetch(self, key: Any, *args: Any) -> Any:
        """``fetch(key, time)``: the value of the window of ``key`` starting at ``time`` (or
        ``None``); ``fetch(key, time_from, time_to)``: ``(start, value)`` of the windows of
        ``key`` starting in ``[time_from, time_to]``; ``fetch(key_from, key_to, time_from,
        time_to)``: ``(Windowed, value)`` over a key range.
        """
        if len(args) == 1:
            start = int(args[0])
            k = window_store_key(self._serialize_key(key), start)

            def get(store: Any) -> bytes | None:
                return None if _expired(start, _cutoff(self)) else store.get(k)

            value, _ = self._replica.read(self.name, get)
            return self.value_serde.deserialize(value)
        if len(args) == 2:
            return [(w.start, v) for w, v in self._windows(key, key, *args, reverse=False)]
        if len(args) == 3:
            return self._windows(key, args[0], args[1], args[2], reverse=False)
        raise TypeError("fetch takes (key, time), (key, from, to) or (key_from, key_to, from, to)")

    def backward_fetch(self, key: Any, *args: Any) -> list[Any]:
        """:meth:`fetch` (range forms) in descending order."""
        if len(args) == 2:
            return [(w.start, v) for w, v in self._windows(key, key, *args, reverse=True)]
        if len(args) == 3:
            return self._windows(key, args[0], args[1], args[2], reverse=True)
        raise TypeError("backward_fetch takes (key, from, to) or (key_from, key_to, from, to)")

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed, Any]]:
        """Every window starting in ``[time_from, time_to]``, all keys."""
        return self._windows(None, None, time_from, time_to, reverse=False)

    def backward_fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed, Any]]:
        """:meth:`fetch_all` in descending order."""
        return self._windows(None, None, time_from, time_to, reverse=True)

    def all(self) -> list[tuple[Windowed, Any]]:
        """Every window of every key."""
        return self._windows(None, None, _MIN_TS, _MAX_TS, reverse=False)

    def backward_all(self) -> list[tuple[Windowed, Any]]:
        """:meth:`all` in descending order."""
        return self._windows(None, None, _MIN_TS, _MAX_TS, reverse=True)

    def _windows(
        self, lo: Any, hi: Any, time_from: int, time_to: int, *, reverse: bool
    ) -> list[tuple[Windowed, Any]]:
        lo_b = None if lo is None else self._serialize_key(lo)
        hi_b = None if hi is None else self._serialize_key(hi)
        t0, t1 = int(time_from), int(time_to)
        if (lo_b is not None and hi_b is not None and lo_b > hi_b) or t0 > t1:
            return []

        def scan(store: Any) -> list[tuple[bytes, int, bytes]]:
            cutoff = _cutoff(self)
            minimum = None if lo_b is None else lo_b
            maximum = None if hi_b is None else hi_b + b"\xff" * 13
            out = []
            for k in store.irange(minimum, maximum):
                inner, start = k[:-12], _TS.unpack_from(k, len(k) - 12)[0]
                if lo_b is not None and inner < lo_b or hi_b is not None and inner > hi_b:
                    continue
                if t0 <= start <= t1 and not _expired(start, cutoff):
                    out.append((inner, start, store[k]))
            return out

        rows, _ = self._replica.read(self.name, scan)
        rows.sort(key=lambda r: (r[0], r[1]), reverse=reverse)
        keys = self.key_serde.deserialize_many([r[0] for r in rows])
        values = self.value_serde.deserialize_many([r[2] for r in rows])
        size = self.window_size_ms
        return [
            (Windowed(k, r[1], r[1] + size), v) for k, r, v in zip(keys, rows, values, strict=True)
        ]


class ReadOnlySessionStore(ReplicaView):
    """Kafka Streams' ``ReadOnlySessionStore`` of a session-windowed aggregation's named store.

    Results are ``(Windowed(key, start, end), value)`` pairs, sessions in (key bytes, end,
    start) order (Kafka Streams' order for one key). As in Kafka Streams, sessions that
    ended at or before the store's observed stream time minus its retention are not
    returned: its largest session end, per changelog partition, the smallest of those.
    """

    def __init__(self, info: ChangelogInfo, replica: StoreReplica) -> None:
        super().__init__(info, replica)
        self.retention_ms = info.retention_ms

    def fetch(self, key: Any, key_to: Any = _ONE_KEY) -> list[tuple[Windowed, Any]]:
        """``fetch(key)``: every session of ``key``; ``fetch(key_from, key_to)``: every
        session of the keys in ``[key_from, key_to]``, where a ``None`` bound is open (Kafka
        Streams' ``fetch(keyFrom, keyTo)``: "a null value indicates that the range starts
        with the first element"/"ends with the last element").
        """
        lo, hi = _key_range("fetch", key, key_to)
        return self._sessions(lo, hi, _MIN_TS, _MAX_TS, reverse=False)

    def backward_fetch(self, key: Any, key_to: Any = _ONE_KEY) -> list[tuple[Windowed, Any]]:
        """:meth:`fetch` in descending order."""
        lo, hi = _key_range("backward_fetch", key, key_to)
        return self._sessions(lo, hi, _MIN_TS, _MAX_TS, reverse=True)

    def find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[Windowed, Any]]:
        """Sessions of ``key`` ending at or after ``earliest_session_end`` and starting at
        or before ``latest_session_start`` (Kafka Streams' ``findSessions``).
        """
        return self._sessions(key, key, earliest_session_end, latest_session_start, reverse=False)

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        """The value of the session of ``key`` from ``start`` to ``end``, or ``None``."""
        k = self._serialize_key(key) + _TS.pack(int(end)) + _TS.pack(int(start))

        def get(store: Any) -> bytes | None:
            return None if _expired(int(end), _cutoff(self)) else store.get(k)

        value, _ = self._replica.read(self.name, get)
        return self.value_serde.deserialize(value)

    def _sessions(
        self, lo: Any, hi: Any, earliest_end: int, latest_start: int, *, reverse: bool
    ) -> list[tuple[Windowed, Any]]:
        lo_b = None if lo is None else self._serialize_key(lo)
        hi_b = None if hi is None else self._serialize_key(hi)
        if lo_b is not None and hi_b is not None and lo_b > hi_b:
            return []

        def scan(store: Any) -> list[tuple[bytes, int, int, bytes]]:
            cutoff = _cutoff(self)
            out = []
            for k in store.irange(lo_b, None if hi_b is None else hi_b + b"\xff" * 17):
                inner = k[:-16]
                if lo_b is not None and inner < lo_b or hi_b is not None and inner > hi_b:
                    continue
                end, start = _TS.unpack_from(k, len(k) - 16)[0], _TS.unpack_from(k, len(k) - 8)[0]
                if end >= earliest_end and start <= latest_start and not _expired(end, cutoff):
                    out.append((inner, end, start, store[k]))
            return out

        rows, _ = self._replica.read(self.name, scan)
        rows.sort(key=lambda r: (r[0], r[1], r[2]), reverse=reverse)
        keys = self.key_serde.deserialize_many([r[0] for r in rows])
        values = self.value_serde.deserialize_many([r[3] for r in rows])
        return [(Windowed(k, r[2], r[1]), v) for k, r, v in zip(keys, rows, values, strict=True)]


def _key_range(method: str, key: Any, key_to: Any) -> tuple[Any, Any]:
    """The key bounds of a session store's ``fetch(key)`` or ``fetch(key_from, key_to)``.

    >>> _key_range("fetch", "a", _ONE_KEY), _key_range("fetch", "a", None)
    (('a', 'a'), ('a', None))
    """
    if key_to is _ONE_KEY:
        if key is None:
            raise ValueError(f"{method}(key): the key must not be None (Kafka Streams refuses it)")
        return key, key
    return key, key_to


def _cutoff(view: Any) -> int | None:
    """The time at or before which a window's start (a session's end) is past the store's
    retention: its observed stream time minus the retention. Kafka Streams' segmented stores
    return nothing at or before it (``AbstractRocksDBSegmentedBytesStore``'s
    ``getActualFrom``; ``InMemoryWindowStore`` likewise). ``None``: nothing has expired.
    """
    observed = view._replica.observed_time(view.name)
    if view.retention_ms is None or observed is None:
        return None
    return observed - view.retention_ms


def _expired(at: int, cutoff: int | None) -> bool:
    return cutoff is not None and at <= cutoff
