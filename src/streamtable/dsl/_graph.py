"""The graph accumulator behind a ``StreamsBuilder`` (Kafka Streams' ``InternalStreamsBuilder``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from streamtable.errors import TopologyError
from streamtable.topology.naming import NameGenerator
from streamtable.topology.nodes import Node

#: A repartition whose name prefix matches this gets generated processor names (Kafka Streams'
#: ``createRepartitionedSource``); any other prefix names them ``<topic>-filter/-sink/-source``.
_GENERATED_PREFIX = re.compile(r"KSTREAM.*-[0-9]{10}")


class GraphBuilder:
    """Collects nodes in creation order; handles (``KStream``, ``KTable``) refer to node names."""

    def __init__(self) -> None:
        self.names = NameGenerator()
        self._nodes: list[Node] = []
        self.built = False
        #: state stores added with ``StreamsBuilder.add_state_store``, by name
        self.state_stores: dict[str, Any] = {}
        #: store name -> the processor it is connected to
        self.store_owner: dict[str, str] = {}
        #: stream node -> the repartition its last join added (``KStreamImpl``'s
        #: ``repartitionNode`` field, reused by its next unnamed join)
        self.join_repartition: dict[str, str] = {}

    def add(self, node: Node) -> Node:
        """Append ``node``; its parents must already be in the graph."""
        if self.built:
            raise TopologyError(
                "This StreamsBuilder has already been built; create a new StreamsBuilder "
                "for another topology. (Kafka Streams does not check this, but its build() "
                "returns the builder's one Topology, which later additions would change; "
                "streamtable topologies are immutable.)"
            )
        known = {n.name for n in self._nodes}
        for p in node.parents:
            if p not in known:
                raise TopologyError(
                    f"Operator {node.name!r} refers to {p!r}, which belongs to another "
                    "StreamsBuilder; streams and tables of different builders cannot be mixed "
                    "(Kafka Streams does not check this: its builder leaves such an operator "
                    "out, or fails with 'Predecessor processor ... is not added yet'). Define "
                    "them with one builder."
                )
        self._nodes.append(node)
        for b in getattr(node, "store_builders", ()):
            self.store_owner[b.name] = node.name
        return node

    def nodes(self) -> tuple[Node, ...]:
        """The nodes so far, in creation order."""
        return tuple(self._nodes)

    def readd(self, name: str) -> None:
        """Note that Kafka Streams adds the existing node ``name`` to its graph again now (a
        named grouping's repartition, reused by another aggregation), which moves it to the
        end of Kafka Streams' writing order (``kafka_names["written_after"]``: the node
        created last so far); ``describe()`` follows that order.
        """
        i = next(i for i, n in enumerate(self._nodes) if n.name == name)
        node = self._nodes[i]
        kafka_names = {**node.kafka_names, "written_after": self._nodes[-1].name}
        self._nodes[i] = dataclasses.replace(node, kafka_names=kafka_names)

    def stream_repartition(self, prefix: str, *, reuse: bool = False) -> tuple[str, dict[str, str]]:
        """Topic and processor names of a stream repartition, as Kafka Streams gives them.

        Follows ``KStreamImpl.createRepartitionedSource``: the topic is ``prefix`` with
        ``-repartition`` appended unless it already ends so; the counter advances for a sink, a
        null-key filter and a source, which are named so when ``prefix`` is generated
        (``KSTREAM...-<10 digits>``), else ``<topic>-sink``/``-filter``/``-source``. ``reuse``:
        the names belong to a repartition already in the graph (only the counter advances).

        Examples
        --------
        >>> g = GraphBuilder()
        >>> topic, names = g.stream_repartition("by-user")
        >>> topic, names["filter"], names["source"]
        ('by-user-repartition', 'by-user-repartition-filter', 'by-user-repartition-source')
        >>> g.stream_repartition("KSTREAM-MAP-0000000009")[1]["source"]
        'KSTREAM-SOURCE-0000000005'
        """
        topic = prefix if prefix.endswith("-repartition") else f"{prefix}-repartition"
        sink = self.names.generated("KSTREAM", "SINK")
        null_filter = self.names.generated("KSTREAM", "FILTER")
        source = self.names.generated("KSTREAM", "SOURCE")
        if not _GENERATED_PREFIX.fullmatch(prefix):
            sink, null_filter, source = (f"{topic}-{role}" for role in ("sink", "filter", "source"))
        names = {"filter": null_filter, "sink": sink, "source": source}
        if not reuse:
            for n in names.values():
                self.names.claim(n)
        return topic, names

    def add_state_store(self, builder: Any) -> None:
        """Register a Processor API store builder (``StreamsBuilder.add_state_store``)."""
        from streamtable.processor.stores import is_store_builder

        if not is_store_builder(builder):
            raise TopologyError(
                "StreamsBuilder.add_state_store expects a store builder from "
                "Stores.key_value_store_builder(...) or Stores.window_store_builder(...); got "
                f"{type(builder).__name__} {builder!r}."
            )
        if builder.name in self.state_stores:
            raise TopologyError(
                f"StateStore {builder.name!r} is already added (Kafka Streams refuses it too: "
                f"'StateStore {builder.name} is already added.'). Give each store its own name."
            )
        self.state_stores[builder.name] = builder

    def connect_stores(self, names: tuple[str, ...], operation: str) -> tuple[Any, ...]:
        """The builders of stores ``names`` for a new processor (checked, not yet claimed)."""
        out = []
        for store in names:
            if not isinstance(store, str) or store not in self.state_stores:
                raise TopologyError(
                    f"{operation}: StateStore {store!r} is not added yet (Kafka Streams fails "
                    f"likewise: 'StateStore {store} is not added yet.'). Add it first with "
                    "builder.add_state_store(Stores.key_value_store_builder(...)); stores "
                    f"added so far: {sorted(self.state_stores)}."
                )
            if store in self.store_owner:
                raise TopologyError(
                    f"{operation}: StateStore {store!r} is already connected to processor "
                    f"{self.store_owner[store]!r}. Kafka Streams lets processors of one "
                    "sub-topology share a store; streamtable runs each processor as its own "
                    "Spark stateful operator and cannot yet: give each processor its own store."
                )
            out.append(self.state_stores[store])
        return tuple(dict.fromkeys(out))
