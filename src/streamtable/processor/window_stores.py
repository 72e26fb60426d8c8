"""Window stores of the Processor API (Kafka Streams' ``WindowStore`` and its builders).

``Stores.window_store_builder(Stores.persistent_window_store(name, retention, window_size,
retain_duplicates=False), key_serde, value_serde)`` describes one; a processor gets a
:class:`WindowStore` from ``context.get_state_store(name)``. Entries are keyed as Kafka
Streams' window stores key them (``WindowKeySchema``: key bytes + 8-byte big-endian window
start + 4-byte sequence number), so the changelog and interactive queries read like Kafka
Streams' (``QueryableStoreTypes.window_store()``).

Retention follows Kafka Streams' segmented stores: the store's observed stream time is the
largest window start ever put; a put for a window that starts at or before observed stream time
minus the retention is dropped, fetches skip such windows, and they are removed (with
changelog tombstones) after each micro-batch (per window: Kafka Streams drops whole segments,
so it may keep a window a little longer).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar

from streamtable._millis import duration_ms
from streamtable.errors import TopologyError
from streamtable.serde import Windowed
from streamtable.serde.base import Serde

__all__ = ["WindowBytesStoreSupplier", "WindowStore", "WindowStoreBuilder"]

_TS = struct.Struct(">q")
_SEQ = struct.Struct(">i")
#: the entry holding the store's observed stream time (never a window key: those are >= 12 bytes)
_OBSERVED = b""


def _ms(value: timedelta | int, what: str, name: str) -> int:
    ms = duration_ms(value) if isinstance(value, timedelta) else int(value)
    if ms < 0:
        raise TopologyError(f"Window store {name!r}: {what} cannot be negative; got {value!r}.")
    return ms


@dataclass(frozen=True)
class WindowBytesStoreSupplier:
    """A window store's name, retention, window size and duplicate policy (ms)."""

    name: str
    retention_ms: int
    window_size_ms: int
    retain_duplicates: bool = False
    persistent: bool = True

    @classmethod
    def of(
        cls,
        name: str,
        retention: timedelta | int,
        window_size: timedelta | int,
        retain_duplicates: bool,
        persistent: bool,
    ) -> WindowBytesStoreSupplier:
        """Checked as Kafka Streams' ``Stores.persistentWindowStore`` checks.

        Raises
        ------
        TopologyError
            If the name is empty, a duration negative, or the retention shorter than the
            window size ("The retention period of the window store ... must be no smaller than
            its window size").
        """
        if not isinstance(name, str) or not name:
            raise TopologyError(f"A window store needs a non-empty name; got {name!r}.")
        retention_ms = _ms(retention, "the retention period", name)
        size_ms = _ms(window_size, "the window size", name)
        if retention_ms < size_ms:
            raise TopologyError(
                f"The retention period of the window store {name} must be no smaller than its "
                f"window size. Got size=[{size_ms}], retention=[{retention_ms}] (Kafka Streams' "
                "message)."
            )
        return cls(name, retention_ms, size_ms, bool(retain_duplicates), persistent)


@dataclass(frozen=True)
class StoreBuilderOptions:
    """What the store builders share (Kafka Streams' ``StoreBuilder``): supplier, serdes
    (``None``: ``default.key.serde`` / ``default.value.serde``), logging and caching.
    """

    supplier: Any
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    logging: bool = True
    caching: bool = False

    @property
    def name(self) -> str:
        """The store's name."""
        return self.supplier.name

    def with_logging_disabled(self: _B) -> _B:
        """No changelog topic: the store stays fault-tolerant (Spark's checkpoint holds it)
        but is not queryable.
        """
        return replace(self, logging=False)  # type: ignore[type-var]

    def with_logging_enabled(self: _B, config: dict[str, str] | None = None) -> _B:
        """Write a changelog (the default). ``config`` (topic configs) is not supported yet.

        Raises
        ------
        TopologyError
            If ``config`` is given.
        """
        if config:
            raise TopologyError(
                f"Store {self.name!r}: changelog topic configs are not supported yet; call "
                "with_logging_enabled() without a config (Kafka Streams' default topic "
                "configuration is used)."
            )
        return replace(self, logging=True)  # type: ignore[type-var]

    def with_caching_enabled(self: _B) -> _B:
        """Accepted for compatibility: updates are compacted per micro-batch anyway (the
        changelog gets each key's last update per micro-batch, as Kafka Streams' cache does
        per commit).
        """
        return replace(self, caching=True)  # type: ignore[type-var]

    def with_caching_disabled(self: _B) -> _B:
        """See :meth:`with_caching_enabled`."""
        return replace(self, caching=False)  # type: ignore[type-var]


_B = TypeVar("_B", bound=StoreBuilderOptions)


@dataclass(frozen=True)
class WindowStoreBuilder(StoreBuilderOptions):
    """A window store's definition (Kafka Streams' ``StoreBuilder<WindowStore>``)."""

    supplier: WindowBytesStoreSupplier


def window_key(key: bytes, start: int, seq: int = 0) -> bytes:
    """Kafka Streams' window store key binary.

    >>> window_key(b"k", 2).hex()
    '6b000000000000000200000000'
    """
    return key + _TS.pack(start) + _SEQ.pack(seq)


class WindowStore:
    """A read-write window store as a processor sees it (Kafka Streams' ``WindowStore``).

    Windows are identified by key and start time (ms); a ``None`` value deletes (unless the
    store retains duplicates, where ``None`` is ignored, as in Kafka Streams). Fetches return
    lists in (key bytes, start) order.

    Examples
    --------
    >>> from streamtable import Serdes
    >>> sup = WindowBytesStoreSupplier.of("w", 100, 10, False, True)
    >>> s = WindowStore(sup, {}, Serdes.string(), Serdes.long())
    >>> s.put("a", 1, 0); s.put("a", 2, 10); s.put("b", 3, 10)
    >>> s.fetch("a", 0, 10), s.fetch("a", 10)
    ([(0, 1), (10, 2)], 2)
    >>> s.put("a", 9, 200)  # observed stream time 200: windows at or before 100 expire
    >>> s.fetch("a", 0, 1_000), s.put("a", 5, 50), s.fetch("a", 50)
    ([(200, 9)], None, None)
    """

    def __init__(
        self,
        supplier: WindowBytesStoreSupplier,
        data: MutableMapping[bytes, bytes],
        key_serde: Serde,
        value_serde: Serde,
    ) -> None:
        self._supplier = supplier
        self._data = data
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._advanced = False
        #: ``on_change(key bytes, value bytes or None)`` after each write (the changelog)
        self.on_change: Callable[[bytes, bytes | None], None] | None = None

    def name(self) -> str:
        """The store's name."""
        return self._supplier.name

    def persistent(self) -> bool:
        """Kafka Streams' answer: true for a ``persistent_window_store``, false for an
        ``in_memory_window_store`` (both survive restarts here, in Spark's checkpoint).
        """
        return self._supplier.persistent

    def _key(self, key: Any) -> bytes:
        if key is None:
            raise ValueError(f"Window store {self.name()!r}: keys cannot be None.")
        data = self._key_serde.serialize(key)
        assert data is not None
        return data

    def _observed(self) -> int | None:
        raw = self._data.get(_OBSERVED)
        return None if raw is None else _TS.unpack_from(raw)[0]

    def _next_seq(self) -> int:
        """The next duplicate's sequence number, kept beside the observed time for the store's
        life (Kafka Streams' ``seqnum``: ``(seqnum + 1) & 0x7FFFFFFF``), not per micro-batch.
        """
        raw = self._data[_OBSERVED]
        seq = ((_SEQ.unpack_from(raw, 8)[0] if len(raw) > 8 else 0) + 1) & 0x7FFFFFFF
        self._data[_OBSERVED] = raw[:8] + _SEQ.pack(seq)
        return seq

    def _expired_before(self) -> int | None:
        """Windows starting at or before this are expired."""
        observed = self._observed()
        return None if observed is None else observed - self._supplier.retention_ms

    def put(self, key: Any, value: Any, window_start_timestamp: int) -> None:
        """Put ``value`` for the window of ``key`` starting at ``window_start_timestamp`` (ms)."""
        start = int(window_start_timestamp)
        observed = self._observed()
        if observed is None or start > observed:
            self._data[_OBSERVED] = _TS.pack(start) + self._data.get(_OBSERVED, b"")[8:]
            self._advanced = True
        expired = self._expired_before()
        if expired is not None and start <= expired:
            return  # Kafka Streams: "Skipping record for expired segment"
        if self._supplier.retain_duplicates:
            if value is None:
                return
            kb = window_key(self._key(key), start, self._next_seq())
        else:
            kb = window_key(self._key(key), start)
        vb = None if value is None else self._value_serde.serialize(value)
        if vb is None:
            self._data.pop(kb, None)
        else:
            self._data[kb] = vb
        if self.on_change is not None:
            self.on_change(kb, vb)

    def flush(self) -> None:
        """Remove the windows that expired since the last flush (called after each
        micro-batch; the changelog gets their tombstones).
        """
        if not self._advanced:
            return
        self._advanced = False
        expired = self._expired_before()
        assert expired is not None
        doomed = [
            kb
            for kb in self._data
            if kb != _OBSERVED and _TS.unpack_from(kb, len(kb) - 12)[0] <= expired
        ]
        for kb in doomed:
            del self._data[kb]
            if self.on_change is not None:
                self.on_change(kb, None)

    def fetch(self, key: Any, *args: Any) -> Any:
        """``fetch(key, time)``: the window's value or ``None``; ``fetch(key, time_from,
        time_to)``: ``(start, value)`` of the windows of ``key`` starting in the range;
        ``fetch(key_from, key_to, time_from, time_to)``: ``(Windowed, value)`` pairs.
        """
        if len(args) == 1:
            expired = self._expired_before()
            start = int(args[0])
            if expired is not None and start <= expired:
                return None
            raw = self._data.get(window_key(self._key(key), start))
            return None if raw is None else self._value_serde.deserialize(raw)
        if len(args) == 2:
            return [(w.start, v) for w, v in self._windows(key, key, args[0], args[1], False)]
        if len(args) == 3:
            return self._windows(key, args[0], args[1], args[2], False)
        raise TypeError("fetch takes (key, time), (key, from, to) or (key_from, key_to, from, to)")

    def backward_fetch(self, key: Any, *args: Any) -> list[Any]:
        """:meth:`fetch` (range forms), descending."""
        if len(args) == 2:
            return [(w.start, v) for w, v in self._windows(key, key, args[0], args[1], True)]
        return self._windows(key, args[0], args[1], args[2], True)

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed, Any]]:
        """Every window starting in ``[time_from, time_to]``."""
        return self._windows(None, None, time_from, time_to, False)

    def all(self) -> list[tuple[Windowed, Any]]:
        """Every window held (within the retention)."""
        return self._windows(None, None, -(1 << 63), (1 << 63) - 1, False)

    def _windows(
        self, lo: Any, hi: Any, time_from: int, time_to: int, reverse: bool
    ) -> list[tuple[Windowed, Any]]:
        lo_b = None if lo is None else self._key(lo)
        hi_b = None if hi is None else self._key(hi)
        expired = self._expired_before()
        t0 = int(time_from) if expired is None else max(int(time_from), expired + 1)
        rows = []
        for kb in self._data:
            if kb == _OBSERVED:
                continue
            inner, start = kb[:-12], _TS.unpack_from(kb, len(kb) - 12)[0]
            if (lo_b is None or inner >= lo_b) and (hi_b is None or inner <= hi_b):
                if t0 <= start <= int(time_to):
                    rows.append((inner, start, kb))
        rows.sort(reverse=reverse)
        size = self._supplier.window_size_ms
        keys = self._key_serde.deserialize_many([r[0] for r in rows])
        values = self._value_serde.deserialize_many([self._data[r[2]] for r in rows])
        return [
            (Windowed(k, r[1], r[1] + size), v) for k, r, v in zip(keys, rows, values, strict=True)
        ]

    def __repr__(self) -> str:
        return f"WindowStore({self.name()!r})"
