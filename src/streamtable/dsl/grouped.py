"""Grouped streams and their aggregations: ``count``, ``reduce``, ``aggregate``, windowed or not."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streamtable.dsl._callables import check_callable
from streamtable.dsl.ktable import KTable
from streamtable.dsl.materialized import Materialized, check_count_store, materialized_of
from streamtable.dsl.reducers import Reducer
from streamtable.dsl.user_windows import Windows
from streamtable.dsl.windows import SessionWindows, SlidingWindows, TimeWindows, to_millis
from streamtable.errors import TopologyError
from streamtable.topology.nodes import (
    NATIVE_VALUE_SERDES,
    AggregateNode,
    Aggregation,
    RepartitionNode,
    SessionWindowSpec,
    WindowSpec,
    default_retention_ms,
)

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


def _count_merge(key: Any, a: int, b: int) -> int:
    return a + b


class _ReduceMerger:
    """Merges the reductions of two sessions with the reducer (Kafka Streams' session reduce)."""

    def __init__(self, reducer: Callable[[Any, Any], Any]) -> None:
        self.reducer = reducer

    def __call__(self, key: Any, a: Any, b: Any) -> Any:
        if a is UNSET:
            return b
        return a if b is UNSET else self.reducer(a, b)


class _Aggregations:
    """``count``/``reduce``/``aggregate`` shared by grouped and windowed streams."""

    _stream: KStream
    _key_serde: Serde | None
    _value_serde: Serde | None
    _repartition_name: str | None
    _repartition_required: bool
    #: the repartition node of a named grouping, once made (shared with windowed_by)
    _shared_repartition: list[str]
    _windows: WindowSpec | None = None
    _late_records_topic: str | None = None
    _kind = "KGroupedStream"

    def count(
        self, name: str | Materialized | None = None, *, retention: timedelta | int | None = None
    ) -> KTable:
        """Count the records per key (``count``); records with a null key are skipped, and
        records with a null value too except on time and session windows, which count them
        (Kafka Streams' ``KStreamAggregate`` skips them, ``KStreamWindowAggregate`` does not).

        Returns a table whose values are ``int`` counts (unwindowed: computed by Spark's own
        aggregation, or by a Python fold when the table is filtered, see
        :meth:`KTable.filter`). ``retention``: see :meth:`aggregate`.

        Raises
        ------
        TopologyError
            If a ``Materialized`` gives a value serde that cannot hold an ``int`` (Kafka
            Streams' ``count`` takes a ``Materialized<K, Long, ...>``).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("clicks").group_by_key().count(name="clicks-per-user").to_stream().to("out")
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies: ...
            Processor: KSTREAM-AGGREGATE-0000000001 (stores: [clicks-per-user]) ...
        """
        operation = f"{self._kind}.count"
        check_count_store(materialized_of(name, operation), operation)
        agg = Aggregation(_count_init, _count_add, native="count", merger=_count_merge)
        return self._aggregate(agg, name, "COUNT", retention)

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        name: str | Materialized | None = None,
        *,
        retention: timedelta | int | None = None,
    ) -> KTable:
        """Combine the values of each key with ``reducer(aggregate, value)`` (``reduce``).

        The first value of a key is its initial aggregate. Null keys are skipped, and null
        values too except on time and session windows, where ``reducer`` gets them (Kafka
        Streams' ``KStreamWindowAggregate`` with its reducer adapter).
        Session windows merge two sessions' reductions with ``reducer`` too.
        ``retention``: see :meth:`aggregate`. A built-in reducer (:class:`Reducers`'s ``sum``,
        ``min``, ``max``) over ``Serdes.long()`` or ``Serdes.integer()`` values (the grouping's
        ``value_serde``) runs unwindowed as Spark's own aggregation, with no Python fold
        (unless the table is filtered, see :meth:`KTable.filter`).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("amounts").group_by_key().reduce(lambda total, amount: total + amount)
        KTable(KSTREAM-REDUCE-...)
        """
        check_callable(reducer, f"{self._kind}.reduce", "aggregate, value", 2)
        agg = Aggregation(
            _reduce_init,
            _ReduceAggregator(reducer),
            native=self._native_reducer(reducer),
            merger=_ReduceMerger(reducer),
        )
        return self._aggregate(agg, name, "REDUCE", retention)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        name: str | Materialized | None = None,
        *,
        merger: Callable[[Any, Any, Any], Any] | None = None,
        retention: timedelta | int | None = None,
    ) -> KTable:
        """Fold the values of each key: ``agg = aggregator(key, value, agg)`` (``aggregate``).

        ``initializer()`` gives the aggregate before a key's first record (of each window).
        Records with a null key are skipped; so are null values, except in time and session
        windows, whose aggregator receives them (Kafka Streams' ``KStreamAggregate``,
        ``KStreamWindowAggregate``, ``KStreamSessionWindowAggregate``).
        Unwindowed, records of one key are folded in (timestamp, source partition, offset)
        order within a micro-batch; windowed, in arrival order (offset order within each
        source partition, like a Kafka Streams task).

        Parameters
        ----------
        name : str or Materialized, optional
            The store: a name (queryable), or ``Materialized.as_(name)`` with serdes (the value
            serde encodes the changelog that interactive queries read), retention or logging
            disabled (Kafka Streams' ``Materialized``).
        merger : callable, optional
            ``merger(key, agg1, agg2)``: combines the aggregates of two sessions that a record
            merges (Kafka Streams' ``Merger``). Required for session windows, else unused.
        retention : timedelta or int ms, optional
            Windowed only: how long a window stays in state after its start (sessions: after
            their end), at least window size (session gap; sliding: twice the time
            difference) + grace, which is the default (``Materialized.withRetention``).

        Raises
        ------
        TopologyError
            If a session-windowed aggregation has no ``merger``, ``retention`` is given
            without windows, or is shorter than window size + grace.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from streamtable import SessionWindows, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> sessions = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(minutes=30))
        >>> per_session = b.stream("clicks").group_by_key().windowed_by(sessions)
        >>> per_session.aggregate(list, lambda k, v, agg: agg + [v])
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: SessionWindowedKStream.aggregate needs
        merger=fn(key, agg1, agg2) ...
        """
        check_callable(initializer, f"{self._kind}.aggregate initializer", "", 0)
        check_callable(aggregator, f"{self._kind}.aggregate", "key, value, aggregate", 3)
        if merger is not None:
            check_callable(merger, f"{self._kind}.aggregate merger", "key, agg1, agg2", 3)
        if isinstance(self._windows, SessionWindowSpec) and merger is None:
            raise TopologyError(
                "SessionWindowedKStream.aggregate needs merger=fn(key, agg1, agg2) to combine "
                "the aggregates of sessions that a record merges (Kafka Streams' "
                "SessionWindowedKStream.aggregate requires a Merger too)."
            )
        agg = Aggregation(initializer, aggregator, merger=merger)
        return self._aggregate(agg, name, "AGGREGATE", retention)

    def _native_reducer(self, reducer: Callable[[Any, Any], Any]) -> str | None:
        """The Spark aggregate a built-in reducer lowers to here, if any: unwindowed, over
        values whose serde Spark reads itself (:mod:`streamtable.dsl.reducers`).
        """
        serde = self._value_serde
        if (
            isinstance(reducer, Reducer)
            and self._windows is None
            and serde is not None
            and serde.kind in NATIVE_VALUE_SERDES
        ):
            return reducer.name
        return None

    def _retention_ms(self, retention: timedelta | int | None) -> int | None:
        if retention is None:
            return None
        w = self._windows
        if w is None:
            raise TopologyError(
                f"{self._kind}: retention applies to windowed aggregations only; an unwindowed "
                "aggregate keeps every key (Kafka Streams' Materialized.withRetention, too, is "
                "for window and session stores, and ignored otherwise): drop retention=."
            )
        ms = to_millis(retention, f"{self._kind} retention")
        minimum = default_retention_ms(w)
        if ms < minimum:
            raise TopologyError(
                f"{self._kind} retention must be at least the window size (session gap; "
                f"sliding windows: twice the time difference) plus grace, {minimum} ms; got "
                f"{ms} ms (Kafka Streams' window and session stores refuse a shorter one too)."
            )
        return ms

    def _aggregate(
        self,
        aggregation: Aggregation,
        name: str | Materialized | None,
        label: str,
        retention: timedelta | int | None,
    ) -> KTable:
        m = materialized_of(name, f"{self._kind}.{label.lower()}")
        name = m.store_name
        retention_ms = self._retention_ms(retention if retention is not None else m.retention)
        key_serde = self._key_serde or m.key_serde
        graph = self._stream._graph
        prefix = "KSTREAM"
        op = "REDUCE" if label == "REDUCE" else "AGGREGATE"
        # Kafka Streams' order (GroupedStreamAggregateBuilder): the store, the aggregation, then
        # the repartition's sink, filter and source
        store = graph.names.store(prefix, op, name)
        node_name = graph.names.processor(prefix, op)
        parent = self._stream.node_name
        if self._repartition_required:
            parent = self._repartition_before(parent, store)
        graph.add(
            AggregateNode(
                node_name,
                (parent,),
                store_name=store,
                aggregation=aggregation,
                windows=self._windows,
                key_serde=key_serde,
                value_serde=self._value_serde,
                op_label=label,
                retention_ms=retention_ms,
                late_records_topic=self._late_records_topic,
                queryable=name is not None and m.logging,
                store_value_serde=m.value_serde or _store_value_serde(label, self._value_serde),
            )
        )
        # the result table's serdes, as Kafka Streams' Materialized defaults them: the value
        # serde of the store (Long for count, the grouped values' for reduce), and for
        # windows the windowed key serde (TimeWindowedKStreamImpl: FullTimeWindowedSerde of
        # the key serde and the window size; SessionWindowedKStreamImpl: SessionWindowedSerde)
        return KTable(
            graph,
            node_name,
            key_serde=_windowed_key_serde(key_serde, self._windows),
            value_serde=m.value_serde or _store_value_serde(label, self._value_serde),
            windows=self._windows,
        )

    def _repartition_before(self, parent: str, store: str) -> str:
        """The repartition node in front of an aggregation with store ``store``.

        Its topic is named after the grouping (``Grouped.as``), else after the store; the
        aggregations of one named grouping share it (Kafka Streams reuses the node, though the
        counter advances for each), an unnamed grouping gets one per aggregation.
        """
        graph = self._stream._graph
        shared = self._shared_repartition
        reuse = self._repartition_name is not None and shared
        topic, kafka_names = graph.stream_repartition(
            self._repartition_name or store, reuse=bool(reuse)
        )
        if reuse:
            graph.readd(shared[0])
            return shared[0]
        rep_name = graph.names.claim(topic)
        graph.add(
            RepartitionNode(
                rep_name,
                (parent,),
                kafka_names=kafka_names,
                topic_name=topic,
                key_serde=self._key_serde,
                value_serde=self._value_serde,
            )
        )
        shared.append(rep_name)
        return rep_name


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
        self._shared_repartition = []

    def windowed_by(
        self,
        windows: TimeWindows | SlidingWindows | SessionWindows | Windows,
        *,
        late_records_topic: str | None = None,
    ) -> TimeWindowedKStream:
        """Aggregate per key and window (``windowedBy``).

        Stream time is tracked per source partition: a record is late when the largest
        timestamp read from its own partition up to it (itself included) has reached the
        window's end + grace. The decision does not depend on micro-batch boundaries.

        Parameters
        ----------
        windows : TimeWindows, SlidingWindows, SessionWindows or Windows
            The windows; their grace says how long a window accepts late records. A
            :class:`~streamtable.Windows` subclass defines its own time windows (Kafka
            Streams' custom ``Windows``).
        late_records_topic : str, optional
            An existing topic that receives every record dropped because its window had
            closed: the record's key and value (the grouping's serdes) and timestamp, with
            headers ``streamtable.late.reason``, ``.operator``, ``.window.start``/``.end``,
            ``.stream.time`` and the source topic/partition/offset (a streamtable extension;
            Kafka Streams only counts them). Written exactly once under
            ``exactly_once_v2``, at least once otherwise.

        Raises
        ------
        TopologyError
            If ``windows`` is not one of the window kinds or the topic name is illegal.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from streamtable import StreamsBuilder, TimeWindows
        >>> b = StreamsBuilder()
        >>> five_minutes = TimeWindows.of_size_with_no_grace(timedelta(minutes=5))
        >>> hopping = five_minutes.advance_by(timedelta(minutes=1))
        >>> b.stream("clicks").group_by_key().windowed_by(hopping).count().windows
        TimeWindowSpec(size_ms=300000, advance_ms=60000, grace_ms=0)
        """
        if not isinstance(windows, TimeWindows | SlidingWindows | SessionWindows | Windows):
            raise TopologyError(
                "KGroupedStream.windowed_by expects TimeWindows, SlidingWindows, "
                f"SessionWindows or a Windows subclass; got {type(windows).__name__} (Kafka "
                "Streams' windowedBy takes the same kinds; a JoinWindows fails there with "
                "UnsupportedOperationException)."
            )
        if late_records_topic is not None:
            from streamtable.dsl.kstream import _check_topic

            _check_topic(late_records_topic, "KGroupedStream.windowed_by late_records_topic")
        return TimeWindowedKStream(self, windows.spec(), late_records_topic)


class TimeWindowedKStream(_Aggregations):
    """A grouped stream windowed by time or sessions; aggregations yield a table keyed by
    ``Windowed`` (Kafka Streams' ``TimeWindowedKStream`` / ``SessionWindowedKStream``).

    A window is updated by records until stream time passes its close (``end + grace``;
    sessions ``end + gap + grace``); records for a closed window are dropped and counted.
    """

    _kind = "TimeWindowedKStream"

    def __init__(
        self, grouped: KGroupedStream, windows: WindowSpec, late_records_topic: str | None
    ) -> None:
        self._stream = grouped._stream
        self._key_serde = grouped._key_serde
        self._value_serde = grouped._value_serde
        self._repartition_name = grouped._repartition_name
        self._repartition_required = grouped._repartition_required
        self._shared_repartition = grouped._shared_repartition
        self._windows = windows
        self._late_records_topic = late_records_topic
        if isinstance(windows, SessionWindowSpec):
            self._kind = "SessionWindowedKStream"


def _windowed_key_serde(key_serde: Serde | None, windows: WindowSpec | None) -> Serde | None:
    """The key serde of a (windowed) aggregation's result table: ``key_serde`` unwindowed,
    else its windowed serde (Kafka Streams' ``FullTimeWindowedSerde`` with the window size,
    the time difference for sliding windows, or ``SessionWindowedSerde``).
    """
    if key_serde is None or windows is None:
        return key_serde
    from streamtable.serde import Serdes

    if isinstance(windows, SessionWindowSpec):
        return Serdes.session_windowed(key_serde)
    return Serdes.time_windowed(key_serde, windows.size_ms)


def _store_value_serde(label: str, grouped_values: Serde | None) -> Serde | None:
    """The value serde of an aggregation's store, as Kafka Streams' ``Materialized`` defaults
    it: Long for ``count``, the grouped values' serde for ``reduce``, else ``None``
    (``default.value.serde``).
    """
    if label == "COUNT":
        from streamtable.serde import Serdes

        return Serdes.long()
    return grouped_values if label == "REDUCE" else None
