"""Which aggregations send their old aggregate with each update, for a table filter after them.

Kafka Streams' ``KTableFilter`` asks its parent for old values when the parent is materialized
(an aggregation always is), and then forwards nothing for a row that neither passes nor passed,
instead of a tombstone. streamtable follows that for a stream aggregation
(``KGroupedStream.count/reduce/aggregate``, unwindowed or in any kind of window) whose table is
filtered through a chain of ``filter``/``filter_not``/``map_values``: the aggregation emits the
old aggregate beside each update (per window: its aggregate before the micro-batch). Such an
unwindowed aggregation runs as a Python fold, also for ``count`` or a built-in reducer (Spark's
own aggregation does not give the value before a micro-batch), and the topology's fingerprint
says so. Windowed aggregations always run in Python kernels: old values change no state form
there. The final results of a windowed aggregation (``suppress(until_window_closes)``) carry
old values too: each window's aggregate before the last micro-batch that changed it, as Kafka
Streams' suppression buffer forwards the old value of a window's last buffered change.
So do the updates a ``suppress(until_time_limit)`` holds back after a stream aggregation: each
emitted update carries the old aggregate of the key's last buffered change
(``InMemoryTimeOrderedKeyValueChangeBuffer``, whose ``KTableSuppressProcessorSupplier`` asks
the aggregation for old values when a filter asks it).
"""

from __future__ import annotations

from streamtable.topology.nodes import (
    AggregateNode,
    GraphSnapshot,
    Node,
    SuppressNode,
    TableOpKind,
    TableOpNode,
)


def filtered_stream_aggregate(
    nodes: dict[str, Node], node: TableOpNode
) -> AggregateNode | SuppressNode | None:
    """The aggregation, or the suppression of an aggregation (final results of windows, or
    ``until_time_limit``), under the chain of ``filter``/``map_values`` that ends at
    ``node``, when the chain holds a ``filter`` and that parent sends old values; else ``None``.
    """
    has_filter = False
    parent: Node = node
    while isinstance(parent, TableOpNode) and parent.kind is not TableOpKind.GROUP_BY:
        has_filter = has_filter or parent.kind is TableOpKind.FILTER
        parent = nodes[parent.parents[0]]
    if not has_filter:
        return None
    if _sends_old_values(parent):
        assert isinstance(parent, AggregateNode)
        return parent
    if isinstance(parent, SuppressNode) and _suppression_sends_old_values(nodes, parent):
        return parent
    return None


def _suppression_sends_old_values(nodes: dict[str, Node], node: SuppressNode) -> bool:
    """Whether ``node`` suppresses a stream aggregation's updates with old values: either
    ``until_time_limit`` (any aggregation, see :func:`_holds_back_updates`) or
    ``until_window_closes`` of a windowed aggregation (``WindowAggregateSpec.with_old``), as
    Kafka Streams' suppression forwards the old value of a key's last buffered change.
    """
    parent = nodes[node.parents[0]]
    if _holds_back_updates(node):
        return _sends_old_values(parent)
    return node.suppress is not None and _sends_old_values(parent)


def _holds_back_updates(node: Node) -> bool:
    """Whether ``node`` is a ``suppress(until_time_limit)``."""
    return (
        isinstance(node, SuppressNode)
        and node.suppress is not None
        and not node.suppress.until_window_closes
    )


def table_filtered(graph: GraphSnapshot, node: AggregateNode) -> bool:
    """Whether a ``filter`` reads ``node``'s table through ``filter``/``map_values`` only
    (after, at most, a ``suppress(until_time_limit)`` of the table itself), so that ``node``
    emits old aggregates (see the module doc).

    >>> from streamtable import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> counts = b.stream("clicks").group_by_key().count()
    >>> counts.map_values(lambda n: n * 2).filter(lambda k, n: n > 4).to_stream().to("busy")
    >>> graph = b.build().graph
    >>> [table_filtered(graph, n) for n in graph.of_type(AggregateNode)]
    [True]
    """
    if not _sends_old_values(node):
        return False
    todo = list(graph.children[node.name])
    todo += [c for s in todo if _holds_back_updates(graph.by_name[s]) for c in graph.children[s]]
    while todo:
        child = graph.by_name[todo.pop()]
        if not isinstance(child, TableOpNode) or child.kind is TableOpKind.GROUP_BY:
            continue
        if child.kind is TableOpKind.FILTER:
            return True
        todo.extend(graph.children[child.name])
    return False


def folds_in_python(graph: GraphSnapshot, node: AggregateNode) -> bool:
    """Whether ``node``, an unwindowed aggregation, must run as a Python fold to send old
    aggregates (a ``count`` or built-in reducer otherwise runs as Spark's aggregation).
    """
    return node.windows is None and table_filtered(graph, node)


def _sends_old_values(node: Node) -> bool:
    return isinstance(node, AggregateNode) and node.aggregation is not None
