r"""``Topology.describe()``: the topology as text, exactly as Kafka Streams 4.x prints it.

Kafka Streams' ``TopologyDescription`` lists the *processors* its DSL builds, which are more
than streamtable's core nodes: a repartition is a null-key filter, a sink and a source; a
stream-stream join is two windowed processors, the two join sides and a merge; a table-table
join its two sides and a merge; a foreign-key join thirteen nodes around two internal topics.
This module first writes those processors as ``InternalStreamsBuilder`` writes them
(:func:`_write`: same names, same order, same predecessors, same state stores, a source table's
store only where Kafka Streams materializes it), then describes them as
``InternalTopologyBuilder#describe`` does (:func:`describe`):

- sub-topologies are the connected groups of processors (processors sharing a store are
  connected), numbered in the order their first processor was written; a global table's group
  is printed as a "global store";
- inside a sub-topology, nodes are listed by the number of paths through the nodes below them
  (largest first), then by name;
- each node's ``-->`` successors and ``<--`` predecessors are tree sets ordered by the same
  comparator, but evaluated while the graph is still being linked, so their order depends on
  the iteration order of Java's ``HashMap``/``HashSet``: :func:`_java_hash_order` and
  :class:`_JavaTreeSet` reproduce both (state stores and source topics are printed in
  ``HashSet`` order too).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from streamtable.topology.nodes import (
    AggregateNode,
    FileSinkNode,
    GraphSnapshot,
    JoinKind,
    JoinNode,
    Node,
    RepartitionNode,
    SinkNode,
    SourceNode,
    SuppressNode,
    TableAggregateNode,
    TableOpKind,
    TableOpNode,
    TableSourceNode,
)

__all__ = ["NodeDescription", "SubtopologyDescription", "TopologyDescription", "describe"]


@dataclass(frozen=True)
class NodeDescription:
    """One node of a sub-topology, as Kafka Streams' ``TopologyDescription.Node`` shows it.

    Every sequence is in the order ``describe()`` prints it.

    Attributes
    ----------
    name : str
        The processor name (``KSTREAM-SOURCE-0000000000`` or the name given with ``name=``).
    kind : {"Source", "Processor", "Sink"}
        A source reads ``topics``; a sink writes its one topic (``topics[0]``); a processor
        reads and writes ``stores``.
    topics : tuple of str
        A source's topics, a sink's topic; empty for a processor.
    stores : tuple of str
        The state stores a processor is connected to; empty for sources and sinks.
    predecessors, successors : tuple of str
        Names of the nodes of the same sub-topology that feed this node and that it feeds.
    """

    name: str
    kind: Literal["Source", "Processor", "Sink"]
    topics: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()
    predecessors: tuple[str, ...] = ()
    successors: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubtopologyDescription:
    """One sub-topology: its id, its nodes (in printed order) and its text.

    ``for_global_store`` marks the source and processor that fill a ``GlobalKTable``'s store
    (Kafka Streams' ``TopologyDescription.GlobalStore``), which generate no tasks. ``nodes``
    holds the same nodes as ``node_names``, with their topics, stores and neighbours.
    """

    id: int
    node_names: tuple[str, ...]
    text: str
    for_global_store: bool = False
    nodes: tuple[NodeDescription, ...] = ()


@dataclass(frozen=True)
class TopologyDescription:
    """Sub-topologies of a topology; ``str()`` gives Kafka Streams' text format."""

    subtopologies: tuple[SubtopologyDescription, ...]

    def __str__(self) -> str:
        out = "Topologies:\n "
        for sub in self.subtopologies:
            out += "  " + sub.text
        return out


# -- the processors Kafka Streams' DSL writes -------------------------------------------------


@dataclass
class _Processor:
    """A node factory of ``InternalTopologyBuilder``: what ``describe()`` reads of it."""

    name: str
    kind: str  # Source | Processor | Sink
    predecessors: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()  # a source's topics, a sink's topic
    stores: list[str] = field(default_factory=list)  # in the order they were connected
    global_source: bool = False


class _Writer:
    """The ``InternalTopologyBuilder`` calls of the DSL, in order (``nodeFactories``)."""

    def __init__(self) -> None:
        self.processors: dict[str, _Processor] = {}

    def source(self, name: str, topics: Sequence[str], *, global_source: bool = False) -> None:
        self.processors[name] = _Processor(
            name, "Source", topics=tuple(topics), global_source=global_source
        )

    def processor(self, name: str, *predecessors: str) -> None:
        self.processors[name] = _Processor(name, "Processor", predecessors=predecessors)

    def sink(self, name: str, topic: str, *predecessors: str) -> None:
        self.processors[name] = _Processor(name, "Sink", predecessors=predecessors, topics=(topic,))

    def connect(self, name: str, *stores: str) -> None:
        own = self.processors[name].stores
        own.extend(s for s in stores if s not in own)


class _Tables:
    """Which state stores a table's value getter reads, and which source tables Kafka Streams
    materializes (``KTableImpl.valueGetterSupplier`` / ``enableSendingOldValues(true)``).
    """

    def __init__(self, graph: GraphSnapshot) -> None:
        self._graph = graph
        self.materialized: set[str] = set()
        for node in graph.nodes:
            if isinstance(node, TableSourceNode) and (node.queryable or node.is_global):
                self.materialized.add(node.name)
            elif isinstance(node, JoinNode) and node.kind is JoinKind.STREAM_TABLE:
                self.getter_stores(node.parents[1])
            elif isinstance(node, JoinNode) and node.kind in _TABLE_JOINS:
                self.getter_stores(node.parents[0])
                self.getter_stores(node.parents[1])
            elif isinstance(node, SuppressNode) or (
                isinstance(node, TableOpNode) and node.kind is TableOpKind.GROUP_BY
            ):
                self._send_old_values(node.parents[0])

    def getter_stores(self, name: str) -> list[str]:
        """The stores read by a lookup in table ``name`` (materializing its source)."""
        node = self._graph.by_name[name]
        while isinstance(node, TableOpNode):  # unmaterialized: its parent's getter
            node = self._graph.by_name[node.parents[0]]
        name = node.name
        if isinstance(node, TableSourceNode):
            self.materialized.add(name)
            return [node.store_name]
        if isinstance(node, AggregateNode | TableAggregateNode):
            return [node.store_name]
        if isinstance(node, SuppressNode):
            return [*self.getter_stores(node.parents[0]), node.store_name]
        if isinstance(node, JoinNode) and node.kind is JoinKind.TABLE_TABLE:
            both = self.getter_stores(node.parents[0]) + self.getter_stores(node.parents[1])
            return _java_hash_order(dict.fromkeys(both), _copy_capacity(len(both)))
        if isinstance(node, JoinNode) and node.kind is JoinKind.TABLE_TABLE_FK:
            self.materialized.add(name)
            return [_result_store(node)]
        return []

    def _send_old_values(self, name: str) -> None:
        node = self._graph.by_name[name]
        while isinstance(node, TableOpNode | SuppressNode):  # they ask their parent
            node = self._graph.by_name[node.parents[0]]
        if isinstance(node, TableSourceNode | JoinNode):
            self.getter_stores(node.name)


_TABLE_JOINS = (JoinKind.TABLE_TABLE, JoinKind.TABLE_TABLE_FK)


def _result_store(node: JoinNode) -> str:
    return node.kafka_names.get("result_store", f"{node.name}-result-store")


def _write_order(graph: GraphSnapshot) -> list[Node]:
    """The order in which ``InternalStreamsBuilder.buildAndOptimizeTopology`` writes the graph.

    Graph nodes are taken by build priority, their creation order, each once all its graph
    parents are written (a stream-table join's only graph parent is its stream). A node added to
    Kafka Streams' graph again later (a named grouping's repartition, reused by another
    aggregation) takes that later priority, which also delays the nodes below it.
    """
    index = {n.name: float(i) for i, n in enumerate(graph.nodes)}
    for n in graph.nodes:
        after = n.kafka_names.get("written_after")
        if after in index:
            index[n.name] = index[after] + 0.5
    parents = {n.name: _graph_parents(n) for n in graph.nodes}
    children: dict[str, list[str]] = {}
    for n in graph.nodes:
        for p in parents[n.name]:
            children.setdefault(p, []).append(n.name)
    queue = [(index[n.name], n.name) for n in graph.nodes if not parents[n.name]]
    heapq.heapify(queue)
    written: dict[str, Node] = {}
    while queue:
        _, name = heapq.heappop(queue)
        if name in written or any(p not in written for p in parents[name]):
            continue
        written[name] = graph.by_name[name]
        for child in children.get(name, ()):
            heapq.heappush(queue, (index[child], child))
    return list(written.values())


def _graph_parents(node: Node) -> tuple[str, ...]:
    if isinstance(node, JoinNode) and node.kind in (
        JoinKind.STREAM_TABLE,
        JoinKind.STREAM_GLOBAL_TABLE,
    ):
        return node.parents[:1]
    return node.parents


def _write(graph: GraphSnapshot) -> _Writer:
    """The processors Kafka Streams writes for ``graph``, in its order (:func:`_write_order`),
    each graph node as its Kafka Streams counterpart's ``writeToTopology`` writes it.
    """
    tables = _Tables(graph)
    w = _Writer()
    out: dict[str, str] = {}  # core node -> the processor its records come out of
    for node in _write_order(graph):
        ins = [out.get(p, p) for p in node.parents]
        k = node.kafka_names
        if isinstance(node, SourceNode):
            w.source(node.name, node.topics)
        elif isinstance(node, TableSourceNode):
            w.source(node.source_name, (node.topic,), global_source=node.is_global)
            w.processor(node.name, node.source_name)
            if node.name in tables.materialized:
                w.connect(node.name, node.store_name)
        elif isinstance(node, RepartitionNode):
            # OptimizableRepartitionNode: null-key filter, sink, source; a KTable.group_by's
            # GroupedTableOperationRepartitionNode has no filter
            topic = node.topic_name
            upstream = ins[0]
            if "filter" in k or not k:
                upstream = k.get("filter", f"{topic}-filter")
                w.processor(upstream, ins[0])
            w.sink(k.get("sink", f"{topic}-sink"), topic, upstream)
            out[node.name] = k.get("source", f"{topic}-source")
            w.source(out[node.name], (topic,))
            continue
        elif isinstance(node, JoinNode):
            _write_join(w, tables, node, ins)
        elif isinstance(node, SinkNode):
            w.sink(node.name, node.topic, *ins)
        elif isinstance(node, FileSinkNode):
            w.sink(node.name, node.target, *ins)
        else:
            w.processor(node.name, *ins)
            w.connect(node.name, *node.stores)
        out[node.name] = node.name
    return w


def _write_join(w: _Writer, tables: _Tables, node: JoinNode, ins: list[str]) -> None:
    left, right = node.parents

    def kafka(role: str, suffix: str) -> str:
        # the DSL records every name; the default only serves hand-built graphs
        return node.kafka_names.get(role, f"{node.name}-{suffix}")

    if node.kind is JoinKind.STREAM_TABLE:  # StreamTableJoinNode: the table is no predecessor
        w.processor(node.name, ins[0])
        w.connect(node.name, *tables.getter_stores(right))
    elif node.kind is JoinKind.STREAM_GLOBAL_TABLE:
        w.processor(node.name, ins[0])
    elif node.kind is JoinKind.TABLE_TABLE:  # KTableKTableJoinNode
        this, other = kafka("this", "join-this"), kafka("other", "join-other")
        w.processor(this, ins[0])
        w.processor(other, ins[1])
        w.processor(node.name, this, other)
        w.connect(this, *tables.getter_stores(right))
        w.connect(other, *tables.getter_stores(left))
    elif node.kind is JoinKind.STREAM_STREAM:
        # two WindowedStreamProcessorNodes, then the StreamStreamJoinNode
        this_windowed = kafka("this_windowed", "this-windowed")
        other_windowed = kafka("other_windowed", "other-windowed")
        this, other = kafka("this", "this-join"), kafka("other", "other-join")
        this_store, other_store = (
            kafka("this_store", "this-store"),
            kafka("other_store", "other-store"),
        )
        w.processor(this_windowed, ins[0])
        w.processor(other_windowed, ins[1])
        w.processor(this, this_windowed)
        w.processor(other, other_windowed)
        w.processor(node.name, this, other)
        w.connect(this_windowed, this_store)
        w.connect(other, this_store)
        w.connect(other_windowed, other_store)
        w.connect(this, other_store)
        if "shared_store" in node.kafka_names:
            w.connect(this, node.kafka_names["shared_store"])
            w.connect(other, node.kafka_names["shared_store"])
    else:  # foreign key: KTableImpl.doJoinOnForeignKey, one graph node after the other
        registration_topic = kafka("registration_topic", "subscription-registration-topic")
        response_topic = kafka("response_topic", "subscription-response-topic")
        registration = kafka("registration", "subscription-registration-processor")
        registration_source = kafka("registration_source", "subscription-registration-source")
        receive = kafka("receive", "subscription-receive")
        join_foreign = kafka("join_foreign", "subscription-join-foreign")
        foreign_join = kafka("foreign_join", "foreign-join-subscription")
        response_source = kafka("response_source", "subscription-response-source")
        resolver = kafka("resolver", "subscription-response-resolver")
        w.processor(registration, ins[0])
        w.sink(
            kafka("registration_sink", "subscription-registration-sink"),
            registration_topic,
            registration,
        )
        w.source(registration_source, (registration_topic,))
        w.processor(receive, registration_source)
        w.connect(receive, *node.stores)
        w.processor(join_foreign, receive)
        w.connect(join_foreign, *tables.getter_stores(right))
        w.processor(foreign_join, ins[1])
        w.connect(foreign_join, *node.stores)
        w.sink(
            kafka("response_sink", "subscription-response-sink"),
            response_topic,
            join_foreign,
            foreign_join,
        )
        w.source(response_source, (response_topic,))
        w.processor(resolver, response_source)
        w.connect(resolver, *tables.getter_stores(left))
        w.processor(node.name, resolver)
        if node.name in tables.materialized:
            w.connect(node.name, _result_store(node))


# -- Kafka Streams' describe() ------------------------------------------------------------------


def describe(graph: GraphSnapshot) -> TopologyDescription:
    """Describe ``graph`` as Kafka Streams' ``Topology.describe()`` does.

    Parameters
    ----------
    graph : GraphSnapshot
        The topology's nodes.

    Returns
    -------
    TopologyDescription
        Its ``str()`` is the text ``Topology.describe()`` prints in Kafka Streams 4.x for the
        same DSL calls.
    """
    processors = _write(graph).processors
    subtopologies = []
    for i, group in enumerate(_node_groups(processors)):
        members = [processors[n] for n in group]
        if any(p.global_source for p in members):
            subtopologies.append(_describe_global_store(i, members))
        else:
            subtopologies.append(_describe_subtopology(i, members))
    return TopologyDescription(tuple(subtopologies))


def _node_groups(processors: dict[str, _Processor]) -> list[list[str]]:
    """``InternalTopologyBuilder.makeNodeGroups``: connected processors (through predecessors
    and shared stores), numbered in writing order; members in writing order.
    """
    root = {n: n for n in processors}

    def find(x: str) -> str:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    store_user: dict[str, str] = {}
    for p in processors.values():
        for pred in p.predecessors:
            root[find(pred)] = find(p.name)
        for store in p.stores:
            first = store_user.setdefault(store, p.name)
            root[find(first)] = find(p.name)
    groups: dict[str, list[str]] = {}
    for name in processors:
        groups.setdefault(find(name), []).append(name)
    return list(groups.values())


def _describe_global_store(id_: int, members: list[_Processor]) -> SubtopologyDescription:
    source = next(p for p in members if p.global_source)
    processor = next(p for p in members if p is not source)
    text = (
        f"Sub-topology: {id_} for global store (will not generate tasks)\n"
        f"    Source: {source.name} (topics: [{source.topics[0]}])\n"
        f"      --> {processor.name}\n"
        f"    Processor: {processor.name} (stores: [{processor.stores[0]}])\n"
        f"      --> none\n"
        f"      <-- {source.name}\n"
    )
    nodes = (
        NodeDescription(
            source.name, "Source", topics=source.topics[:1], successors=(processor.name,)
        ),
        NodeDescription(
            processor.name,
            "Processor",
            stores=tuple(processor.stores[:1]),
            predecessors=(source.name,),
        ),
    )
    return SubtopologyDescription(
        id_, (source.name, processor.name), text, for_global_store=True, nodes=nodes
    )


def _describe_subtopology(id_: int, members: list[_Processor]) -> SubtopologyDescription:
    """``InternalTopologyBuilder.describeSubtopology`` and ``SubtopologyDescription#toString``."""
    # the node group is a HashSet filled in writing order; nodesByName a HashMap filled from it
    names = _java_hash_order(_java_hash_order([p.name for p in members]))
    by_name = {p.name: p for p in members}
    size = dict.fromkeys(names, 1)
    preds = {n: _JavaTreeSet(size) for n in names}
    succs = {n: _JavaTreeSet(size) for n in names}

    def update_size(name: str, delta: int) -> None:
        # InternalTopologyBuilder.updateSize, without recursion: every path upwards
        todo = [name]
        while todo:
            n = todo.pop()
            size[n] += delta
            todo.extend(preds[n])

    for name in names:
        for pred in by_name[name].predecessors:
            preds[name].add(pred)
            succs[pred].add(name)
            update_size(pred, size[name])

    def listed(nodes: Iterable[str]) -> str:
        return ", ".join(nodes) or "none"

    ordered = sorted(names, key=lambda n: (-size[n], n))
    lines = []
    nodes = []
    for name in ordered:
        p = by_name[name]
        if p.kind == "Source":
            topics = _java_hash_order(p.topics, _copy_capacity(len(p.topics)))
            lines.append(
                f"Source: {name} (topics: [{', '.join(topics)}])\n      --> {listed(succs[name])}"
            )
            node = NodeDescription(name, "Source", topics=tuple(topics))
        elif p.kind == "Sink":
            lines.append(f"Sink: {name} (topic: {p.topics[0]})\n      <-- {listed(preds[name])}")
            node = NodeDescription(name, "Sink", topics=p.topics[:1])
        else:
            stores = _java_hash_order(_java_hash_order(p.stores), _copy_capacity(len(p.stores)))
            lines.append(
                f"Processor: {name} (stores: [{', '.join(stores)}])\n"
                f"      --> {listed(succs[name])}\n"
                f"      <-- {listed(preds[name])}"
            )
            node = NodeDescription(name, "Processor", stores=tuple(stores))
        nodes.append(replace(node, predecessors=tuple(preds[name]), successors=tuple(succs[name])))
    text = f"Sub-topology: {id_}\n" + "".join(f"    {line}\n" for line in lines) + "\n"
    return SubtopologyDescription(id_, tuple(ordered), text, nodes=tuple(nodes))


# -- Java collections' iteration orders ---------------------------------------------------------


def _java_string_hash(s: str) -> int:
    """``String.hashCode()`` as an unsigned 32-bit int (over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _copy_capacity(n: int) -> int:
    """The table size of ``new HashSet<>(collection of n)``."""
    wanted = max(int(n / 0.75) + 1, 16)
    capacity = 1
    while capacity < wanted:
        capacity *= 2
    return capacity


def _java_hash_order(keys: Iterable[str], capacity: int = 16) -> list[str]:
    """The iteration order of a ``java.util.HashMap``/``HashSet`` after ``keys`` were put in
    this order into an empty one of ``capacity`` buckets.

    Entries iterate by bucket (the spread hash modulo the final table size), then in insertion
    order (a resize keeps the relative order of a bucket's entries). The table doubles when it
    holds more than 3/4 of its size, or when a bucket of a table smaller than 64 gets a ninth
    entry (``treeifyBin``).

    >>> _java_hash_order(["b-topic", "a-topic", "c"])
    ['c', 'b-topic', 'a-topic']
    """
    entries: list[tuple[int, str]] = []
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            continue
        seen.add(key)
        h = _java_string_hash(key)
        spread = h ^ (h >> 16)
        chain = sum(1 for e, _ in entries if e & (capacity - 1) == spread & (capacity - 1))
        entries.append((spread, key))
        if chain >= 8 and capacity < 64:
            capacity *= 2
        if len(entries) > capacity * 3 // 4:
            capacity *= 2
    order = sorted(range(len(entries)), key=lambda i: (entries[i][0] & (capacity - 1), i))
    return [entries[i][1] for i in order]


class _JavaTreeSet:
    """A ``java.util.TreeSet`` (red-black tree) of node names with Kafka Streams'
    ``NodeComparator`` (larger sub-graph first, then name), whose sizes keep changing while
    nodes are inserted: each insertion compares with the sizes of that moment, so the order
    follows the tree's shape, which this reproduces (``TreeMap.put``, ``fixAfterInsertion``).
    """

    __slots__ = ("_root", "_size")

    def __init__(self, size: dict[str, int]) -> None:
        self._size = size
        self._root: _Entry | None = None

    def _compare(self, a: str, b: str) -> int:
        if a == b:
            return 0
        if self._size[a] != self._size[b]:
            return self._size[b] - self._size[a]
        return -1 if a < b else 1

    def add(self, key: str) -> None:
        t = self._root
        if t is None:
            self._root = _Entry(key, None)
            self._root.black = True
            return
        while True:
            parent = t
            cmp = self._compare(key, t.key)
            if cmp == 0:
                return
            t = t.left if cmp < 0 else t.right
            if t is None:
                break
        entry = _Entry(key, parent)
        if cmp < 0:
            parent.left = entry
        else:
            parent.right = entry
        self._fix_after_insertion(entry)

    def __iter__(self) -> Iterator[str]:
        stack: list[_Entry] = []
        node = self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield node.key
            node = node.right

    def _fix_after_insertion(self, x: _Entry | None) -> None:
        assert x is not None
        x.black = False
        while x is not None and x is not self._root and not _black(x.parent):
            parent = _parent(x)
            grand = _parent(parent)
            if parent is _left(grand):
                uncle = _right(grand)
                if not _black(uncle):
                    _set_black(parent, True)
                    _set_black(uncle, True)
                    _set_black(grand, False)
                    x = grand
                else:
                    if x is _right(parent):
                        x = parent
                        self._rotate_left(x)
                    _set_black(_parent(x), True)
                    _set_black(_parent(_parent(x)), False)
                    self._rotate_right(_parent(_parent(x)))
            else:
                uncle = _left(grand)
                if not _black(uncle):
                    _set_black(parent, True)
                    _set_black(uncle, True)
                    _set_black(grand, False)
                    x = grand
                else:
                    if x is _left(parent):
                        x = parent
                        self._rotate_right(x)
                    _set_black(_parent(x), True)
                    _set_black(_parent(_parent(x)), False)
                    self._rotate_left(_parent(_parent(x)))
        assert self._root is not None
        self._root.black = True

    def _rotate_left(self, p: _Entry | None) -> None:
        if p is None:
            return
        r = p.right
        assert r is not None
        p.right = r.left
        if r.left is not None:
            r.left.parent = p
        r.parent = p.parent
        if p.parent is None:
            self._root = r
        elif p.parent.left is p:
            p.parent.left = r
        else:
            p.parent.right = r
        r.left = p
        p.parent = r

    def _rotate_right(self, p: _Entry | None) -> None:
        if p is None:
            return
        lft = p.left
        assert lft is not None
        p.left = lft.right
        if lft.right is not None:
            lft.right.parent = p
        lft.parent = p.parent
        if p.parent is None:
            self._root = lft
        elif p.parent.right is p:
            p.parent.right = lft
        else:
            p.parent.left = lft
        lft.right = p
        p.parent = lft


class _Entry:
    __slots__ = ("black", "key", "left", "parent", "right")

    def __init__(self, key: str, parent: _Entry | None) -> None:
        self.key = key
        self.parent = parent
        self.left: _Entry | None = None
        self.right: _Entry | None = None
        self.black = True


def _black(e: _Entry | None) -> bool:
    return True if e is None else e.black


def _set_black(e: _Entry | None, black: bool) -> None:
    if e is not None:
        e.black = black


def _parent(e: _Entry | None) -> _Entry | None:
    return None if e is None else e.parent


def _left(e: _Entry | None) -> _Entry | None:
    return None if e is None else e.left


def _right(e: _Entry | None) -> _Entry | None:
    return None if e is None else e.right
