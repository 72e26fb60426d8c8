"""State stores of the Processor API: ``Stores`` factories, store builders, ``KeyValueStore``.

``Stores.key_value_store_builder(Stores.persistent_key_value_store("profiles"), key_serde,
value_serde)`` describes a store; ``StreamsBuilder.add_state_store(builder)`` adds it to the
topology and ``KStream.process(supplier, "profiles")`` connects it to a processor, as in
Kafka Streams. At run time the processor gets a :class:`KeyValueStore` from
``context.get_state_store("profiles")``.

Where the data lives: in Spark's state store (the query's checkpoint), exactly like the DSL's
stores, so it is fault-tolerant and exactly-once under ``exactly_once_v2``. ``persistent_*``
and ``in_memory_*`` suppliers behave the same (Spark's state store provider decides whether
state is in RocksDB; ``streamtable.state.store.provider``); the kind is kept for
``describe()``. With logging enabled (the default, as in Kafka Streams) every update is also
written to the changelog topic ``<application.id>-<store>-changelog``, which feeds
interactive queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from streamtable.errors import TopologyError
from streamtable.processor.window_stores import (
    StoreBuilderOptions,
    WindowBytesStoreSupplier,
    WindowStore,
    WindowStoreBuilder,
)
from streamtable.serde.base import Serde

__all__ = [
    "KeyValueBytesStoreSupplier",
    "KeyValueStore",
    "KeyValueStoreBuilder",
    "Stores",
    "WindowBytesStoreSupplier",
    "WindowStore",
    "WindowStoreBuilder",
    "is_store_builder",
]


@dataclass(frozen=True)
class KeyValueBytesStoreSupplier:
    """Names a key-value store and its kind (Kafka Streams' ``KeyValueBytesStoreSupplier``)."""

    name: str
    persistent: bool = True


@dataclass(frozen=True)
class KeyValueStoreBuilder(StoreBuilderOptions):
    """A key-value store's definition: supplier, serdes, logging (Kafka Streams'
    ``StoreBuilder<KeyValueStore>``). ``None`` serdes mean ``default.key.serde`` /
    ``default.value.serde``.
    """

    supplier: KeyValueBytesStoreSupplier


class Stores:
    """Factories of store suppliers and builders (Kafka Streams' ``Stores``).

    Examples
    --------
    >>> from streamtable import Serdes
    >>> b = Stores.key_value_store_builder(
    ...     Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long())
    >>> b.name, b.logging
    ('counts', True)
    """

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A persistent key-value store supplier named ``name``.

        Raises
        ------
        TopologyError
            If ``name`` is empty (Kafka Streams: "name cannot be null").
        """
        return KeyValueBytesStoreSupplier(_check_name(name), persistent=True)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """An in-memory key-value store supplier (stored like a persistent one; see module)."""
        return KeyValueBytesStoreSupplier(_check_name(name), persistent=False)

    @staticmethod
    def persistent_window_store(
        name: str,
        retention_period: timedelta | int,
        window_size: timedelta | int,
        retain_duplicates: bool = False,
    ) -> WindowBytesStoreSupplier:
        """A persistent window store supplier (Kafka Streams' ``Stores.persistentWindowStore``).

        Raises
        ------
        TopologyError
            If the name is empty, a duration negative, or the retention shorter than the
            window size.
        """
        return WindowBytesStoreSupplier.of(
            name, retention_period, window_size, retain_duplicates, persistent=True
        )

    @staticmethod
    def in_memory_window_store(
        name: str,
        retention_period: timedelta | int,
        window_size: timedelta | int,
        retain_duplicates: bool = False,
    ) -> WindowBytesStoreSupplier:
        """An in-memory window store supplier (stored like a persistent one)."""
        return WindowBytesStoreSupplier.of(
            name, retention_period, window_size, retain_duplicates, persistent=False
        )

    @staticmethod
    def window_store_builder(
        supplier: WindowBytesStoreSupplier,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> WindowStoreBuilder:
        """A builder of the window store ``supplier`` describes
        (:class:`~streamtable.processor.window_stores.WindowStore` at run time).

        Raises
        ------
        TopologyError
            If ``supplier`` is not a window store supplier.
        """
        if not isinstance(supplier, WindowBytesStoreSupplier):
            raise TopologyError(
                "Stores.window_store_builder expects a supplier from "
                "Stores.persistent_window_store(...) or in_memory_window_store(...); got "
                f"{supplier!r}."
            )
        return WindowStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> KeyValueStoreBuilder:
        """A builder of the key-value store ``supplier`` names.

        Raises
        ------
        TopologyError
            If ``supplier`` is not a key-value store supplier or a serde is not a ``Serde``.
        """
        if not isinstance(supplier, KeyValueBytesStoreSupplier):
            raise TopologyError(
                "Stores.key_value_store_builder expects a supplier from "
                "Stores.persistent_key_value_store(name) or in_memory_key_value_store(name); "
                f"got {supplier!r}."
            )
        for what, serde in (("key", key_serde), ("value", value_serde)):
            if serde is not None and not isinstance(serde, Serde):
                raise TopologyError(
                    f"Store {supplier.name!r}: the {what} serde must be a Serde (e.g. "
                    f"Serdes.string()); got {serde!r}."
                )
        return KeyValueStoreBuilder(supplier, key_serde, value_serde)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise TopologyError(
            f"A state store needs a non-empty name; got {name!r} (Kafka Streams: 'name cannot "
            "be null')."
        )
    return name


class KeyValueStore:
    """A read-write key-value store as a processor sees it (Kafka Streams' ``KeyValueStore``).

    Keys and values are Python objects, stored as bytes through the store's serdes; range
    operations order keys by their serialized bytes (as Kafka Streams' RocksDB and in-memory
    stores do) and return lists of ``(key, value)`` pairs. A ``None`` value is a delete
    (``put(k, None)`` removes ``k``). The store holds the part of the data that belongs to the
    processor instance's task (source partition), as in Kafka Streams.

    Examples
    --------
    >>> from streamtable import Serdes
    >>> s = KeyValueStore("counts", {}, Serdes.string(), Serdes.long())
    >>> s.put("b", 2); s.put("a", 1); s.put_if_absent("a", 5)
    1
    >>> s.all(), s.get("a"), s.approximate_num_entries()
    ([('a', 1), ('b', 2)], 1, 2)
    >>> s.delete("a"), s.get("a")
    (1, None)
    """

    def __init__(
        self,
        name: str,
        data: MutableMapping[bytes, bytes],
        key_serde: Serde,
        value_serde: Serde,
        persistent: bool = True,
    ) -> None:
        self._name = name
        self._persistent = persistent
        self._data = data
        self._key_serde = key_serde
        self._value_serde = value_serde
        #: ``on_change(key bytes, value bytes or None)`` after each write (the changelog)
        self.on_change: Callable[[bytes, bytes | None], None] | None = None

    def name(self) -> str:
        """The store's name."""
        return self._name

    def persistent(self) -> bool:
        """Kafka Streams' answer: true for a ``persistent_key_value_store``, false for an
        ``in_memory_key_value_store`` (whose state here survives restarts all the same, in
        Spark's checkpoint).
        """
        return self._persistent

    def _key(self, key: Any) -> bytes:
        if key is None:
            raise ValueError(
                f"Store {self._name!r}: keys cannot be None (Kafka Streams refuses null keys too)."
            )
        data = self._key_serde.serialize(key)
        assert data is not None
        return data

    def _value(self, data: bytes | None) -> Any:
        return None if data is None else self._value_serde.deserialize(data)

    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``None``."""
        return self._value(self._data.get(self._key(key)))

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``; ``None`` deletes it."""
        kb = self._key(key)
        vb = None if value is None else self._value_serde.serialize(value)
        if vb is None:
            self._data.pop(kb, None)
        else:
            self._data[kb] = vb
        if self.on_change is not None:
            self.on_change(kb, vb)

    def put_if_absent(self, key: Any, value: Any) -> Any:
        """Set ``key`` only when it has no value; returns the value it had (``None``: set)."""
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        """``put`` each ``(key, value)``."""
        for k, v in entries:
            self.put(k, v)

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its old value (or ``None``)."""
        old = self.get(key)
        self.put(key, None)
        return old

    def _scan(
        self, lo: Any, hi: Any, reverse: bool, prefix: bytes | None = None
    ) -> list[tuple[Any, Any]]:
        lo_b = None if lo is None else self._key(lo)
        hi_b = None if hi is None else self._key(hi)
        if lo_b is not None and hi_b is not None and lo_b > hi_b:
            return []  # Kafka Streams returns an empty iterator for an inverted range
        keys = sorted(
            k
            for k in self._data
            if (lo_b is None or k >= lo_b)
            and (hi_b is None or k <= hi_b)
            and (prefix is None or k.startswith(prefix))
        )
        if reverse:
            keys.reverse()
        kd, vd = self._key_serde.deserialize, self._value_serde.deserialize
        return [(kd(k), vd(self._data[k])) for k in keys]

    def range(self, from_key: Any = None, to_key: Any = None) -> list[tuple[Any, Any]]:
        """``(key, value)`` pairs with ``from_key <= key <= to_key`` (bytes order; ``None``:
        unbounded), ascending.
        """
        return self._scan(from_key, to_key, False)

    def reverse_range(self, from_key: Any = None, to_key: Any = None) -> list[tuple[Any, Any]]:
        """As :meth:`range`, descending."""
        return self._scan(from_key, to_key, True)

    def all(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)``, ascending by key bytes."""
        return self._scan(None, None, False)

    def reverse_all(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)``, descending."""
        return self._scan(None, None, True)

    def prefix_scan(
        self, prefix: Any, prefix_serializer: Serde | None = None
    ) -> list[tuple[Any, Any]]:
        """The pairs whose key bytes start with ``prefix`` serialized by ``prefix_serializer``
        (default: the key serde).
        """
        serde = prefix_serializer or self._key_serde
        pb = serde.serialize(prefix) or b""
        return self._scan(None, None, False, pb)

    def approximate_num_entries(self) -> int:
        """The number of keys (exact here)."""
        return len(self._data)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(self.all())

    def __repr__(self) -> str:
        return f"KeyValueStore({self._name!r}, {len(self._data)} keys)"


def is_store_builder(obj: object) -> bool:
    """Whether ``obj`` is a store builder from :class:`Stores` (key-value or window)."""
    return isinstance(obj, KeyValueStoreBuilder | WindowStoreBuilder)
