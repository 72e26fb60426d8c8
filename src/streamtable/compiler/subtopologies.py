"""Cutting a topology into sub-topologies connected by internal repartition topics.

Kafka Streams splits a topology wherever records must move to other partitions before a
stateful operator, writing them to ``<application.id>-<name>-repartition`` and reading them
back in the next sub-topology. On Spark most such moves are a shuffle inside one streaming
query, which gives the same results more cheaply. A query cannot always hold the whole
chain, though:

- a stream aggregation reading the output of another stateful operator (an aggregation, a
  join, a suppression): Spark refuses a second aggregation after the first in update mode,
  and the second one must see the first one's *records* (with their timestamps and in
  their partitions' order) to track stream time as Kafka Streams does;
- a windowed aggregation after ``repartition(num_partitions=n)``: stream time is tracked per
  input partition, and a shuffle keeps neither the partitions nor their order;
- a ``KStream.process`` node reading another stateful operator (it tracks stream time by
  source partition too, and Spark cannot chain it in update mode either), or reading an
  explicit ``repartition()``: a processor's tasks are its input's partitions, and a
  shuffle would leave the records in the partitions they were read from.

There, and only there, the compiler cuts as Kafka Streams does: the upstream part becomes its
own Spark query writing the repartition topic (records keep their timestamps, keys placed by
murmur2 like Java's default partitioner, null keys dropped and counted as Kafka Streams'
repartition filter drops them, unless a join downstream joins them: :func:`keeps_null_keys`),
and the downstream part reads that topic as a source from the earliest offset. Every other
repartition stays a shuffle.

The cut is made on the graph (:func:`cut_topology`): the repartition node is replaced by a
source of the internal topic, and a sink of that topic is added below the node feeding it.
Lowering then compiles each sink, internal or not, as one query (see :mod:`.plan`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from streamtable.errors import TopologyError
from streamtable.runtime.internal_topics import STREAMTABLE_INTERNAL_SUFFIX
from streamtable.topology.nodes import (
    AggregateNode,
    GraphSnapshot,
    JoinKind,
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

__all__ = ["Cut", "cut_topology", "read_topics", "repartition_partitions", "stateful_ancestor"]

#: Node types whose output comes from Spark state (a later stateful operator cannot share
#: their query in every case; see the module doc).
_STATEFUL = (AggregateNode, TableAggregateNode, JoinNode, SuppressNode, ProcessNode)


@dataclass(frozen=True)
class Cut:
    """One cut: records of ``upstream`` go through internal ``topic`` to ``source``.

    Attributes
    ----------
    source : str
        The node replaced by a source of ``topic`` (the repartition node), downstream nodes
        reading it under this name; or, where Kafka Streams has no repartition, a new source
        node feeding ``consumer`` only.
    upstream : str
        The node whose records are written to ``topic``.
    sink : str
        The name of the added sink node (its query's name and checkpoint folder).
    topic : str
        The internal topic, ``<application.id>-<name>-repartition``.
    num_partitions : int or None
        Partitions asked for by ``repartition(num_partitions=...)``; None: Kafka Streams'
        choice, the most partitions of the upstream sub-topology's source topics
        (:func:`repartition_partitions`).
    reason : str
        Why the query is cut here (for logs and errors).
    """

    source: str
    upstream: str
    sink: str
    topic: str
    num_partitions: int | None
    reason: str
    #: set when ``source`` is a new node: the one node whose input (``upstream``) now comes
    #: from ``source``; ``upstream`` itself stays in the graph for its other consumers
    consumer: str | None = None


def stateful_ancestor(graph: GraphSnapshot, name: str, sources: set[str]) -> Node | None:
    """The nearest node above ``name`` (``name`` included) whose output comes from state.

    The walk stops at sources and at nodes in ``sources`` (already cut: read from a topic).
    """
    seen: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        if n in seen or n in sources:
            continue
        seen.add(n)
        node = graph.by_name[n]
        if isinstance(node, _STATEFUL):
            return node
        if isinstance(node, SourceNode | TableSourceNode):
            continue
        todo.extend(node.parents)
    return None


def _cut_for(
    graph: GraphSnapshot, node: Node, application_id: str, sources: set[str]
) -> Cut | None:
    """The cut ``node`` needs, if any (see the module doc)."""
    if isinstance(node, RepartitionNode):
        if node.num_partitions is None:
            return None
        return Cut(
            node.name,
            node.parents[0],
            f"{node.name}-sink",
            f"{application_id}-{node.topic_name}",
            node.num_partitions,
            f"repartition(num_partitions={node.num_partitions}) asks for a topic",
        )
    if not isinstance(node, AggregateNode | ProcessNode):
        return None
    parent = graph.by_name[node.parents[0]]
    if parent.name in sources:
        return None
    if isinstance(parent, RepartitionNode):
        before = stateful_ancestor(graph, parent.parents[0], sources)
        if before is not None:
            why = f"it reads the output of stateful operator {before.name!r}"
        elif isinstance(node, ProcessNode):
            # a processor has no shuffle of its own: its tasks are its input's partitions,
            # which only a topic redistributes by the new key
            why = "process() after repartition() runs in the repartition topic's tasks"
        else:
            return None
        return Cut(
            parent.name,
            parent.parents[0],
            f"{parent.name}-sink",
            f"{application_id}-{parent.topic_name}",
            None,
            why,
        )
    before = stateful_ancestor(graph, parent.name, sources)
    if before is None:
        return None
    # Kafka Streams keeps such an aggregation in the same sub-topology (the key did not
    # change); Spark cannot chain it, so the records go through a topic of streamtable's own
    return Cut(
        f"{node.name}-input-source",
        parent.name,
        f"{node.name}-input-sink",
        f"{application_id}-{node.name}-input{STREAMTABLE_INTERNAL_SUFFIX}",
        None,
        f"it reads the output of stateful operator {before.name!r}",
        consumer=node.name,
    )


def cut_topology(
    graph: GraphSnapshot,
    application_id: str,
    *,
    default_key_serde: object = None,
    default_value_serde: object = None,
) -> tuple[GraphSnapshot, list[Cut]]:
    """Cut ``graph`` where one Spark query cannot hold the chain (see the module doc).

    Parameters
    ----------
    graph : GraphSnapshot
        The topology's nodes.
    application_id : str
        Prefix of the internal topics.
    default_key_serde, default_value_serde : Serde or None
        ``default.key.serde`` / ``default.value.serde``, for repartition topics whose
        grouping names no serde (Kafka Streams' ``Grouped`` serdes, else the defaults).

    Returns
    -------
    (GraphSnapshot, list of Cut)
        The graph with each cut's node replaced by a source of its topic and a sink of that
        topic added (``SinkNode.internal``); the cuts, upstream first.

    Raises
    ------
    TopologyError
        If a repartition topic needs a serde nobody gave (the message names the operator and
        the ``group_by``/``group_by_key``/``repartition`` argument to pass), or its name is
        a source or sink topic of the topology.
    """
    nodes = {n.name: n for n in graph.nodes}
    order = [n.name for n in graph.nodes]
    cuts: list[Cut] = []
    sources: set[str] = set()
    for original in graph.nodes:
        current = GraphSnapshot(tuple(nodes[n] for n in order))
        cut = _cut_for(current, original, application_id, sources)
        if cut is None:
            continue
        key_serde, value_serde = _serdes(
            original, nodes.get(cut.source, original), default_key_serde, default_value_serde, cut
        )
        if cut.consumer is not None:  # a new source, read by the consumer instead of upstream
            consumer = nodes[cut.consumer]
            parents = tuple(cut.source if p == cut.upstream else p for p in consumer.parents)
            nodes[cut.consumer] = dataclasses.replace(consumer, parents=parents)
            order.insert(order.index(cut.consumer), cut.source)
        nodes[cut.source] = SourceNode(
            cut.source,
            (),
            topics=(cut.topic,),
            key_serde=key_serde,  # type: ignore[arg-type]
            value_serde=value_serde,  # type: ignore[arg-type]
            auto_offset_reset="earliest",
            internal=True,
        )
        nodes[cut.sink] = SinkNode(
            cut.sink,
            (cut.upstream,),
            topic=cut.topic,
            key_serde=key_serde,  # type: ignore[arg-type]
            value_serde=value_serde,  # type: ignore[arg-type]
            internal=True,
        )
        order.insert(order.index(cut.source), cut.sink)
        sources.add(cut.source)
        cuts.append(cut)
    user_topics = {t for n in graph.of_type(SourceNode) for t in n.topics}  # type: ignore[attr-defined]
    user_topics |= {n.topic for n in graph.of_type(SinkNode)}  # type: ignore[attr-defined]
    user_topics |= {n.topic for n in graph.of_type(TableSourceNode)}  # type: ignore[attr-defined]
    for cut in cuts:
        if cut.topic in user_topics:
            raise TopologyError(
                f"Repartition topic {cut.topic!r} (before {cut.source!r}) is also a source or "
                "sink topic of the topology. Kafka Streams names repartition topics "
                "<application.id>-<name>-repartition too, but does not check this (both "
                "would share the topic): choose another name= for the grouping or "
                "repartition, or another application.id."
            )
    if not cuts:
        return graph, []
    return GraphSnapshot(tuple(nodes[n] for n in order)), cuts


def _serdes(
    consumer: Node,
    rep: Node,
    default_key: object,
    default_value: object,
    cut: Cut,
) -> tuple[object, object]:
    """The repartition topic's serdes: the repartition's or grouping's, else the defaults
    (Kafka Streams' ``Repartitioned``/``Grouped`` serdes, else ``default.*.serde``).
    """
    given = [None, None]
    for n in (rep, consumer):
        if isinstance(n, RepartitionNode | AggregateNode):
            given = [given[0] or n.key_serde, given[1] or n.value_serde]  # type: ignore[list-item]
    if isinstance(consumer, AggregateNode):
        what_op = f"Aggregation {consumer.name!r} (store {consumer.store_name!r})"
        where = "group_by()/group_by_key() (Kafka Streams' Grouped.with)"
    elif isinstance(consumer, ProcessNode):
        what_op = f"Processor {consumer.name!r}"
        where = "a repartition() before process() (Kafka Streams' Repartitioned.with)"
    else:
        what_op = f"Repartition {consumer.name!r}"
        where = "repartition() (Kafka Streams' Repartitioned.with)"
    out = []
    for what, serde in (
        ("key", given[0] or default_key),
        ("value", given[1] or default_value),
    ):
        if serde is None:
            raise TopologyError(
                f"{what_op} starts a sub-topology because {cut.reason}: its input goes "
                f"through the repartition topic {cut.topic!r}, which needs a {what} serde. "
                f"Pass {what}_serde= to {where}, or set 'default.{what}.serde' in the config "
                f"(Kafka Streams fails too: ConfigException 'Please specify a {what} serde "
                "...')."
            )
        out.append(serde)
    return out[0], out[1]


def repartition_partitions(
    graph: GraphSnapshot, cuts: list[Cut], topic_partitions: dict[str, int]
) -> dict[str, int]:
    """The partition count of each cut's topic, as Kafka Streams chooses it.

    ``repartition(num_partitions=n)`` gives ``n``; otherwise the most partitions among the
    topics the upstream sub-topology reads (internal ones included, upstream first). Kafka
    Streams' ``RepartitionTopics`` does the same.

    Parameters
    ----------
    graph : GraphSnapshot
        The cut graph (:func:`cut_topology`).
    cuts : list of Cut
        Upstream first.
    topic_partitions : dict
        Partition counts of the user topics.

    Returns
    -------
    dict
        ``{internal topic: partitions}``.
    """
    known = dict(topic_partitions)
    out: dict[str, int] = {}
    for cut in cuts:
        if cut.num_partitions is not None:
            n = cut.num_partitions
        else:
            n = max(
                (known.get(t, 1) for t in read_topics(graph, cut.upstream)),
                default=1,
            )
        known[cut.topic] = out[cut.topic] = n
    return out


def read_topics(graph: GraphSnapshot, name: str) -> list[str]:
    """The topics read by the sources above ``name``: those whose partitions make its
    sub-topology's tasks, so not a global table's (Kafka Streams reads those in its global
    topology, outside every task).
    """
    topics: list[str] = []
    seen: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        node = graph.by_name[n]
        if isinstance(node, SourceNode):
            topics.extend(node.topics)
        elif isinstance(node, TableSourceNode) and not node.is_global:
            topics.append(node.topic)
        todo.extend(node.parents)
    return topics


#: Joins looking a table up for each stream record (attached to the stream's node alone).
_TABLE_LOOKUPS = (JoinKind.STREAM_TABLE, JoinKind.STREAM_GLOBAL_TABLE)


def keeps_null_keys(graph: GraphSnapshot, name: str) -> bool:
    """Whether a repartition feeding node ``name`` keeps records with a null key: a join that
    joins such records with ``None`` is downstream (a stream-table or GlobalKTable left join,
    a stream-stream left or outer join; KIP-962). Else Kafka Streams' repartition filter
    drops them (``InternalStreamsBuilder``'s ``NodesWithRelaxedNullKeyJoinDownstream``).

    The walk goes on through the topics of cut repartitions (their readers), as Kafka
    Streams' graph has no cut; a stream-table join is reached only from its stream side, as
    Kafka Streams attaches it to the stream's node alone.
    """
    stack: list[tuple[str, str | None]] = [(name, None)]
    seen: set[str] = set()
    while stack:
        current, came_from = stack.pop()
        node = graph.by_name[current]
        if isinstance(node, JoinNode) and node.kind in _TABLE_LOOKUPS:
            if came_from != node.parents[0]:
                continue  # from the table side: not downstream in Kafka Streams' graph
            if node.join_type == "left":
                return True
        if isinstance(node, JoinNode) and node.kind is JoinKind.STREAM_STREAM:
            if node.join_type in ("left", "outer"):
                return True
        if current in seen:
            continue
        seen.add(current)
        nxt = list(graph.children.get(current, ()))
        if isinstance(node, SinkNode) and node.internal:
            nxt += [
                n.name
                for n in graph.of_type(SourceNode)
                if n.internal and n.topics == (node.topic,)
            ]
        stack.extend((child, current) for child in nxt)
    return False
