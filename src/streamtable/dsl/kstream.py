"""``KStream``: an unbounded stream of independent records (Kafka Streams' ``KStream``).

Every method adds a node to the builder's graph and returns a new handle; nothing runs until
``KafkaStreams.start()``. Callables receive deserialized Python objects; between operators a
value may be any Python object, only topic boundaries (``to``) need serdes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from streamtable.dsl._callables import (
    check_callable,
    check_callable_or_column,
    check_processor_supplier,
)
from streamtable.dsl._graph import GraphBuilder
from streamtable.dsl.file_sink import file_sink_node
from streamtable.errors import TopologyError
from streamtable.topology.nodes import (
    JoinKind,
    MergeNode,
    RecordOpKind,
    RecordOpNode,
    RepartitionNode,
    SinkNode,
)

if TYPE_CHECKING:
    from datetime import timedelta

    from streamtable.columns import ColumnExpression
    from streamtable.dsl.grouped import KGroupedStream
    from streamtable.serde import Serde


class KStream:
    """A record stream: each record is an independent fact (an INSERT).

    Obtained from :meth:`StreamsBuilder.stream`. Record timestamps pass through stateless
    operations unchanged; ``flat_map`` children inherit their parent's timestamp.
    """

    def __init__(
        self,
        graph: GraphBuilder,
        node_name: str,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        repartition_required: bool = False,
    ) -> None:
        self._graph = graph
        self._node_name = node_name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._repartition_required = repartition_required

    @property
    def node_name(self) -> str:
        """Name of the node this stream comes out of."""
        return self._node_name

    def __repr__(self) -> str:
        return f"KStream({self._node_name})"

    # -- stateless operations -------------------------------------------------------------

    def _op(
        self,
        kind: RecordOpKind,
        fn: Callable[..., Any],
        label: str,
        name: str | None,
        *,
        changes_key: bool = False,
        keeps_value: bool = True,
        terminal: bool = False,
    ) -> KStream:
        node_name = self._graph.names.processor("KSTREAM", label, name)
        self._graph.add(
            RecordOpNode(
                node_name,
                (self._node_name,),
                kind=kind,
                fn=fn,
                op_label=label,
                changes_key=changes_key,
                terminal=terminal,
            )
        )
        return KStream(
            self._graph,
            node_name,
            key_serde=None if changes_key else self._key_serde,
            value_serde=self._value_serde if keeps_value else None,
            repartition_required=self._repartition_required or changes_key,
        )

    def filter(
        self, predicate: Callable[[Any, Any], bool] | ColumnExpression, name: str | None = None
    ) -> KStream:
        """Keep the records for which ``predicate(key, value)`` is true.

        Null keys and values are passed to the predicate as ``None``. ``predicate`` may also
        be a boolean column expression (:mod:`streamtable.functions`, run as Spark SQL): a
        ``NULL`` result drops the record.

        Raises
        ------
        TopologyError
            If ``predicate`` cannot be called with ``(key, value)``.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").filter(lambda v: v is not None)
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KStream.filter expects a callable taking (key, value), ...
        """
        check_callable_or_column(predicate, "KStream.filter", "key, value", 2)
        return self._op(RecordOpKind.FILTER, predicate, "FILTER", name)

    def filter_not(
        self, predicate: Callable[[Any, Any], bool] | ColumnExpression, name: str | None = None
    ) -> KStream:
        """Drop the records for which ``predicate(key, value)`` is true (``filterNot``).

        A boolean column expression (:mod:`streamtable.functions`) keeps the records where it
        is false or ``NULL``.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").filter_not(lambda k, v: v is None)
        KStream(KSTREAM-FILTER-0000000001)
        """
        check_callable_or_column(predicate, "KStream.filter_not", "key, value", 2)
        from streamtable.columns import is_column_expression, negated_predicate

        negated = (
            negated_predicate(predicate) if is_column_expression(predicate) else _Negate(predicate)
        )
        return self._op(RecordOpKind.FILTER, negated, "FILTER", name)

    def map(
        self, mapper: Callable[[Any, Any], tuple[Any, Any]], name: str | None = None
    ) -> KStream:
        """Replace each record by ``mapper(key, value) -> (new_key, new_value)``.

        Marks the stream for repartitioning: a later ``group_by_key`` shuffles by the new key.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").map(lambda k, v: (v, k)).group_by_key().count().to_stream().to("out")
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies: ...
            Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-AGGREGATE-...-0000000002-repartition)
              <-- KSTREAM-FILTER-0000000005 ...
        """
        check_callable(mapper, "KStream.map", "key, value", 2)
        return self._op(RecordOpKind.MAP, mapper, "MAP", name, changes_key=True, keeps_value=False)

    def map_values(
        self, mapper: Callable[[Any], Any] | ColumnExpression, name: str | None = None
    ) -> KStream:
        """Replace each value by ``mapper(value)``; the key is kept (no repartitioning).

        As in Kafka Streams, the mapper is also called for null values. ``mapper`` may be a
        column expression (:mod:`streamtable.functions`) over ``key``/``value``/``ts`` giving
        a ``string``, ``binary``, ``bigint`` or ``int`` column (then run as Spark SQL; a null
        value is SQL ``NULL``, and what the expression gives for it).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").map_values(lambda k, v: v.upper())
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KStream.map_values expects a callable taking (value), ...
        """
        check_callable_or_column(mapper, "KStream.map_values", "value", 1)
        return self._op(RecordOpKind.MAP_VALUES, mapper, "MAPVALUES", name, keeps_value=False)

    def flat_map(
        self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]], name: str | None = None
    ) -> KStream:
        """Replace each record by zero or more ``(key, value)`` pairs from ``mapper(key, value)``.

        Every output record has the input record's timestamp. Marks the stream for
        repartitioning.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").flat_map(lambda k, v: [(word, 1) for word in v.split()])
        KStream(KSTREAM-FLATMAP-0000000001)
        """
        check_callable(mapper, "KStream.flat_map", "key, value", 2)
        return self._op(
            RecordOpKind.FLAT_MAP, mapper, "FLATMAP", name, changes_key=True, keeps_value=False
        )

    def flat_map_values(
        self, mapper: Callable[[Any], Iterable[Any]] | ColumnExpression, name: str | None = None
    ) -> KStream:
        """Replace each value by zero or more values from ``mapper(value)``; keys are kept.

        ``mapper`` may be a column expression (:mod:`streamtable.functions`) giving an array:
        one record per element, in array order (a ``NULL`` array gives none).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").flat_map_values(str.split)
        KStream(KSTREAM-FLATMAPVALUES-0000000001)
        """
        check_callable_or_column(mapper, "KStream.flat_map_values", "value", 1)
        return self._op(
            RecordOpKind.FLAT_MAP_VALUES, mapper, "FLATMAPVALUES", name, keeps_value=False
        )

    def select_key(
        self, mapper: Callable[[Any, Any], Any] | ColumnExpression, name: str | None = None
    ) -> KStream:
        """Set each record's key to ``mapper(key, value)`` (``selectKey``); marks repartitioning.

        ``mapper`` may be a column expression (:mod:`streamtable.functions`) giving a
        ``string``, ``binary``, ``bigint`` or ``int`` column.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("clicks").select_key(lambda k, v: v["user"])
        KStream(KSTREAM-KEY-SELECT-0000000001)
        """
        check_callable_or_column(mapper, "KStream.select_key", "key, value", 2)
        return self._op(RecordOpKind.SELECT_KEY, mapper, "KEY-SELECT", name, changes_key=True)

    def peek(self, action: Callable[[Any, Any], None], name: str | None = None) -> KStream:
        """Call ``action(key, value)`` for each record and pass the record on unchanged.

        The action runs on Spark executors (Python workers), once per processing attempt:
        like Kafka Streams' ``peek``, it is not covered by the processing guarantee.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").peek(lambda k, v: print(k, v)).to("out")
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies: ...
            Processor: KSTREAM-PEEK-0000000001 (stores: [])
              --> KSTREAM-SINK-0000000002 ...
        """
        check_callable(action, "KStream.peek", "key, value", 2)
        return self._op(RecordOpKind.PEEK, action, "PEEK", name)

    def foreach(self, action: Callable[[Any, Any], None], name: str | None = None) -> None:
        """Call ``action(key, value)`` for each record; a terminal operation (``foreach``).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").foreach(lambda k, v: print(k, v))
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies: ...
            Processor: KSTREAM-FOREACH-0000000001 (stores: [])
              --> none ...
        """
        check_callable(action, "KStream.foreach", "key, value", 2)
        self._op(RecordOpKind.PEEK, action, "FOREACH", name, terminal=True)

    def merge(self, other: KStream, name: str | None = None) -> KStream:
        """Interleave this stream with ``other``; each keeps its own order, none across the two.

        Raises
        ------
        TopologyError
            If ``other`` is not a ``KStream`` of the same builder.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> a, c = StreamsBuilder().stream("a"), StreamsBuilder().stream("c")
        >>> a.merge(c)
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KStream.merge: both streams must come from the same
        StreamsBuilder (Kafka Streams does not check this: ...
        """
        if not isinstance(other, KStream):
            raise TopologyError(
                f"KStream.merge expects a KStream, as in Kafka Streams; got {type(other).__name__}."
            )
        if other._graph is not self._graph:
            raise TopologyError(
                "KStream.merge: both streams must come from the same StreamsBuilder (Kafka "
                "Streams does not check this: its builder leaves the merge out, or fails with "
                "'Predecessor processor ... is not added yet')."
            )
        node_name = self._graph.names.processor("KSTREAM", "MERGE", name)
        self._graph.add(MergeNode(node_name, (self._node_name, other._node_name)))
        same = self._key_serde == other._key_serde
        return KStream(
            self._graph,
            node_name,
            key_serde=self._key_serde if same else None,
            value_serde=self._value_serde if self._value_serde == other._value_serde else None,
            repartition_required=self._repartition_required or other._repartition_required,
        )

    def split(self, name: str | None = None) -> BranchedKStream:
        """Route each record to the first branch whose predicate matches (``split()``).

        ``name`` names the splitting processor (Kafka Streams' ``Named``; default
        ``KSTREAM-BRANCH-<n>``) and prefixes the branches: each branch is
        ``<split name><branch name>``, or ``<split name><position>`` (the default branch:
        ``<split name>0``), as in Kafka Streams.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> branches = (b.stream("in").split(name="s-")
        ...             .branch(lambda k, v: v > 0, name="pos")
        ...             .default_branch(name="other"))
        >>> sorted(branches)
        ['s-other', 's-pos']
        """
        splitter = self._op(RecordOpKind.IDENTITY, _pass, "BRANCH", name)
        return BranchedKStream(splitter, splitter.node_name)

    # -- repartitioning and grouping ------------------------------------------------------

    def repartition(
        self,
        name: str | None = None,
        num_partitions: int | None = None,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
    ) -> KStream:
        """Redistribute records by their current key (Kafka Streams' ``repartition``).

        On Spark this is a shuffle by the serialized key; ``describe()`` shows the
        repartition topic ``<name>-repartition`` Kafka Streams would create.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").repartition(name="by-user", num_partitions=4)
        KStream(by-user-repartition)
        """
        if num_partitions is not None and num_partitions <= 0:
            raise TopologyError(
                f"KStream.repartition: num_partitions must be positive; got {num_partitions} "
                "(Kafka Streams refuses it too: 'Number of partitions must be at least 1')."
            )
        base = name if name is not None else self._graph.names.processor("KSTREAM", "REPARTITION")
        topic, kafka_names = self._graph.stream_repartition(base)
        node_name = self._graph.names.claim(topic)
        self._graph.add(
            RepartitionNode(
                node_name,
                (self._node_name,),
                kafka_names=kafka_names,
                topic_name=topic,
                num_partitions=num_partitions,
                key_serde=key_serde or self._key_serde,
                value_serde=value_serde or self._value_serde,
            )
        )
        return KStream(
            self._graph,
            node_name,
            key_serde=key_serde or self._key_serde,
            value_serde=value_serde or self._value_serde,
        )

    def group_by_key(
        self,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str | None = None,
    ) -> KGroupedStream:
        """Group records by their current key (``groupByKey``).

        Repartitions first when an upstream operation changed the key. ``name`` names the
        repartition topic (Kafka Streams' ``Grouped.as``).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").group_by_key().count(name="counts").to_stream().to("out")
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies:
           Sub-topology: 0
            Source: KSTREAM-SOURCE-0000000000 (topics: [in])
              --> KSTREAM-AGGREGATE-0000000001 ...
        """
        from streamtable.dsl.grouped import KGroupedStream

        return KGroupedStream(
            self,
            key_serde=key_serde or self._key_serde,
            value_serde=value_serde or self._value_serde,
            repartition_name=name,
            repartition_required=self._repartition_required,
        )

    def group_by(
        self,
        selector: Callable[[Any, Any], Any] | ColumnExpression,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str | None = None,
    ) -> KGroupedStream:
        """Group records by ``selector(key, value)`` (``groupBy``); always repartitions.

        ``selector`` may be a column expression (:mod:`streamtable.functions`) giving a
        ``string``, ``binary``, ``bigint`` or ``int`` column (run as Spark SQL).

        ``name`` (Kafka Streams' ``Grouped.as``) names the key-selecting processor and the
        repartition topic ``<name>-repartition``; by default the topic is named after the
        aggregation's store.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").group_by(lambda k, v: v, name="by-value").count().to_stream().to("out")
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies: ...
            Sink: by-value-repartition-sink (topic: by-value-repartition) ...
        """
        check_callable_or_column(selector, "KStream.group_by", "key, value", 2)
        # Kafka Streams names the key selector after the grouping (Grouped.as)
        selected = self.select_key(selector, name=name)
        from streamtable.dsl.grouped import KGroupedStream

        return KGroupedStream(
            selected,
            key_serde=key_serde,
            value_serde=value_serde or self._value_serde,
            repartition_name=name,
            repartition_required=True,
        )

    # -- joins ----------------------------------------------------------------------------

    def join(self, other: Any, *args: Any, name: str | None = None) -> KStream:
        """Inner join with a stream, a table or a global table (``KStream.join``).

        - ``join(stream, joiner, JoinWindows)``: windowed stream-stream join; each record
          joins every record of the other side within the window, output timestamp = the
          larger of the two (Kafka Streams' ``KStreamKStreamJoin``).
        - ``join(table, joiner)``: stream-table join, triggered by stream records only. A
          stream record joins the table *as of its own timestamp*: the latest table update
          with timestamp <= the record's (Kafka Streams' versioned-table join). Output
          timestamp = the stream record's. Records with a null key or value are dropped and
          counted (a left join keeps null-key records, see :meth:`left_join`).
        - ``join(global_table, key_selector, joiner)``: the lookup key is
          ``key_selector(key, value)``; the output key stays the stream's key. A global
          table is not time-synchronized (as in Kafka Streams): the lookup sees its latest
          value. A null lookup key drops the record (counted as ``null_lookup_key``).

        ``joiner(stream_value, other_value)``. Raises :class:`TopologyError` for an operand
        or argument of the wrong kind.

        ``name`` names the join as Kafka Streams' ``Joined.as`` (stream-table: the join
        processor and the repartition topic ``<name>-repartition`` when the key changed),
        ``Named.as`` (GlobalKTable) or ``StreamJoined.as(name).withName(name)`` (stream-stream:
        ``<name>-this-join``, ``<name>-merge``, window stores ``<name>-this-join-store``, ...,
        repartition topics ``<name>-left-repartition``/``-right-repartition``). Unnamed, the
        names are generated as Kafka Streams generates them (a stream-GlobalKTable join is
        always ``KSTREAM-LEFTJOIN-<n>``, even inner).

        Examples
        --------
        >>> from datetime import timedelta
        >>> from streamtable import JoinWindows, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> window = JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5))
        >>> b.stream("views").join(b.stream("clicks"), lambda view, click: (view, click), window)
        KStream(KSTREAM-MERGE-0000000006)
        """
        return self._join("inner", other, args, name)

    def left_join(self, other: Any, *args: Any, name: str | None = None) -> KStream:
        """Like :meth:`join`, but a stream record without a match joins with ``None``.

        Stream-stream: a non-matching record is emitted as ``joiner(value, None)`` once its
        window closes (no eager null results, Kafka Streams 3.1+).

        Stream-table and stream-GlobalKTable: a record with a null key and a value is not
        dropped but emitted as ``joiner(value, None)`` with a null key (Kafka Streams 3.7+,
        KIP-962); with a GlobalKTable its ``key_selector`` is still called and a non-null
        lookup key is looked up. A non-null record whose lookup key is ``None`` is dropped
        (``null_lookup_key``); records with a null value are dropped (``null_value``).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> users = b.global_table("users")
        >>> b.stream("orders").left_join(users, lambda k, order: order["user"], lambda o, u: (o, u))
        KStream(KSTREAM-LEFTJOIN-0000000004)
        """
        return self._join("left", other, args, name)

    def outer_join(
        self,
        other: KStream,
        joiner: Callable[[Any, Any], Any],
        windows: Any,
        *,
        name: str | None = None,
    ) -> KStream:
        """Windowed outer join of two streams: non-matches of either side are emitted as
        ``joiner(value, None)`` / ``joiner(None, value)`` once their window closes.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("orders").outer_join(b.table("users"), lambda o, u: (o, u), None)
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KStream.outer_join joins another KStream (Kafka Streams
        has no outer stream-table join); got KTable.
        """
        if not isinstance(other, KStream):
            raise TopologyError(
                "KStream.outer_join joins another KStream (Kafka Streams has no outer "
                f"stream-table join); got {type(other).__name__}."
            )
        return self._join("outer", other, (joiner, windows), name)

    def _join(self, join_type: str, other: Any, args: tuple[Any, ...], name: str | None) -> KStream:
        from streamtable.dsl.joins import add_join, repartition_for_join
        from streamtable.dsl.ktable import GlobalKTable, KTable
        from streamtable.dsl.windows import JoinWindows

        method = {"inner": "join", "left": "left_join", "outer": "outer_join"}[join_type]
        left = self._node_name
        key_selector = None
        windows = None
        if isinstance(other, KStream):
            if len(args) != 2 or not isinstance(args[1], JoinWindows):
                raise TopologyError(
                    f"KStream.{method}(stream, joiner, windows): a stream-stream join needs a "
                    "joiner and JoinWindows, as in Kafka Streams, e.g. "
                    "JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5))."
                )
            joiner, jw = args
            windows = jw.spec()
            kind = JoinKind.STREAM_STREAM
            right = other._node_name
            # Kafka Streams' StreamJoined name: topics <name>-left/-right-repartition
            if self._repartition_required:
                left = repartition_for_join(self._graph, left, _suffixed(name, "-left", left))
            if other._repartition_required:
                right = repartition_for_join(self._graph, right, _suffixed(name, "-right", right))
        elif isinstance(other, KTable):
            if len(args) != 1:
                raise TopologyError(
                    f"KStream.{method}(table, joiner) takes one joiner and no windows, as in "
                    "Kafka Streams' stream-table joins."
                )
            (joiner,) = args
            kind = JoinKind.STREAM_TABLE
            right = other.node_name
            if self._repartition_required:
                left = repartition_for_join(self._graph, left, name or left)
        elif isinstance(other, GlobalKTable):
            if len(args) != 2:
                raise TopologyError(
                    f"KStream.{method}(global_table, key_selector, joiner) takes a key "
                    "selector and a joiner, as Kafka Streams' KStream.join(GlobalKTable, "
                    "KeyValueMapper, ValueJoiner) does."
                )
            key_selector, joiner = args
            check_callable(key_selector, f"KStream.{method} key_selector", "key, value", 2)
            kind = JoinKind.STREAM_GLOBAL_TABLE
            right = other.node_name  # the lookup key replaces co-partitioning
        else:
            raise TopologyError(
                f"KStream.{method} joins a KStream, KTable or GlobalKTable, as in Kafka "
                f"Streams; got {type(other).__name__}."
            )
        check_callable(joiner, f"KStream.{method} joiner", "value, other_value", 2)
        node = add_join(
            self._graph,
            kind,
            join_type,
            (left, right),
            joiner=joiner,
            name=name,
            key_selector=key_selector,
            windows=windows,
        )
        # a GlobalKTable join keeps the key, so a pending repartition stays pending
        return KStream(
            self._graph,
            node,
            key_serde=self._key_serde,
            repartition_required=kind is JoinKind.STREAM_GLOBAL_TABLE
            and self._repartition_required,
        )

    # -- the Processor API -----------------------------------------------------------------

    def process(
        self, processor_supplier: Callable[[], Any], *store_names: str, name: str | None = None
    ) -> KStream:
        """Run a user :class:`~streamtable.processor.api.Processor` over the stream.

        ``processor_supplier()`` must return a new processor each call (the class itself
        works); ``store_names`` name stores added with ``StreamsBuilder.add_state_store`` that
        the processor reaches through ``context.get_state_store(name)``. The result is the
        stream of records the processor forwards; its keys may differ from the input's, so
        a later ``group_by_key``/join repartitions it (Kafka Streams 3.3+ does the same).

        Records are handed to the processor per key in offset order; ``None`` keys and
        values are passed as they are. See :mod:`streamtable.processor.api` and
        ``docs/processor-api.md`` for how instances, punctuation and stores map onto Spark.

        Raises
        ------
        TopologyError
            If the supplier is not callable, returns the same instance twice (Kafka Streams:
            "ProcessorSupplier#get() must return a new object each time it is called"), or
            returns an object without ``process``; if a store name was not added to the
            builder ("StateStore ... is not added yet") or is already connected to another
            processor (streamtable runs each processor as its own Spark operator, so two
            processors cannot share a store yet).
        """
        return self._process(processor_supplier, store_names, name, fixed_key=False)

    def process_values(
        self, processor_supplier: Callable[[], Any], *store_names: str, name: str | None = None
    ) -> KStream:
        """As :meth:`process`, for a processor that keeps keys (Kafka Streams'
        ``FixedKeyProcessor``): forwarding a record with another key fails with a
        ``StreamsError``, and the result needs no repartition.

        Raises
        ------
        TopologyError
            As :meth:`process`.
        """
        return self._process(processor_supplier, store_names, name, fixed_key=True)

    def _process(
        self,
        supplier: Callable[[], Any],
        store_names: tuple[str, ...],
        name: str | None,
        *,
        fixed_key: bool,
    ) -> KStream:
        from streamtable.topology.nodes import ProcessNode

        op = "KStream.process_values" if fixed_key else "KStream.process"
        check_processor_supplier(supplier, op)
        builders = self._graph.connect_stores(store_names, op)
        label = "PROCESSVALUES" if fixed_key else "PROCESSOR"
        node_name = self._graph.names.processor("KSTREAM", label, name)
        self._graph.add(
            ProcessNode(
                node_name,
                (self._node_name,),
                supplier=supplier,
                store_builders=builders,
                fixed_key=fixed_key,
            )
        )
        return KStream(
            self._graph,
            node_name,
            key_serde=self._key_serde if fixed_key else None,
            value_serde=None,
            repartition_required=self._repartition_required or not fixed_key,
        )

    # -- sinks ----------------------------------------------------------------------------

    def to(
        self,
        topic: str,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        partitioner: Callable[[Any, Any, int], int | None] | None = None,
        name: str | None = None,
    ) -> None:
        """Write the stream to ``topic`` (which must exist).

        Records are partitioned by murmur2 of the serialized key, like Java's default
        partitioner, unless ``partitioner(key, value, num_partitions) -> partition`` is given.
        Serdes default to the stream's known serdes, then to ``default.key.serde`` /
        ``default.value.serde``.

        Raises
        ------
        TopologyError
            If ``topic`` is not a legal Kafka topic name.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").to("my topic")
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KStream.to: 'my topic' is not a legal Kafka topic name ...
        """
        _check_topic(topic, "KStream.to")
        if partitioner is not None:
            check_callable(partitioner, "KStream.to partitioner", "key, value, num_partitions", 3)
        node_name = self._graph.names.processor("KSTREAM", "SINK", name)
        self._graph.add(
            SinkNode(
                node_name,
                (self._node_name,),
                topic=topic,
                key_serde=key_serde or self._key_serde,
                value_serde=value_serde or self._value_serde,
                partitioner=partitioner,
            )
        )

    def to_files(
        self,
        path: str | os.PathLike[str],
        *,
        format: str = "parquet",  # noqa: A002 - Spark's own name for it
        partition_by: str | Sequence[str] | None = None,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        commit_interval: timedelta | None = None,
        name: str | None = None,
    ) -> None:
        """Write the stream to files under ``path`` with Spark's file sink, exactly once.

        Each record becomes one row. The columns, typed by the serdes (defaults as for
        :meth:`to`):

        - ``key``: ``string`` for the string and JSON serdes (JSON as text), ``bigint`` /
          ``int`` for the long / integer serdes, else ``binary`` (the serialized bytes);
        - the value: with a JSON serde that has a schema (``Serdes.json({"amount":
          "double", ...})``), one column per field of the schema; else one column ``value``
          typed like the key. A tombstone (``None`` value) gives nulls;
        - ``timestamp`` (the record's event time, UTC, ms precision) and ``date`` (its UTC
          date, for ``partition_by="date"``);
        - ``topic``, ``partition``, ``offset``: the Kafka coordinates of the input record the
          row derives from; null for the records an aggregation emits (they are new records).

        The output is exactly once under any ``processing.guarantee``: Spark's file sink writes
        each micro-batch's files, then records them in the log ``<path>/_spark_metadata``; a
        crashed batch is written again under the same batch id and its earlier files are never
        logged. Readers that use the log (Spark, and ``streamtable.read_files``) see every
        record once; readers that list the directory (pyarrow, pandas, duckdb) may also see the
        files of a batch that crashed and was redone — list the log's files for them
        (docs/file-sink.md shows how). Any Hadoop-compatible ``path`` works (``file://``,
        ``hdfs://``, ``s3a://`` with the right jars).

        Kafka Streams has no file sink (Kafka Connect's sink connectors write topics to
        files); this follows Spark's file sink.

        Parameters
        ----------
        path : str or os.PathLike
            The output directory (a local path or a Hadoop URI); one sink per path.
        format : str
            ``"parquet"`` (default), ``"orc"`` or ``"json"``.
        partition_by : str or sequence of str, optional
            Columns whose values name sub-directories (``date=2026-11-25/``).
        key_serde, value_serde : Serde, optional
            The serdes that decide the column types (above).
        commit_interval : timedelta, optional
            How often the sink writes a micro-batch of files (default: the application's
            ``commit.interval.ms``). Longer means fewer, larger files and less load beside
            the application's other queries, at the cost of fresher files (Kafka Connect's
            file sinks' ``rotate.interval.ms`` plays this part).
        name : str, optional
            The sink's processor name.

        Raises
        ------
        TopologyError
            If ``path`` is empty, ``format`` unknown, ``partition_by`` not column names or
            ``commit_interval`` not positive;
            at compile time, if a ``partition_by`` column does not exist or two sinks share a
            path; at start, if ``path`` holds the log of another application's earlier run.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("events").to_files("/data/events", partition_by="date")
        >>> print(b.build().describe())
        Topologies:
           Sub-topology: 0
            Source: KSTREAM-SOURCE-0000000000 (topics: [events])
              --> KSTREAM-SINK-0000000001
            Sink: KSTREAM-SINK-0000000001 (topic: files:parquet:/data/events)
              <-- KSTREAM-SOURCE-0000000000
        <BLANKLINE>
        """
        node_name = self._graph.names.processor("KSTREAM", "SINK", name)
        self._graph.add(
            file_sink_node(
                node_name,
                self._node_name,
                path,
                format=format,
                partition_by=partition_by,
                key_serde=key_serde or self._key_serde,
                value_serde=value_serde or self._value_serde,
                commit_interval=commit_interval,
            )
        )


class BranchedKStream:
    """The result of :meth:`KStream.split`: add branches, then take the dict of streams."""

    def __init__(self, splitter: KStream, prefix: str) -> None:
        self._stream = splitter
        self._prefix = prefix
        self._predicates: list[Callable[[Any, Any], bool]] = []
        self._branches: dict[str, KStream] = {}

    def branch(
        self, predicate: Callable[[Any, Any], bool], name: str | None = None
    ) -> BranchedKStream:
        """Add a branch taking the records that match ``predicate`` and no earlier branch.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> split = b.stream("in").split(name="size-").branch(lambda k, v: v > 100)
        >>> sorted(split.branch(lambda k, v: v > 10).no_default_branch())
        ['size-1', 'size-2']
        """
        from streamtable.columns import is_column_expression

        if is_column_expression(predicate):
            raise TopologyError(
                f"BranchedKStream.branch takes a Python predicate; got the column expression "
                f"{predicate!r}. For Spark SQL branches, filter the stream once per branch "
                "with the expression (stream.filter(expr), stream.filter_not(expr))."
            )
        check_callable(predicate, "BranchedKStream.branch", "key, value", 2)
        earlier = tuple(self._predicates)
        self._predicates.append(predicate)
        branch_name = self._prefix + (name or str(len(self._predicates)))
        self._branches[branch_name] = self._branch(_FirstMatch(earlier, predicate), branch_name)
        return self

    def default_branch(self, name: str | None = None) -> dict[str, KStream]:
        """Add a branch for the records no predicate matched and return all branches.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> branches = b.stream("in").split(name="s-").branch(lambda k, v: v > 0).default_branch()
        >>> branches
        {'s-1': KStream(s-1), 's-0': KStream(s-0)}
        """
        branch_name = self._prefix + (name or "0")
        self._branches[branch_name] = self._branch(
            _Negate(_AnyOf(tuple(self._predicates))), branch_name
        )
        return dict(self._branches)

    def _branch(self, predicate: Callable[[Any, Any], bool], branch_name: str) -> KStream:
        # Kafka Streams' branch child: a processor named <split name><branch name or index>
        # below the splitter; here it filters the splitter's records with its predicate
        return self._stream._op(RecordOpKind.FILTER, predicate, "BRANCHCHILD", branch_name)

    def no_default_branch(self) -> dict[str, KStream]:
        """Return the branches; records no predicate matched are dropped.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> split = b.stream("in").split(name="s-")
        >>> split.branch(lambda k, v: v > 0, name="pos").no_default_branch()
        {'s-pos': KStream(s-pos)}
        """
        return dict(self._branches)


def _check_topic(topic: object, operation: str) -> None:
    import re

    if not isinstance(topic, str) or not re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", topic):
        raise TopologyError(
            f"{operation}: {topic!r} is not a legal Kafka topic name (1-249 characters from "
            "a-z, A-Z, 0-9, '.', '_', '-'); Kafka refuses it with InvalidTopicException."
        )


def _suffixed(name: str | None, suffix: str, default: str) -> str:
    return default if name is None else name + suffix


def _pass(key: Any, value: Any) -> None:
    """The splitter's function: never called (an identity operation runs no Python)."""


# Small picklable function objects (Spark ships them to Python workers with cloudpickle).


class _Negate:
    def __init__(self, predicate: Callable[[Any, Any], bool]) -> None:
        self.predicate = predicate

    def __call__(self, key: Any, value: Any) -> bool:
        return not self.predicate(key, value)


class _AnyOf:
    def __init__(self, predicates: tuple[Callable[[Any, Any], bool], ...]) -> None:
        self.predicates = predicates

    def __call__(self, key: Any, value: Any) -> bool:
        return any(p(key, value) for p in self.predicates)


class _FirstMatch:
    def __init__(
        self, earlier: tuple[Callable[[Any, Any], bool], ...], predicate: Callable[[Any, Any], bool]
    ) -> None:
        self.earlier = earlier
        self.predicate = predicate

    def __call__(self, key: Any, value: Any) -> bool:
        return self.predicate(key, value) and not any(p(key, value) for p in self.earlier)
