"""Read-only views of a :class:`~streamtable.testing.TopologyTestDriver`'s state stores.

A store is read from the query's checkpoint with Spark's ``statestore`` batch data source:
the state the last micro-batch committed, which is the state after the last piped record.
The compiler registers where each store lives (:class:`~streamtable.compiler.frame.
StoreLocation`): the query, the stateful operator, the state variable and a decoder that
turns the source's rows into the store's entries (the operator's own state format, decoded
by the module that defines it). Nothing is captured through the processors: the driver reads
the state production writes.

- The operator is found in the query's executed plan: the compiler counts a query's stateful
  operators inputs first, which is a post-order walk of the plan; Spark's ``operatorId`` is
  read from each stateful node there.
- A read costs about a second, so decoded contents are cached per store until the query
  commits another micro-batch (the checkpoint's latest commit is the cache key).
- Keys are ordered by their serialized bytes, as Kafka's stores iterate them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamtable.errors import StreamsError, TopologyError
from streamtable.serde import Windowed

if TYPE_CHECKING:
    from streamtable.compiler.frame import StoreLocation
    from streamtable.testing.driver import TopologyTestDriver

__all__ = ["KeyValueStoreView", "SessionStoreView", "WindowStoreView", "open_store"]

_KIND_NAMES = {"key_value": "key-value", "window": "window", "session": "session"}
_GETTERS = {
    "key_value": "get_key_value_store",
    "window": "get_window_store",
    "session": "get_session_store",
}


def open_store(driver: TopologyTestDriver, name: str, kind: str) -> Any:
    """The view of store ``name`` (``kind``: ``"key_value"``, ``"window"`` or ``"session"``).

    Parameters
    ----------
    driver : TopologyTestDriver
        The driver whose topology owns the store.
    name : str
        The store's name (``Materialized`` / ``name=`` of the operator, or the generated one).
    kind : str
        The kind of view asked for.

    Returns
    -------
    KeyValueStoreView or WindowStoreView or SessionStoreView

    Raises
    ------
    TopologyError
        If the topology has no store ``name`` (the message lists its stores), or the store
        is of another kind (the message names its kind and the method that reads it), or it
        cannot be read by the driver (suppression buffers, join stores).
    StreamsError
        If the driver is closed.
    """
    driver._check_open()
    loc = driver._stores.get(name)
    stores = sorted(driver.topology.store_names)
    if loc is None:
        if name in stores:
            readable = sorted(driver._stores)
            raise TopologyError(
                f"Store {name!r} cannot be read by the TopologyTestDriver (the stores of "
                f"aggregations can, and those of tables that a table aggregation or a stream "
                f"join reads; suppression buffers, join stores and tables used otherwise "
                f"cannot yet, though Kafka Streams' TopologyTestDriver reads every store); the "
                f"readable stores are {readable}."
            )
        raise TopologyError(
            f"The topology has no state store {name!r}; its stores are {stores} (Kafka "
            "Streams' TopologyTestDriver returns null for it)."
        )
    if loc.kind != kind:
        raise TopologyError(
            f"Store {name!r} is a {_KIND_NAMES[loc.kind]} store, not a {_KIND_NAMES[kind]} "
            f"store: read it with driver.{_GETTERS[loc.kind]}({name!r}) (Kafka Streams' "
            "TopologyTestDriver returns null from the other getters)."
        )
    view = {"key_value": KeyValueStoreView, "window": WindowStoreView}.get(kind, SessionStoreView)
    return view(driver, name, loc)


# -- reading a store -----------------------------------------------------------------------


@dataclass
class StoreCache:
    """What one driver has read (``TopologyTestDriver._store_cache``): operator ids per query,
    decoded contents per store.
    """

    #: query -> Spark operatorId of each stateful operator, in the compiler's order
    operator_ids: dict[str, list[int]] = field(default_factory=dict)
    #: store -> (batch id the contents are as of, entries)
    contents: dict[str, tuple[int, list[tuple[Any, ...]]]] = field(default_factory=dict)


def _last_commit(checkpoint: Path) -> int | None:
    """The latest micro-batch the query committed (``commits/<batch id>``), or None."""
    try:
        names = os.listdir(checkpoint / "commits")
    except FileNotFoundError:
        return None
    ids = [int(n) for n in names if n.isdigit()]
    return max(ids) if ids else None


def _stateful_post_order(plan: Any) -> list[int]:
    """Spark ``operatorId`` of every stateful node of an executed plan (a py4j object),
    inputs before the node reading them (children in order), each id once.
    """
    ids: list[int] = []
    stack: list[tuple[Any, bool]] = [(plan, False)]
    while stack:
        node, expanded = stack.pop()
        if not expanded:
            stack.append((node, True))
            children = node.children()
            for i in reversed(range(children.length())):
                stack.append((children.apply(i), False))
            continue
        name = node.getClass().getSimpleName()
        if "StateStoreRestore" in name:
            continue  # shares its id with the StateStoreSaveExec above it
        try:
            info = node.stateInfo()
        except Exception:  # not a stateful operator (py4j: no such method)
            continue
        if info.isDefined():
            op = int(info.get().operatorId())
            if op not in ids:
                ids.append(op)
    return ids


def _operator_id(driver: TopologyTestDriver, loc: StoreLocation, cache: StoreCache) -> int:
    ids = cache.operator_ids.get(loc.query)
    if ids is None:
        query = next(
            q for p, q in zip(driver._plans, driver._queries, strict=True) if p.name == loc.query
        )
        execution = query._jsq.streamingQuery().lastExecution()  # the StreamExecution's
        if execution is None:
            raise StreamsError(f"Query {query.name} has not run a micro-batch yet.")
        ids = cache.operator_ids[loc.query] = _stateful_post_order(execution.executedPlan())
    if loc.operator >= len(ids):
        raise StreamsError(
            f"The plan of query {loc.query!r} has {len(ids)} stateful operators; the store's "
            f"is number {loc.operator} in the compiler's order."
        )
    return ids[loc.operator]


def read_entries(driver: TopologyTestDriver, name: str, loc: StoreLocation) -> list[tuple]:
    """The decoded entries of store ``name`` as of the last committed micro-batch, cached
    until its query commits another one.

    Parameters
    ----------
    driver : TopologyTestDriver
    name : str
    loc : StoreLocation
        Where the store lives (registered by the compiler).

    Returns
    -------
    list of tuple
        ``(key bytes, value)`` for key-value stores, ``(key bytes, start, end, value)`` for
        window and session stores; unordered.
    """
    driver._check_open()  # a view kept past close() reads no deleted state
    checkpoint = Path(driver.config.checkpoint_dir) / loc.query
    batch = _last_commit(checkpoint)
    if batch is None:
        return []  # nothing processed yet
    cache = driver._store_cache
    cached = cache.contents.get(name)
    if cached is not None and cached[0] == batch:
        return cached[1]
    reader = (
        driver._spark.read.format("statestore")
        .option("batchId", batch)
        .option("operatorId", _operator_id(driver, loc, cache))
    )
    if loc.state_var is not None:
        reader = reader.option("stateVarName", loc.state_var)
    df = reader.load(str(checkpoint))
    assert loc.decode is not None
    if "user_map_key" in df.columns:  # a map state: (grouping key, map key, map value)
        rows = df.select("key", "user_map_key", "user_map_value").collect()
        entries = loc.decode([(r[0], r[1], r[2]) for r in rows])
    else:
        rows = df.select("key", "value").collect()
        entries = loc.decode([(r["key"], r["value"]) for r in rows])
    cache.contents[name] = (batch, entries)
    return entries


class _StoreView:
    """What every view shares: the driver, the store's location, encoding keys."""

    def __init__(self, driver: TopologyTestDriver, name: str, loc: StoreLocation) -> None:
        self._driver = driver
        self.name = name
        self._loc = loc

    def _entries(self) -> list[tuple]:
        return read_entries(self._driver, self.name, self._loc)

    def _key_bytes(self, key: Any) -> bytes:
        return self._loc.key_codec.encode_many([key])[0]

    def _keys(self, entries: list[tuple]) -> list[Any]:
        return self._loc.key_codec.decode_many([e[0] for e in entries])


# -- key-value stores ----------------------------------------------------------------------


class KeyValueStoreView(_StoreView):
    """Read-only key-value store contents (Kafka's ``ReadOnlyKeyValueStore``).

    Iteration is in the order of the serialized keys' bytes, as Kafka's RocksDB and
    in-memory stores iterate. Contents are read once per committed micro-batch.
    """

    def _sorted(self) -> list[tuple[bytes, Any, Any]]:
        entries = sorted(self._entries(), key=lambda e: e[0])
        return [(e[0], k, e[1]) for e, k in zip(entries, self._keys(entries), strict=True)]

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None.

        Parameters
        ----------
        key : object
            A key, as the store's key serde reads it.
        """
        kb = self._key_bytes(key)
        for k, value in self._entries():
            if k == kb:
                return value
        return None

    def all(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)``, in key-byte order."""
        return [(k, v) for _, k, v in self._sorted()]

    def reverse_all(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)``, in reverse key-byte order."""
        return self.all()[::-1]

    def range(self, key_from: Any = None, key_to: Any = None) -> list[tuple[Any, Any]]:
        """The ``(key, value)`` pairs with ``key_from <= key <= key_to``, in key-byte order.

        Parameters
        ----------
        key_from, key_to : object, optional
            Inclusive bounds, compared as serialized bytes; None leaves that end open.
        """
        lo = None if key_from is None else self._key_bytes(key_from)
        hi = None if key_to is None else self._key_bytes(key_to)
        return [
            (k, v)
            for kb, k, v in self._sorted()
            if (lo is None or kb >= lo) and (hi is None or kb <= hi)
        ]

    def reverse_range(self, key_from: Any = None, key_to: Any = None) -> list[tuple[Any, Any]]:
        """:meth:`range` in reverse key-byte order."""
        return self.range(key_from, key_to)[::-1]

    def approximate_num_entries(self) -> int:
        """The number of keys (exact here)."""
        return len(self._entries())


# -- window and session stores ---------------------------------------------------------------


class _WindowedView(_StoreView):
    def _windows(self, key: Any = None) -> list[tuple[bytes, Any, int, int, Any]]:
        """``(key bytes, key, start, end, value)`` of the windows held (of ``key``, if given)."""
        entries = self._entries()
        if key is not None:
            kb = self._key_bytes(key)
            entries = [e for e in entries if e[0] == kb]
        keys = self._keys(entries) if key is None else [key] * len(entries)
        return [(e[0], k, e[1], e[2], e[3]) for e, k in zip(entries, keys, strict=True)]


class WindowStoreView(_WindowedView):
    """Read-only window store contents (Kafka's ``ReadOnlyWindowStore``) of a time or sliding
    window aggregation: only the windows still held (not yet past the store's retention).

    Windows are ordered by start time, then key bytes. Keys of :meth:`fetch_all` and
    :meth:`all` are :class:`~streamtable.serde.Windowed`.
    """

    def fetch(
        self, key: Any, time_from: int | None = None, time_to: int | None = None
    ) -> list[tuple[int, Any]]:
        """``(window start, value)`` of ``key``'s windows starting in ``[time_from, time_to]``,
        in start order (Kafka's ``fetch(key, timeFrom, timeTo)``).

        Parameters
        ----------
        key : object
        time_from, time_to : int, optional
            Inclusive bounds of the window start (ms); None leaves that end open.
        """
        return [
            (start, value)
            for _, _, start, _, value in sorted(self._windows(key), key=lambda w: w[2])
            if _within(start, time_from, time_to)
        ]

    def fetch_value(self, key: Any, window_start: int) -> Any:
        """The value of ``key``'s window starting at ``window_start``, or None (Kafka's
        ``fetch(key, time)``).
        """
        for _, _, start, _, value in self._windows(key):
            if start == window_start:
                return value
        return None

    def fetch_all(
        self, time_from: int | None = None, time_to: int | None = None
    ) -> list[tuple[Windowed, Any]]:
        """``(Windowed(key, start, end), value)`` of every window starting in ``[time_from,
        time_to]`` (inclusive, ms; None: open), by start then key bytes.
        """
        windows = sorted(self._windows(), key=lambda w: (w[2], w[0], w[3]))
        return [
            (Windowed(k, start, end), value)
            for _, k, start, end, value in windows
            if _within(start, time_from, time_to)
        ]

    def all(self) -> list[tuple[Windowed, Any]]:
        """``(Windowed(key, start, end), value)`` of every window held, by start then key."""
        return self.fetch_all()


class SessionStoreView(_WindowedView):
    """Read-only session store contents (Kafka's ``ReadOnlySessionStore``): the sessions
    still held (not merged away, not past the store's retention).

    Sessions are :class:`~streamtable.serde.Windowed` keys (start and end inclusive),
    ordered by key bytes, then end, then start (Kafka's session key schema).
    """

    def _sessions(self, key: Any = None) -> list[tuple[Windowed, Any]]:
        windows = sorted(self._windows(key), key=lambda w: (w[0], w[3], w[2]))
        return [(Windowed(k, start, end), value) for _, k, start, end, value in windows]

    def fetch(self, key: Any) -> list[tuple[Windowed, Any]]:
        """``(Windowed(key, start, end), aggregate)`` of every session of ``key``."""
        return self._sessions(key)

    def find_sessions(
        self, key: Any, earliest_session_end_time: int, latest_session_start_time: int
    ) -> list[tuple[Windowed, Any]]:
        """The sessions of ``key`` ending at or after ``earliest_session_end_time`` and
        starting at or before ``latest_session_start_time`` (Kafka's ``findSessions``).
        """
        return [
            (w, v)
            for w, v in self._sessions(key)
            if w.end >= earliest_session_end_time and w.start <= latest_session_start_time
        ]

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        """The aggregate of ``key``'s session ``[session_start, session_end]``, or None."""
        for w, v in self._sessions(key):
            if w.start == session_start and w.end == session_end:
                return v
        return None

    def all(self) -> list[tuple[Windowed, Any]]:
        """Every session held, by key bytes, then end, then start."""
        return self._sessions()


def _within(t: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or t >= lo) and (hi is None or t <= hi)
