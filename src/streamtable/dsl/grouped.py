"""Grouped streams and their aggregations: ``count``, ``reduce``, ``aggregate``, windowed or not."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamtable.dsl._callables import check_callable
from streamtable.dsl.ktable import KTable
from streamtable.dsl.windows import TimeWindows
from streamtable.errors import TopologyError
from streamtable.topology.nodes import AggregateNode, Aggregation, RepartitionNode, TimeWindowSpec

if TYPE_CHECKING:
    from streamtable.dsl.kstream import KStream
    from streamtable.serde import Serde


class _Unset:
    """Marks a ``reduce`` aggregate that has not seen a value yet."""

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def _count_init() -> int:
    return 0


def _count_add(key: Any, value: Any, agg: int) -> int:
    return agg + 1


def _reduce_init() -> _Unset:
    return UNSET


class _ReduceAggregator:
    def __init__(self, reducer: Callable[[Any, Any], Any]) -> None:
        self.reducer = reducer

    def __call__(self, key: Any, value: Any, agg: Any) -> Any:
        return value if agg is UNSET else self.reducer(agg, value)


class _Aggregations:
    """``count``/``reduce``/``aggregate`` shared by grouped and windowed streams."""

    _stream: KStream
    _key_serde: Serde | None
    _value_serde: Serde | None
    _repartition_name: str | None
    _repartition_required: bool
    _windows: TimeWindowSpec | None = None
    _kind = "KGroupedStream"

    def count(self, name: str | None = None) -> KTable:
        """Count the records per key (``count``); records with a null key or value are skipped.

        Returns a table whose values are ``int`` counts; computed by Spark's own aggregation.
        """
        return self._aggregate(Aggregation(_count_init, _count_add, native="count"), name, "COUNT")

    def reduce(self, reducer: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """Combine the values of each key with ``reducer(aggregate, value)`` (``reduce``).

        The first value of a key is its initial aggregate. Null keys and values are skipped.
        """
        check_callable(reducer, f"{self._kind}.reduce", "aggregate, value", 2)
        return self._aggregate(
            Aggregation(_reduce_init, _ReduceAggregator(reducer)), name, "REDUCE"
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        name: str | None = None,
    ) -> KTable:
        """Fold the values of each key: ``agg = aggregator(key, value, agg)`` (``aggregate``).

        ``initializer()`` gives the aggregate before a key's first record. Records with a null
        key or value are skipped (Kafka Streams' ``KStreamAggregate``). Records of one key are
        folded in (timestamp, source partition, offset) order within a micro-batch.
        """
        check_callable(initializer, f"{self._kind}.aggregate initializer", "", 0)
        check_callable(aggregator, f"{self._kind}.aggregate", "key, value, aggregate", 3)
        return self._aggregate(Aggregation(initializer, aggregator), name, "AGGREGATE")

    def _aggregate(self, aggregation: Aggregation, name: str | None, label: str) -> KTable:
        graph = self._stream._graph
        prefix = "KSTREAM"
        op = "REDUCE" if label == "REDUCE" else "AGGREGATE"
        store = graph.names.store(prefix, op, name)
        parent = self._stream.node_name
        if self._repartition_required:
            base = self._repartition_name or store
            rep_name = graph.names.claim(f"{base}-repartition")
            graph.add(
                RepartitionNode(
                    rep_name,
                    (parent,),
                    topic_name=f"{base}-repartition",
                    key_serde=self._key_serde,
                    value_serde=self._value_serde,
                )
            )
            parent = rep_name
        node_name = graph.names.processor(prefix, op)
        graph.add(
            AggregateNode(
                node_name,
                (parent,),
                store_name=store,
                aggregation=aggregation,
                windows=self._windows,
                key_serde=self._key_serde,
                value_serde=self._value_serde,
                op_label=label,
            )
        )
        return KTable(graph, node_name, key_serde=self._key_serde, windows=self._windows)


class KGroupedStream(_Aggregations):
    """A stream grouped by key, ready for an aggregation (Kafka Streams' ``KGroupedStream``)."""

    def __init__(
        self,
        stream: KStream,
        *,
        key_serde: Serde | None,
        value_serde: Serde | None,
        repartition_name: str | None,
        repartition_required: bool,
    ) -> None:
        self._stream = stream
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._repartition_name = repartition_name
        self._repartition_required = repartition_required

    def windowed_by(self, windows: TimeWindows) -> TimeWindowedKStream:
        """Aggregate per key and time window (``windowedBy``).

        Raises
        ------
        TopologyError
            If ``windows`` is not a :class:`TimeWindows`.
        """
        if not isinstance(windows, TimeWindows):
            raise TopologyError(
                f"KGroupedStream.windowed_by expects TimeWindows; got {type(windows).__name__}."
            )
        return TimeWindowedKStream(self, windows.spec())


class TimeWindowedKStream(_Aggregations):
    """A grouped stream windowed by time; aggregations yield a table keyed by ``Windowed``.

    A window is updated by records until stream time passes ``window end + grace``; records
    for a closed window are dropped and counted.
    """

    _kind = "TimeWindowedKStream"

    def __init__(self, grouped: KGroupedStream, windows: TimeWindowSpec) -> None:
        self._stream = grouped._stream
        self._key_serde = grouped._key_serde
        self._value_serde = grouped._value_serde
        self._repartition_name = grouped._repartition_name
        self._repartition_required = grouped._repartition_required
        self._windows = windows
