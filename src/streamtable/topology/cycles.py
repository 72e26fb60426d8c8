"""Refusing topologies whose records would go round in circles through their own topics."""

from __future__ import annotations

from streamtable.errors import TopologyError
from streamtable.topology.nodes import GraphSnapshot, SinkNode, SourceNode, TableSourceNode

__all__ = ["check_topic_cycles"]


def check_topic_cycles(graph: GraphSnapshot) -> None:
    """Raise when a record written by a sink can come back to that sink through the topics.

    A topology may read a topic it writes (``to("t")`` and ``stream("t")``: the records go
    through Kafka, as with Kafka Streams' removed ``through()``). When the path from that
    source leads back to a sink of the same topic, every record is processed again and again
    without end. Kafka Streams builds such a topology and loops; streamtable refuses it.

    Raises
    ------
    TopologyError
        Naming the topic, the sink writing it and the source reading it, and what to change.

    Examples
    --------
    >>> from streamtable import Serdes, StreamsBuilder
    >>> b = StreamsBuilder()
    >>> s = b.stream("a", key_serde=Serdes.string(), value_serde=Serdes.string())
    >>> s.to("b")
    >>> b.stream("b", key_serde=Serdes.string(), value_serde=Serdes.string()).to("a")
    >>> b.build()
    Traceback (most recent call last):
        ...
    streamtable.errors.TopologyError: Topic 'a' is read by source 'KSTREAM-SOURCE-0000000000' ...
    """
    readers: dict[str, list[str]] = {}
    for node in graph.nodes:
        if isinstance(node, SourceNode):
            for t in node.topics:
                readers.setdefault(t, []).append(node.name)
        elif isinstance(node, TableSourceNode):
            readers.setdefault(node.topic, []).append(node.name)
    for node in graph.nodes:
        if not isinstance(node, SourceNode | TableSourceNode):
            continue
        topics = node.topics if isinstance(node, SourceNode) else (node.topic,)
        # every node reachable from this source, through the graph and through written topics
        seen: set[str] = set()
        todo = [node.name]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            current = graph.by_name[n]
            if isinstance(current, SinkNode):
                if current.topic in topics:
                    raise TopologyError(
                        f"Topic {current.topic!r} is read by source {node.name!r} and written "
                        f"again by sink {current.name!r} downstream of it: every record would go "
                        "round through the topic forever. Write the result to another topic. "
                        "(Kafka Streams builds such a topology and loops; streamtable refuses "
                        "it.)"
                    )
                todo.extend(readers.get(current.topic, []))
            todo.extend(graph.children[n])
