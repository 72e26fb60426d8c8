"""Hand-built topologies: Kafka Streams' ``Topology.addSource/addProcessor/addStateStore/addSink``.

:class:`~streamtable.topology.topology.Topology` mixes these methods in: a ``Topology()``
created empty is filled node by node, as in Kafka Streams' Processor API. Each method checks
what Kafka Streams checks (unique names, known parents, known stores) and raises
``TopologyError`` with Kafka Streams' message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from streamtable.errors import TopologyError
from streamtable.topology.nodes import GraphSnapshot, Node, ProcessNode, SinkNode, SourceNode


class HandBuiltTopology:
    """The ``add_*`` methods of :class:`~streamtable.topology.topology.Topology`."""

    _graph: GraphSnapshot
    _hand_built: bool

    def _add(self, node: Node) -> None:
        if not self._hand_built:
            raise TopologyError(
                "This topology was built by a StreamsBuilder and cannot be changed; add "
                "processors to an empty Topology() instead (or use KStream.process)."
            )
        if node.name in self._graph.by_name:
            raise TopologyError(
                f"Processor {node.name} is already added (Kafka Streams' message): names of "
                "sources, processors and sinks must be unique."
            )
        for p in node.parents:
            if p not in self._graph.by_name:
                raise TopologyError(
                    f"Parent processor {p} is not added yet for {node.name} (Kafka Streams' "
                    "message): add parents first."
                )
            if isinstance(self._graph.by_name[p], SinkNode):
                raise TopologyError(
                    f"Sink {p} cannot be used a parent (Kafka Streams' message); {node.name} "
                    "must read a source or processor."
                )
        self._graph = GraphSnapshot((*self._graph.nodes, node))

    def add_source(
        self,
        name: str,
        *topics: str,
        key_serde: Any = None,
        value_serde: Any = None,
        timestamp_extractor: Callable[..., int] | None = None,
        auto_offset_reset: str | None = None,
    ) -> Any:
        """Add a source reading ``topics`` (Kafka Streams' ``addSource``); returns the topology.

        Raises
        ------
        TopologyError
            If the name is taken or no topic is given ("You must provide at least one topic").
        """
        if not topics:
            raise TopologyError(
                f"Source {name!r}: you must provide at least one topic (Kafka Streams' message)."
            )
        self._add(
            SourceNode(
                name,
                (),
                topics=tuple(topics),
                key_serde=key_serde,
                value_serde=value_serde,
                timestamp_extractor=timestamp_extractor,
                auto_offset_reset=auto_offset_reset,
            )
        )
        return self

    def add_processor(self, name: str, supplier: Callable[[], Any], *parent_names: str) -> Any:
        """Add processor ``name`` reading ``parent_names`` (Kafka Streams' ``addProcessor``).

        Raises
        ------
        TopologyError
            If the name is taken, a parent is unknown or a sink, no parent is given, or the
            supplier does not return a new processor each call.
        """
        from streamtable.dsl._callables import check_processor_supplier

        if not parent_names:
            raise TopologyError(
                f"Processor {name!r} must have at least one parent (Kafka Streams' message)."
            )
        check_processor_supplier(supplier, f"Topology.add_processor({name!r})")
        self._add(ProcessNode(name, tuple(parent_names), supplier=supplier))
        return self

    def add_state_store(self, builder: Any, *processor_names: str) -> Any:
        """Add a store and connect it to ``processor_names`` (Kafka Streams' ``addStateStore``).

        Raises
        ------
        TopologyError
            If ``builder`` is not a store builder, a store of that name exists, a processor is
            unknown, or more than one processor is named (streamtable runs each processor as its
            own Spark operator; a store belongs to one).
        """
        from streamtable.processor.stores import is_store_builder

        if not is_store_builder(builder):
            raise TopologyError(
                "Topology.add_state_store expects a builder from Stores.key_value_store_builder"
                f"(...); got {type(builder).__name__} {builder!r}."
            )
        if any(builder.name in n.stores for n in self._graph.nodes):
            raise TopologyError(f"StateStore {builder.name} is already added.")
        if len(processor_names) > 1:
            raise TopologyError(
                f"StateStore {builder.name!r} is connected to {list(processor_names)}: Kafka "
                "Streams lets processors share a store; streamtable cannot yet. Give each "
                "processor its own store."
            )
        nodes = list(self._graph.nodes)
        for target in processor_names:
            i = next((i for i, n in enumerate(nodes) if n.name == target), None)
            if i is None or not isinstance(nodes[i], ProcessNode):
                raise TopologyError(
                    f"Processor {target} is not added yet (Kafka Streams' message): add it "
                    "with add_processor before connecting store "
                    f"{builder.name!r}."
                )
            node = nodes[i]
            assert isinstance(node, ProcessNode)
            nodes[i] = replace(node, store_builders=(*node.store_builders, builder))
        self._graph = GraphSnapshot(tuple(nodes))
        return self

    def add_sink(
        self,
        name: str,
        topic: str,
        *parent_names: str,
        key_serde: Any = None,
        value_serde: Any = None,
        partitioner: Callable[..., int | None] | None = None,
    ) -> Any:
        """Add a sink writing ``topic`` (Kafka Streams' ``addSink``); returns the topology.

        Raises
        ------
        TopologyError
            If the name is taken, a parent is unknown, or no parent is given.
        """
        if not parent_names:
            raise TopologyError(
                f"Sink {name!r} must have at least one parent (Kafka Streams' message)."
            )
        self._add(
            SinkNode(
                name,
                tuple(parent_names),
                topic=topic,
                key_serde=key_serde,
                value_serde=value_serde,
                partitioner=partitioner,
            )
        )
        return self
