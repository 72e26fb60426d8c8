"""The topology: built by ``StreamsBuilder.build()`` (immutable), or by hand with the Processor
API's ``add_source``/``add_processor``/``add_state_store``/``add_sink`` (:mod:`.hand_built`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from streamtable.topology.describe import TopologyDescription, describe
from streamtable.topology.hand_built import HandBuiltTopology
from streamtable.topology.nodes import (
    AggregateNode,
    CustomWindowSpec,
    GraphSnapshot,
    JoinNode,
    Node,
    ProcessNode,
    RepartitionNode,
    SinkNode,
    SourceNode,
    SuppressNode,
    TableAggregateNode,
    TableSourceNode,
)
from streamtable.topology.old_values import folds_in_python


class Topology(HandBuiltTopology):
    """A directed acyclic graph of sources, processors and sinks (Kafka Streams' ``Topology``).

    Built by :meth:`streamtable.StreamsBuilder.build`, or, created empty (``Topology()``), by
    hand with ``add_source``, ``add_processor``, ``add_state_store`` and ``add_sink``; nothing
    runs until :meth:`streamtable.KafkaStreams.start`.

    Examples
    --------
    >>> from streamtable import Processor, Serdes, Stores
    >>> class Count(Processor):
    ...     def process(self, record): ...
    >>> t = (Topology()
    ...      .add_source("Source", "streams-plaintext-input")
    ...      .add_processor("Process", Count, "Source")
    ...      .add_state_store(Stores.key_value_store_builder(
    ...          Stores.in_memory_key_value_store("Counts"), Serdes.string(), Serdes.long()),
    ...          "Process")
    ...      .add_sink("Sink", "streams-wordcount-processor-output", "Process"))
    >>> print(t.describe())
    Topologies:
       Sub-topology: 0
        Source: Source (topics: [streams-plaintext-input])
          --> Process
        Processor: Process (stores: [Counts])
          --> Sink
          <-- Source
        Sink: Sink (topic: streams-wordcount-processor-output)
          <-- Process
    <BLANKLINE>
    <BLANKLINE>
    """

    def __init__(self, nodes: tuple[Node, ...] | None = None) -> None:
        self._graph = GraphSnapshot(nodes or ())
        self._hand_built = nodes is None

    @property
    def graph(self) -> GraphSnapshot:
        """The core nodes, in creation order."""
        return self._graph

    @property
    def source_topics(self) -> tuple[str, ...]:
        """Every user topic the topology reads, in first-use order."""
        seen: dict[str, None] = {}
        for node in self._graph.nodes:
            if isinstance(node, SourceNode):
                for t in node.topics:
                    seen.setdefault(t, None)
            elif isinstance(node, TableSourceNode):
                seen.setdefault(node.topic, None)
        return tuple(seen)

    @property
    def sink_topics(self) -> tuple[str, ...]:
        """Every user topic the topology writes (sinks, then late-records topics)."""
        sinks = [n.topic for n in self._graph.of_type(SinkNode)]
        late = [
            n.late_records_topic
            for n in self._graph.of_type(AggregateNode)
            if n.late_records_topic is not None
        ]
        return tuple(dict.fromkeys(sinks + late))

    @property
    def store_names(self) -> tuple[str, ...]:
        """Names of the state stores, in creation order."""
        return tuple(s for n in self._graph.nodes for s in n.stores)

    def describe(self) -> TopologyDescription:
        """The topology in Kafka Streams' text format (``print(topology.describe())``)."""
        return describe(self._graph)

    def fingerprint(self) -> dict[str, object]:
        """What a checkpoint depends on: source topics and each stateful operator's identity.

        Stored beside the checkpoint; a restart with a different fingerprint is refused
        (Spark's operator state is positional, so any change here would corrupt it).
        """
        stateful = []
        for n in self._graph.nodes:
            if isinstance(n, AggregateNode):
                w = n.windows
                stateful.append(
                    {
                        "store": n.store_name,
                        "kind": _aggregation_kind(n, self._graph),
                        "windows": None if w is None else {type(w).__name__: _window_fields(w)},
                    }
                )
            elif isinstance(n, SuppressNode):
                assert n.suppress is not None
                stateful.append({"store": n.store_name, "suppress": asdict(n.suppress)})
            elif isinstance(n, TableSourceNode | TableAggregateNode | JoinNode | ProcessNode):
                stateful.append({"store": list(n.stores), "kind": type(n).__name__})
            elif isinstance(n, RepartitionNode) and n.num_partitions is not None:
                # a sub-topology boundary with a topic of its own (compiler.subtopologies)
                stateful.append({"repartition": n.topic_name, "partitions": n.num_partitions})
            elif isinstance(n, RepartitionNode):
                stateful.append({"repartition": n.topic_name})
        # the compiler's state layout (paged Python aggregations) is part of the checkpoint too
        body = {
            "sources": list(self.source_topics),
            "stateful": stateful,
            "state_layout": "pages-128",
        }
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
        return {"version": 1, "digest": digest, **body}

    def __repr__(self) -> str:
        return f"Topology(sources={list(self.source_topics)}, sinks={list(self.sink_topics)})"


def _window_fields(windows: object) -> dict[str, object]:
    """A window specification's fields for the fingerprint (a user-defined ``Windows``
    subclass by its name, size and grace).
    """
    if isinstance(windows, CustomWindowSpec):
        return windows.fingerprint()
    return asdict(windows)  # type: ignore[call-overload]


def _aggregation_kind(node: AggregateNode, graph: GraphSnapshot) -> str | None:
    """How an aggregation's state is kept: ``"python"`` (a fold; also a ``count`` or built-in
    reducer whose table is filtered, :mod:`.old_values`), ``"count"``, or a built-in
    reducer with its values' serde (``"max/long"``, ``"max/integer"``): a change of serde
    changes the state's type (Spark keeps an ``int`` for an Integer min or max, a ``bigint``
    for a Long one) or the changelog's encoding (an Integer sum, kept as a ``bigint``, is
    logged as 4 bytes).
    """
    agg = node.aggregation
    if agg is None:
        return None
    if agg.native is None or folds_in_python(graph, node):
        return "python"
    if agg.native == "count" or node.value_serde is None:
        return agg.native
    return f"{agg.native}/{node.value_serde.kind}"
