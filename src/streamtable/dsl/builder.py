"""``StreamsBuilder``: the entry point of the DSL (Kafka Streams' ``StreamsBuilder``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streamtable.dsl._callables import check_callable
from streamtable.dsl._graph import GraphBuilder
from streamtable.dsl.kstream import KStream, _check_topic
from streamtable.dsl.ktable import GlobalKTable, KTable
from streamtable.dsl.materialized import Materialized, materialized_of
from streamtable.dsl.windows import to_millis
from streamtable.errors import TopologyError
from streamtable.topology.cycles import check_topic_cycles
from streamtable.topology.nodes import FileSinkNode, SinkNode, SourceNode, TableSourceNode
from streamtable.topology.topology import Topology

if TYPE_CHECKING:
    from streamtable.processor.stores import KeyValueStoreBuilder
    from streamtable.serde import Serde


class StreamsBuilder:
    """Builds a topology with the Kafka Streams DSL; ``build()`` returns the :class:`Topology`.

    Examples
    --------
    >>> from streamtable import StreamsBuilder, Serdes
    >>> builder = StreamsBuilder()
    >>> words = builder.stream("in", key_serde=Serdes.string(), value_serde=Serdes.string())
    >>> words.filter(lambda k, v: v is not None).to("out")
    >>> print(builder.build().describe())
    Topologies:
       Sub-topology: 0
        Source: KSTREAM-SOURCE-0000000000 (topics: [in])
          --> KSTREAM-FILTER-0000000001
        Processor: KSTREAM-FILTER-0000000001 (stores: [])
          --> KSTREAM-SINK-0000000002
          <-- KSTREAM-SOURCE-0000000000
        Sink: KSTREAM-SINK-0000000002 (topic: out)
          <-- KSTREAM-FILTER-0000000001
    <BLANKLINE>
    <BLANKLINE>
    """

    def __init__(self) -> None:
        self._graph = GraphBuilder()

    def stream(
        self,
        topics: str | Sequence[str],
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        timestamp_extractor: Callable[..., int] | None = None,
        auto_offset_reset: str | None = None,
        name: str | None = None,
    ) -> KStream:
        """A stream of the records of one or more topics (``StreamsBuilder.stream``).

        Parameters
        ----------
        topics : str or sequence of str
            Existing Kafka topics; a missing topic fails ``KafkaStreams.start()`` with
            :class:`~streamtable.errors.MissingSourceTopicError`.
        key_serde, value_serde : Serde, optional
            How to read keys and values; default: ``default.key.serde`` /
            ``default.value.serde`` of the configuration.
        timestamp_extractor : callable, optional
            Where each record's event time comes from (Kafka Streams' ``TimestampExtractor``):
            :class:`~streamtable.RecordTimestamp`, :class:`~streamtable.WallclockTimestamp`,
            :class:`~streamtable.FieldTimestamp`, or any ``fn(key, value,
            record_timestamp_ms) -> int`` ms. Default: the Kafka record's timestamp. A record
            whose extractor gives no ``int >= 0`` is skipped and counted as
            ``invalid_timestamp``, or stops the application, per the extractor's
            ``on_invalid=`` or the config's ``streamtable.invalid.timestamp.policy``
            (see :mod:`streamtable.dsl.timestamps`). Without an extractor, records with a
            negative Kafka timestamp are dropped by windowed aggregations (counted as
            ``negative_timestamp``), or stop the application under policy ``"fail"``.
        auto_offset_reset : {"earliest", "latest"}, optional
            Where to start without a checkpoint; default: the configuration's
            ``auto.offset.reset`` (``earliest``).
        name : str, optional
            The source node's name.

        Raises
        ------
        TopologyError
            For an illegal topic name, an unknown ``auto_offset_reset`` or a
            ``timestamp_extractor`` that cannot take ``(key, value, record_timestamp_ms)``.

        Examples
        --------
        >>> from streamtable import FieldTimestamp, Serdes, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("events", key_serde=Serdes.string(), value_serde=Serdes.json(),
        ...          timestamp_extractor=FieldTimestamp("event_time", on_invalid="fail"))
        KStream(KSTREAM-SOURCE-0000000000)
        """
        topic_list = (topics,) if isinstance(topics, str) else tuple(topics)
        if not topic_list:
            raise TopologyError(
                "StreamsBuilder.stream needs at least one topic (Kafka Streams refuses it "
                "too: 'You must provide at least one topic')."
            )
        for t in topic_list:
            _check_topic(t, "StreamsBuilder.stream")
        if auto_offset_reset not in (None, "earliest", "latest"):
            raise TopologyError(
                f"StreamsBuilder.stream: auto_offset_reset must be 'earliest' or 'latest'; "
                f"got {auto_offset_reset!r}. Kafka Streams' AutoOffsetReset also has none() "
                "and byDuration(), which streamtable does not support yet."
            )
        if timestamp_extractor is not None:
            check_callable(
                timestamp_extractor, "timestamp_extractor", "key, value, record_timestamp_ms", 3
            )
        node_name = self._graph.names.processor("KSTREAM", "SOURCE", name)
        self._graph.add(
            SourceNode(
                node_name,
                (),
                topics=topic_list,
                key_serde=key_serde,
                value_serde=value_serde,
                timestamp_extractor=timestamp_extractor,
                auto_offset_reset=auto_offset_reset,
            )
        )
        return KStream(self._graph, node_name, key_serde=key_serde, value_serde=value_serde)

    def table(
        self,
        topic: str,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str | Materialized | None = None,
        history_retention: timedelta | int | None = None,
    ) -> KTable:
        """The topic read as a table: the latest value per key (``StreamsBuilder.table``).

        A record with a ``None`` value (tombstone) deletes its key; records with a null key
        are skipped and counted. Updates of a key apply in the topic's order (offset order),
        as in Kafka Streams' ``KTableSource``.

        Parameters
        ----------
        topic : str
            An existing topic, ideally compacted.
        key_serde, value_serde : Serde, optional
            Default: ``default.key.serde`` / ``default.value.serde``.
        name : str, optional
            The state store's name, or a ``Materialized`` (Kafka Streams'
            ``Materialized.as``; its serdes apply when ``key_serde``/``value_serde`` are not
            given).
        history_retention : timedelta or int ms, optional
            How long old versions are kept for timestamped lookups by stream-table joins
            (Kafka Streams' versioned store history retention), measured against the
            largest table timestamp seen. As with Kafka Streams' versioned store, it is also
            the table's grace period: an update older than that is dropped (counted as
            ``expired``), and a stream record older than that finds only its key's latest
            version. Default: every version is kept.

        Raises
        ------
        TopologyError
            For an illegal topic or store name or a negative retention.

        Examples
        --------
        >>> from streamtable import StreamsBuilder, Serdes
        >>> b = StreamsBuilder()
        >>> b.table("planes", key_serde=Serdes.string(), value_serde=Serdes.string())
        KTable(KTABLE-SOURCE-0000000002)
        """
        retention = None
        if history_retention is not None:
            retention = to_millis(history_retention, "history_retention")
            if retention < 0:
                raise TopologyError(
                    f"history_retention must not be negative; got {retention} ms (Kafka "
                    "Streams' Stores.persistentVersionedKeyValueStore refuses it too)."
                )
        m = materialized_of(name, "StreamsBuilder.table")
        key_serde, value_serde = key_serde or m.key_serde, value_serde or m.value_serde
        node_name = self._add_table(
            "table",
            topic,
            key_serde,
            value_serde,
            m.store_name,
            history_retention_ms=retention,
            logged=m.logging,
        )
        return KTable(self._graph, node_name, key_serde=key_serde, value_serde=value_serde)

    def global_table(
        self,
        topic: str,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str | Materialized | None = None,
    ) -> GlobalKTable:
        """The topic read as a table every instance sees in full (``globalTable``).

        Join it from a stream with ``KStream.join(global_table, key_selector, joiner)``; no
        co-partitioning is needed. Tombstones delete keys.

        Examples
        --------
        >>> from streamtable import StreamsBuilder, Serdes
        >>> b = StreamsBuilder()
        >>> b.global_table("airlines", key_serde=Serdes.string(), value_serde=Serdes.string())
        GlobalKTable(KTABLE-SOURCE-0000000002)
        """
        m = materialized_of(name, "StreamsBuilder.global_table")
        key_serde, value_serde = key_serde or m.key_serde, value_serde or m.value_serde
        node_name = self._add_table(
            "global_table",
            topic,
            key_serde,
            value_serde,
            m.store_name,
            is_global=True,
            logged=m.logging,
        )
        return GlobalKTable(self._graph, node_name, key_serde)

    def _add_table(
        self,
        method: str,
        topic: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        name: str | None,
        *,
        logged: bool = True,
        **options: Any,
    ) -> str:
        """Add a :class:`TableSourceNode` named as Kafka Streams names a table's source,
        processor and store; return the processor's name.
        """
        _check_topic(topic, f"StreamsBuilder.{method}")
        # Kafka Streams' order: the store (Materialized), the source, the table source
        store = self._graph.names.table_store(topic, name)
        source_name = self._graph.names.processor("KSTREAM", "SOURCE")
        node_name = self._graph.names.processor("KTABLE", "SOURCE")
        self._graph.add(
            TableSourceNode(
                node_name,
                (),
                topic=topic,
                source_name=source_name,
                key_serde=key_serde,
                value_serde=value_serde,
                store_name=store,
                queryable=name is not None and logged,
                **options,
            )
        )
        return node_name

    def add_state_store(self, builder: KeyValueStoreBuilder) -> StreamsBuilder:
        """Add a Processor API state store (Kafka Streams' ``StreamsBuilder.addStateStore``);
        connect it to a processor by naming it in ``KStream.process(supplier, name)``.

        Returns the builder itself, as Kafka Streams does.

        Raises
        ------
        TopologyError
            If ``builder`` is not a store builder, or a store of that name was added already.

        Examples
        --------
        >>> from streamtable import StreamsBuilder, Serdes, Stores
        >>> b = StreamsBuilder()
        >>> store = Stores.key_value_store_builder(
        ...     Stores.persistent_key_value_store("seen"), Serdes.string(), Serdes.long())
        >>> b.add_state_store(store).add_state_store(store)
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: StateStore 'seen' is already added ...
        """
        self._graph.add_state_store(builder)
        return self

    def build(self) -> Topology:
        """Validate the graph and return the immutable :class:`Topology`.

        Raises
        ------
        TopologyError
            If the topology has no sink or ``foreach`` (it would compute nothing visible), or
            records would cycle through topics it both reads and writes
            (:func:`~streamtable.topology.cycles.check_topic_cycles`).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").map_values(str.upper)
        KStream(KSTREAM-MAPVALUES-0000000001)
        >>> b.build()
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: The topology has no output: end it with
        KStream.to(topic) or KStream.foreach(fn). ...
        """
        nodes = self._graph.nodes()
        if not nodes:
            raise TopologyError(
                "The topology is empty: add a stream with StreamsBuilder.stream() (Kafka "
                "Streams refuses it too: 'Topology has no stream threads and no global "
                "threads')."
            )
        terminal = [
            n
            for n in nodes
            if isinstance(n, SinkNode | FileSinkNode) or getattr(n, "terminal", False)
        ]
        if not terminal:
            raise TopologyError(
                "The topology has no output: end it with KStream.to(topic) or "
                "KStream.foreach(fn). (Kafka Streams also runs a topology without one, e.g. "
                "to serve its stores to interactive queries; streamtable does not yet.)"
            )
        topology = Topology(nodes)
        check_topic_cycles(topology.graph)
        self._graph.built = True
        return topology
