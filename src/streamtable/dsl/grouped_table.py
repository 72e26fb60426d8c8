"""``KGroupedTable``: a re-grouped table ready for an aggregation with a subtractor."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamtable.dsl._callables import check_callable
from streamtable.dsl._graph import GraphBuilder
from streamtable.dsl.ktable import KTable
from streamtable.dsl.materialized import Materialized, check_count_store, materialized_of
from streamtable.topology.nodes import RepartitionNode, TableAggregateNode

if TYPE_CHECKING:
    from streamtable.serde import Serde


def _zero() -> int:
    return 0


def _plus_one(key: Any, value: Any, agg: int) -> int:
    return agg + 1


def _minus_one(key: Any, value: Any, agg: int) -> int:
    return agg - 1


class KGroupedTable:
    """The result of :meth:`KTable.group_by` (Kafka Streams' ``KGroupedTable``).

    Every aggregation follows ``KTableAggregate``: an insert runs the adder, an update runs
    the subtractor on the old value (in its old group) and then the adder on the new one, a
    delete runs the subtractor only. A subtractor returning ``None`` deletes the group.
    """

    def __init__(
        self,
        graph: GraphBuilder,
        parent: str,
        *,
        grouping: str | None = None,
        key_serde: Serde | None,
        value_serde: Serde | None,
    ) -> None:
        self._graph = graph
        self._parent = parent
        self._grouping = grouping
        self._key_serde = key_serde
        self._value_serde = value_serde
        # a named grouping has one repartition topic, shared by its aggregations
        self._repartition: str | None = None

    def count(self, name: str | Materialized | None = None) -> KTable:
        """Rows per group; a group whose rows all left is emitted as ``0``, not deleted.

        Raises
        ------
        TopologyError
            If a ``Materialized`` gives a value serde that cannot hold an ``int`` (Kafka
            Streams' ``count`` takes a ``Materialized<K, Long, ...>``).

        Examples
        --------
        >>> from streamtable import StreamsBuilder, Serdes
        >>> b = StreamsBuilder()
        >>> users = b.table("users", key_serde=Serdes.string(), value_serde=Serdes.string())
        >>> users.group_by(lambda user, region: (region, user)).count(name="per-region")
        KTable(KTABLE-AGGREGATE-0000000006)
        """
        from streamtable.serde import Serdes

        check_count_store(materialized_of(name, "KGroupedTable.count"), "KGroupedTable.count")
        return self._add(
            "AGGREGATE",
            name,
            _zero,
            _plus_one,
            _minus_one,
            reduce=False,
            store_values=Serdes.long(),
        )

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        name: str | Materialized | None = None,
    ) -> KTable:
        """``adder(aggregate, value)`` / ``subtractor(aggregate, value)``; a group's first value
        is its aggregate (Kafka Streams' ``KTableReduce``).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> balances = b.table("balances").group_by(lambda k, row: (row["branch"], row["amount"]))
        >>> balances.reduce(lambda total, v: total + v, lambda total, v: total - v)
        KTable(KTABLE-REDUCE-...)
        """
        check_callable(adder, "KGroupedTable.reduce adder", "aggregate, value", 2)
        check_callable(subtractor, "KGroupedTable.reduce subtractor", "aggregate, value", 2)
        return self._add(
            "REDUCE", name, None, adder, subtractor, reduce=True, store_values=self._value_serde
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        name: str | Materialized | None = None,
    ) -> KTable:
        """``adder(key, value, aggregate)`` / ``subtractor(key, value, aggregate)``; a group
        starts from ``initializer()``.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> regions = b.table("users").group_by(lambda user, region: (region, user))
        >>> regions.aggregate(set, lambda k, user, s: s | {user}, lambda k, user, s: s - {user})
        KTable(KTABLE-AGGREGATE-...)
        """
        check_callable(initializer, "KGroupedTable.aggregate initializer", "", 0)
        check_callable(adder, "KGroupedTable.aggregate adder", "key, value, aggregate", 3)
        check_callable(subtractor, "KGroupedTable.aggregate subtractor", "key, value, aggregate", 3)
        return self._add("AGGREGATE", name, initializer, adder, subtractor, reduce=False)

    def _add(
        self,
        label: str,
        name: str | Materialized | None,
        initializer: Callable[[], Any] | None,
        adder: Callable[..., Any],
        subtractor: Callable[..., Any],
        *,
        reduce: bool,
        store_values: Serde | None = None,
    ) -> KTable:
        # Kafka Streams' order (KGroupedTableImpl): the store (KTABLE-AGGREGATE-STATE-STORE
        # for every aggregation), the repartition's sink and source, the aggregation
        m = materialized_of(name, f"KGroupedTable.{label.lower()}")
        name = m.store_name
        if m.value_serde is not None:
            store_values = m.value_serde
        names = self._graph.names
        store = names.store("KTABLE", "AGGREGATE", name)
        topic = f"{self._grouping or store}-repartition"
        kafka_names = {
            "sink": names.generated("KSTREAM", "SINK"),
            "source": names.generated("KSTREAM", "SOURCE"),
        }
        node_name = names.processor("KTABLE", label)
        if self._repartition is None or self._grouping is None:
            self._repartition = names.claim(topic)
            for n in kafka_names.values():
                names.claim(n)
            self._graph.add(
                RepartitionNode(
                    self._repartition,
                    (self._parent,),
                    kafka_names=kafka_names,
                    topic_name=topic,
                )
            )
        else:
            self._graph.readd(self._repartition)
        self._graph.add(
            TableAggregateNode(
                node_name,
                (self._repartition,),
                store_name=store,
                initializer=initializer,
                adder=adder,
                subtractor=subtractor,
                reduce=reduce,
                key_serde=self._key_serde,
                value_serde=self._value_serde,
                op_label=label,
                queryable=name is not None and m.logging,
                store_value_serde=store_values,
            )
        )
        # the result's value serde is the store's, as Kafka Streams' Materialized defaults it
        # (Long for count, the grouped values' for reduce, Materialized's for aggregate)
        return KTable(self._graph, node_name, key_serde=self._key_serde, value_serde=store_values)
