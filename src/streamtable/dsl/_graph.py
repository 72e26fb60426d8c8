"""The graph accumulator behind a ``StreamsBuilder`` (Kafka Streams' ``InternalStreamsBuilder``)."""

from __future__ import annotations

from streamtable.errors import TopologyError
from streamtable.topology.naming import NameGenerator
from streamtable.topology.nodes import Node


class GraphBuilder:
    """Collects nodes in creation order; handles (``KStream``, ``KTable``) refer to node names."""

    def __init__(self) -> None:
        self.names = NameGenerator()
        self._nodes: list[Node] = []
        self.built = False

    def add(self, node: Node) -> Node:
        """Append ``node``; its parents must already be in the graph."""
        if self.built:
            raise TopologyError(
                "This StreamsBuilder has already been built; create a new StreamsBuilder "
                "for another topology."
            )
        known = {n.name for n in self._nodes}
        for p in node.parents:
            if p not in known:
                raise TopologyError(
                    f"Operator {node.name!r} refers to {p!r}, which belongs to another "
                    "StreamsBuilder; streams and tables of different builders cannot be mixed."
                )
        self._nodes.append(node)
        return node

    def nodes(self) -> tuple[Node, ...]:
        """The nodes so far, in creation order."""
        return tuple(self._nodes)
