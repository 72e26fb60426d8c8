"""Adding join nodes to the graph (shared by ``KStream`` and ``KTable``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamtable.dsl._graph import GraphBuilder
from streamtable.topology.nodes import JoinKind, JoinNode, JoinWindowSpec, RepartitionNode

_LABEL = {
    ("inner", False): "JOIN",
    ("left", False): "LEFTJOIN",
    ("outer", False): "OUTERJOIN",
}


def add_join(
    graph: GraphBuilder,
    kind: JoinKind,
    join_type: str,
    parents: tuple[str, str],
    *,
    joiner: Callable[[Any, Any], Any],
    prefix: str,
    name: str | None,
    key_selector: Callable[[Any, Any], Any] | None = None,
    windows: JoinWindowSpec | None = None,
) -> str:
    """Add a :class:`JoinNode` joining ``parents`` (left, right); return its name.

    The join's state store is named ``<join name>-store``.
    """
    label = _LABEL[(join_type, False)]
    node_name = graph.names.processor(prefix, label, name)
    store = graph.names.claim(f"{node_name}-store", kind="store")
    graph.add(
        JoinNode(
            node_name,
            parents,
            kind=kind,
            join_type=join_type,
            joiner=joiner,
            key_selector=key_selector,
            windows=windows,
            store_names=(store,),
        )
    )
    return node_name


def repartition_for_join(graph: GraphBuilder, parent: str, name: str | None) -> str:
    """Insert the repartition Kafka Streams adds before a join when the key was changed."""
    base = name or graph.names.processor("KSTREAM", "REPARTITION")
    rep = graph.names.claim(f"{base}-repartition")
    graph.add(RepartitionNode(rep, (parent,), topic_name=f"{base}-repartition"))
    return rep
