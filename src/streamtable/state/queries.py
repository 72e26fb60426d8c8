"""Interactive queries: read-only views of the application's queryable stores.

Kafka Streams' interactive queries, in Python: ``KafkaStreams.store(StoreQueryParameters.
from_name_and_type(name, QueryableStoreTypes.key_value_store()))`` returns a
:class:`ReadOnlyKeyValueStore`. A store is queryable when the user named it (``count(name=...)``,
``reduce``/``aggregate(name=...)``, ``StreamsBuilder.table(name=...)``, as with Kafka Streams'
``Materialized.as``). Reads come from a replica fed by the store's changelog topic
(:mod:`streamtable.state.replica`): they reflect every micro-batch committed up to the
store's :meth:`~ReadOnlyKeyValueStore.position`, which IQv2's :class:`Position` describes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streamtable.errors import StreamsError

if TYPE_CHECKING:
    from streamtable.compiler.changelog import ChangelogInfo
    from streamtable.serde.base import Serde
    from streamtable.state.replica import StoreReplica

__all__ = [
    "Position",
    "PositionBound",
    "QueryableStoreType",
    "QueryableStoreTypes",
    "ReadOnlyKeyValueStore",
    "StoreQueryParameters",
]


@dataclass(frozen=True)
class QueryableStoreType:
    """The kind of store a query expects (from :class:`QueryableStoreTypes`)."""

    kind: str


class QueryableStoreTypes:
    """Kafka Streams' ``QueryableStoreTypes``.

    >>> QueryableStoreTypes.key_value_store()
    QueryableStoreType(kind='key_value')
    """

    @staticmethod
    def key_value_store() -> QueryableStoreType:
        """A :class:`ReadOnlyKeyValueStore` (``QueryableStoreTypes.keyValueStore()``)."""
        return QueryableStoreType("key_value")

    @staticmethod
    def window_store() -> QueryableStoreType:
        """A :class:`~.window_queries.ReadOnlyWindowStore` (``windowStore()``)."""
        return QueryableStoreType("window")

    @staticmethod
    def session_store() -> QueryableStoreType:
        """A :class:`~.window_queries.ReadOnlySessionStore` (``sessionStore()``)."""
        return QueryableStoreType("session")


@dataclass(frozen=True)
class StoreQueryParameters:
    """Which store to query, and as what (Kafka Streams' ``StoreQueryParameters``).

    >>> p = StoreQueryParameters.from_name_and_type("counts", QueryableStoreTypes.key_value_store())
    >>> p.store_name, p.query_type.kind
    ('counts', 'key_value')
    """

    store_name: str
    query_type: QueryableStoreType

    @staticmethod
    def from_name_and_type(store_name: str, query_type: QueryableStoreType) -> StoreQueryParameters:
        """``StoreQueryParameters.fromNameAndType(storeName, queryableStoreType)``."""
        return StoreQueryParameters(store_name, query_type)


class Position(Mapping[tuple[str, int], int]):
    """How far a store reflects its input (Kafka Streams' IQv2 ``Position``).

    A mapping ``(source topic, partition) -> offset``: the offset of the last input record of
    that partition whose effect the store holds. Immutable.

    >>> p = Position.empty().with_component("clicks", 0, 41).with_component("clicks", 1, 7)
    >>> p.get_partition_positions("clicks")
    {0: 41, 1: 7}
    >>> p.dominates(Position.empty().with_component("clicks", 0, 40))
    True
    """

    def __init__(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        self._offsets = dict(offsets or {})

    @staticmethod
    def empty() -> Position:
        """A position with no component (``Position.emptyPosition()``)."""
        return Position()

    def with_component(self, topic: str, partition: int, offset: int) -> Position:
        """A copy with ``topic``/``partition`` at ``offset`` (``withComponent``)."""
        return Position({**self._offsets, (topic, partition): offset})

    def get_topics(self) -> set[str]:
        """The source topics the position covers (``getTopics``)."""
        return {t for t, _ in self._offsets}

    def get_partition_positions(self, topic: str) -> dict[int, int]:
        """``partition -> offset`` for ``topic`` (``getPartitionPositions``)."""
        return {p: o for (t, p), o in sorted(self._offsets.items()) if t == topic}

    def dominates(self, other: Mapping[tuple[str, int], int]) -> bool:
        """At or past ``other`` on each of its partitions."""
        return all(self._offsets.get(tp, -1) >= o for tp, o in other.items())

    def __getitem__(self, key: tuple[str, int]) -> int:
        return self._offsets[key]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(sorted(self._offsets))

    def __len__(self) -> int:
        return len(self._offsets)

    def __repr__(self) -> str:
        return f"Position({dict(sorted(self._offsets.items()))})"


@dataclass(frozen=True)
class PositionBound:
    """The least position a query accepts (Kafka Streams' IQv2 ``PositionBound``).

    >>> PositionBound.at(Position.empty().with_component("clicks", 0, 41)).position
    Position({('clicks', 0): 41})
    """

    position: Position

    @staticmethod
    def at(position: Position) -> PositionBound:
        """Require at least ``position`` (``PositionBound.at``)."""
        return PositionBound(position)

    @staticmethod
    def unbounded() -> PositionBound:
        """Accept any position (``PositionBound.unbounded``)."""
        return PositionBound(Position.empty())


class ReplicaView:
    """What every read-only store view shares: the replica, the position, key encoding."""

    def __init__(self, info: ChangelogInfo, replica: StoreReplica) -> None:
        self.name = info.store
        self.key_serde: Serde = info.key_serde
        self.value_serde: Serde = info.value_serde
        self._replica = replica

    def position(self) -> Position:
        """The input this store's replica reflects now (IQv2 ``Position``)."""
        return Position(self._replica.position(self.name))

    def wait_for(
        self, bound: PositionBound, timeout: timedelta = timedelta(seconds=30)
    ) -> Position:
        """Block until the store reflects at least ``bound``; the position reached.

        Raises
        ------
        StreamsError
            When ``timeout`` passes first; the message names the partitions still behind.
        """
        bound_offsets = dict(bound.position)
        return Position(self._replica.wait_for(self.name, bound_offsets, timeout.total_seconds()))

    def _serialize_key(self, key: Any, serde: Serde | None = None) -> bytes:
        if key is None:
            raise StreamsError(f"Store {self.name!r}: a query key cannot be None.")
        try:
            data = (serde or self.key_serde).serialize(key)
        except Exception as e:
            raise StreamsError(
                f"Store {self.name!r}: cannot serialize query key {key!r} with "
                f"{serde or self.key_serde!r}: {e}"
            ) from e
        assert data is not None
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ReadOnlyKeyValueStore(ReplicaView):
    """Kafka Streams' ``ReadOnlyKeyValueStore`` over a queryable store's replica.

    Keys are compared by their serialized bytes (the store's key serde), as Kafka Streams'
    stores order them; iterations return ``(key, value)`` pairs in that order, as a snapshot
    taken when called. Values are decoded with the store's value serde. A key that is absent
    (never written, or deleted by a tombstone) reads as ``None``.

    Attributes
    ----------
    name : str
        The store's name.
    key_serde, value_serde : Serde
        The store's serdes (those of its changelog topic).
    """

    # -- Kafka Streams' ReadOnlyKeyValueStore -------------------------------------------

    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``None``.

        Raises
        ------
        StreamsError
            If ``key`` is ``None`` or the key serde cannot serialize it.
        """
        k = self._serialize_key(key)
        value, _ = self._replica.read(self.name, lambda store: store.get(k))
        return self.value_serde.deserialize(value)

    def range(self, from_key: Any = None, to_key: Any = None) -> list[tuple[Any, Any]]:
        """Pairs with ``from_key <= key <= to_key`` in key-byte order (``None``: unbounded).

        ``from_key`` after ``to_key`` gives no pairs, as in Kafka Streams.
        """
        return self._scan(from_key, to_key, reverse=False)

    def reverse_range(self, from_key: Any = None, to_key: Any = None) -> list[tuple[Any, Any]]:
        """:meth:`range` in descending key-byte order."""
        return self._scan(from_key, to_key, reverse=True)

    def all(self) -> list[tuple[Any, Any]]:
        """Every pair, in key-byte order."""
        return self._scan(None, None, reverse=False)

    def reverse_all(self) -> list[tuple[Any, Any]]:
        """Every pair, in descending key-byte order."""
        return self._scan(None, None, reverse=True)

    def prefix_scan(
        self, prefix: Any, prefix_key_serde: Serde | None = None
    ) -> list[tuple[Any, Any]]:
        """Pairs whose serialized key starts with the serialized ``prefix``, in key-byte order.

        ``prefix_key_serde`` serializes the prefix (default: the store's key serde), as
        Kafka Streams' ``prefixScan(prefix, prefixKeySerializer)``.
        """
        serde = prefix_key_serde or self.key_serde
        p = self._serialize_key(prefix, serde)

        def scan(store: Any) -> list[tuple[bytes, bytes]]:
            out = []
            for k in store.irange(minimum=p):
                if not k.startswith(p):
                    break
                out.append((k, store[k]))
            return out

        pairs, _ = self._replica.read(self.name, scan)
        return self._decode(pairs)

    def approximate_num_entries(self) -> int:
        """The number of keys (exact for the replica)."""
        n, _ = self._replica.read(self.name, len)
        return n

    # -- helpers ------------------------------------------------------------------------

    def _scan(self, lo: Any, hi: Any, *, reverse: bool) -> list[tuple[Any, Any]]:
        lo_b = None if lo is None else self._serialize_key(lo)
        hi_b = None if hi is None else self._serialize_key(hi)
        if lo_b is not None and hi_b is not None and lo_b > hi_b:
            return []

        def scan(store: Any) -> list[tuple[bytes, bytes]]:
            return [(k, store[k]) for k in store.irange(lo_b, hi_b, reverse=reverse)]

        pairs, _ = self._replica.read(self.name, scan)
        return self._decode(pairs)

    def _decode(self, pairs: list[tuple[bytes, bytes]]) -> list[tuple[Any, Any]]:
        keys = self.key_serde.deserialize_many([k for k, _ in pairs])
        values = self.value_serde.deserialize_many([v for _, v in pairs])
        return list(zip(keys, values, strict=True))
