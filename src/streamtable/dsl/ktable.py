"""``KTable``: a changelog stream read as a table (Kafka Streams' ``KTable``).

Each record is an upsert of its key; a ``None`` value is a tombstone that deletes the key.
Every aggregation result is a ``KTable``; ``to_stream()`` gives its changes as a stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamtable.dsl._callables import check_callable
from streamtable.dsl._graph import GraphBuilder
from streamtable.topology.nodes import RecordOpKind, RecordOpNode, TimeWindowSpec

if TYPE_CHECKING:
    from streamtable.dsl.kstream import KStream
    from streamtable.serde import Serde


class KTable:
    """A table: the latest value per key, with tombstones (``None``) deleting keys.

    Results of windowed aggregations are keyed by :class:`streamtable.Windowed`.
    """

    def __init__(
        self,
        graph: GraphBuilder,
        node_name: str,
        *,
        key_serde: Serde | None = None,
        windows: TimeWindowSpec | None = None,
    ) -> None:
        self._graph = graph
        self._node_name = node_name
        self._key_serde = key_serde
        self._windows = windows

    @property
    def node_name(self) -> str:
        """Name of the node this table comes out of."""
        return self._node_name

    @property
    def windows(self) -> TimeWindowSpec | None:
        """The window specification when the table is keyed by ``Windowed``, else ``None``."""
        return self._windows

    def __repr__(self) -> str:
        return f"KTable({self._node_name})"

    def _op(self, kind: RecordOpKind, fn: Callable[..., Any], label: str, name: str | None) -> str:
        node_name = self._graph.names.processor("KTABLE", label, name)
        self._graph.add(
            RecordOpNode(node_name, (self._node_name,), kind=kind, fn=fn, op_label=label)
        )
        return node_name

    def filter(self, predicate: Callable[[Any, Any], bool], name: str | None = None) -> KTable:
        """Keep rows for which ``predicate(key, value)`` is true; others become tombstones.

        A row that stops passing the predicate is forwarded as a tombstone, so downstream
        tables delete it (Kafka Streams' ``KTableFilter``). Tombstones are forwarded as is.
        """
        check_callable(predicate, "KTable.filter", "key, value", 2)
        node = self._op(RecordOpKind.MAP, _TableFilter(predicate, False), "FILTER", name)
        return KTable(self._graph, node, key_serde=self._key_serde, windows=self._windows)

    def filter_not(self, predicate: Callable[[Any, Any], bool], name: str | None = None) -> KTable:
        """Keep rows for which ``predicate(key, value)`` is false; others become tombstones."""
        check_callable(predicate, "KTable.filter_not", "key, value", 2)
        node = self._op(RecordOpKind.MAP, _TableFilter(predicate, True), "FILTER", name)
        return KTable(self._graph, node, key_serde=self._key_serde, windows=self._windows)

    def map_values(self, mapper: Callable[[Any], Any], name: str | None = None) -> KTable:
        """Map each non-null value with ``mapper(value)``; tombstones stay tombstones."""
        check_callable(mapper, "KTable.map_values", "value", 1)
        node = self._op(RecordOpKind.MAP_VALUES, _TableMapValues(mapper), "MAPVALUES", name)
        return KTable(self._graph, node, key_serde=self._key_serde, windows=self._windows)

    def to_stream(self, name: str | None = None) -> KStream:
        """The table's changelog as a stream: one record per update, tombstones included."""
        from streamtable.dsl.kstream import KStream

        node = self._op(RecordOpKind.IDENTITY, _noop, "TOSTREAM", name)
        return KStream(self._graph, node, key_serde=self._key_serde)


def _noop(key: Any, value: Any) -> None:
    return None


class _TableFilter:
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        self.predicate = predicate
        self.negate = negate

    def __call__(self, key: Any, value: Any) -> tuple[Any, Any]:
        if value is None:
            return key, None
        keep = bool(self.predicate(key, value)) != self.negate
        return key, value if keep else None


class _TableMapValues:
    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        self.mapper = mapper

    def __call__(self, value: Any) -> Any:
        return None if value is None else self.mapper(value)
