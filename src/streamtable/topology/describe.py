"""``Topology.describe()``: the topology as text, in Kafka Streams' ``TopologyDescription`` format.

The layout follows ``TopologyDescription#toString`` of Kafka Streams 4.x: sub-topologies split at
repartition topics; inside one, nodes sorted by the size of the sub-graph they root (largest
first), then by name; ``-->`` lists successors and ``<--`` predecessors, or ``none``.
A repartition shows as Kafka Streams builds it: ``<topic>-filter`` and ``<topic>-sink`` in the
upstream sub-topology, ``<topic>-source`` in the downstream one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamtable.topology.nodes import (
    GraphSnapshot,
    RepartitionNode,
    SinkNode,
    SourceNode,
    TableSourceNode,
)


@dataclass
class _DescNode:
    name: str
    kind: str  # Source | Processor | Sink
    topics: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()
    order: int = 0
    preds: list[str] = field(default_factory=list)
    succs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SubtopologyDescription:
    """One sub-topology: its id and its nodes' text lines."""

    id: int
    node_names: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class TopologyDescription:
    """Sub-topologies of a topology; ``str()`` gives Kafka Streams' text format."""

    subtopologies: tuple[SubtopologyDescription, ...]

    def __str__(self) -> str:
        out = "Topologies:\n "
        for sub in self.subtopologies:
            out += "  " + sub.text
        return out


def _expand(graph: GraphSnapshot) -> dict[str, _DescNode]:
    """Turn core nodes into description nodes (a repartition becomes filter, sink, source)."""
    desc: dict[str, _DescNode] = {}
    # where each core node's output comes from in the description graph
    out_name: dict[str, str] = {}
    order = 0

    def add(node: _DescNode) -> _DescNode:
        nonlocal order
        node.order = order
        order += 1
        desc[node.name] = node
        return node

    def link(pred: str, succ: str) -> None:
        desc[pred].succs.append(succ)
        desc[succ].preds.append(pred)

    for node in graph.nodes:
        if isinstance(node, RepartitionNode):
            topic = node.topic_name
            f = add(_DescNode(f"{topic}-filter", "Processor"))
            s = add(_DescNode(f"{topic}-sink", "Sink", topics=(topic,)))
            src = add(_DescNode(f"{topic}-source", "Source", topics=(topic,)))
            for p in node.parents:
                link(out_name[p], f.name)
            link(f.name, s.name)
            out_name[node.name] = src.name
            continue
        if isinstance(node, TableSourceNode):
            src = add(_DescNode(node.source_name, "Source", topics=(node.topic,)))
            d = add(_DescNode(node.name, "Processor", stores=node.stores))
            link(src.name, d.name)
            out_name[node.name] = d.name
            continue
        if isinstance(node, SourceNode):
            d = add(_DescNode(node.name, "Source", topics=node.topics))
        elif isinstance(node, SinkNode):
            d = add(_DescNode(node.name, "Sink", topics=(node.topic,)))
        else:
            d = add(_DescNode(node.name, "Processor", stores=node.stores))
        for p in node.parents:
            link(out_name[p], d.name)
        out_name[node.name] = d.name
    return desc


def _components(desc: dict[str, _DescNode]) -> list[list[_DescNode]]:
    parent = {n: n for n in desc}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in desc.values():
        for s in n.succs:
            parent[find(s)] = find(n.name)
    # nodes sharing a state store belong to one sub-topology
    by_store: dict[str, str] = {}
    for n in desc.values():
        for st in n.stores:
            if st in by_store:
                parent[find(n.name)] = find(by_store[st])
            else:
                by_store[st] = n.name
    groups: dict[str, list[_DescNode]] = {}
    for n in desc.values():
        groups.setdefault(find(n.name), []).append(n)
    return sorted(groups.values(), key=lambda g: min(n.order for n in g))


def _names(names: list[str], size: dict[str, int]) -> str:
    if not names:
        return "none"
    return ", ".join(sorted(names, key=lambda n: (-size[n], n)))


def describe(graph: GraphSnapshot) -> TopologyDescription:
    """Describe ``graph`` in Kafka Streams' format.

    Parameters
    ----------
    graph : GraphSnapshot
        The topology's nodes.

    Returns
    -------
    TopologyDescription
        Its ``str()`` is the text ``Topology.describe()`` prints in Kafka Streams.
    """
    desc = _expand(graph)
    size: dict[str, int] = {}

    def subtree(name: str) -> int:
        # Kafka Streams adds a node's size to every predecessor, transitively
        if name not in size:
            size[name] = 1 + sum(subtree(s) for s in desc[name].succs)
        return size[name]

    for name in desc:
        subtree(name)

    subs = []
    for i, group in enumerate(_components(desc)):
        nodes = sorted(group, key=lambda n: (-size[n.name], n.name))
        lines = []
        for n in nodes:
            if n.kind == "Source":
                lines.append(
                    f"Source: {n.name} (topics: [{', '.join(n.topics)}])\n"
                    f"      --> {_names(n.succs, size)}"
                )
            elif n.kind == "Sink":
                lines.append(
                    f"Sink: {n.name} (topic: {n.topics[0]})\n      <-- {_names(n.preds, size)}"
                )
            else:
                lines.append(
                    f"Processor: {n.name} (stores: [{', '.join(n.stores)}])\n"
                    f"      --> {_names(n.succs, size)}\n"
                    f"      <-- {_names(n.preds, size)}"
                )
        text = f"Sub-topology: {i}\n" + "".join(f"    {line}\n" for line in lines) + "\n"
        subs.append(SubtopologyDescription(i, tuple(n.name for n in nodes), text))
    return TopologyDescription(tuple(subs))
