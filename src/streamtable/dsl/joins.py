"""Adding join nodes to the graph (shared by ``KStream`` and ``KTable``).

Names follow Kafka Streams: the join node carries the name of the processor whose output the
joined stream or table is (Kafka Streams' handle), and ``kafka_names`` the other processors and
stores Kafka Streams builds for the join, for ``describe()``. The counter advances as in
``KStreamImpl``, ``KStreamImplJoin`` and ``KTableImpl``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamtable.dsl._graph import GraphBuilder
from streamtable.topology.nodes import JoinKind, JoinNode, JoinWindowSpec, RepartitionNode


def add_join(
    graph: GraphBuilder,
    kind: JoinKind,
    join_type: str,
    parents: tuple[str, str],
    *,
    joiner: Callable[[Any, Any], Any],
    name: str | None,
    key_selector: Callable[[Any, Any], Any] | None = None,
    windows: JoinWindowSpec | None = None,
) -> str:
    """Add a :class:`JoinNode` joining ``parents`` (left, right); return its name.

    ``name`` is Kafka Streams' ``Joined.as`` (stream-table), ``Named.as`` (stream-GlobalKTable,
    table-table) or ``StreamJoined.as(name).withName(name)`` (stream-stream: it names the
    processors and the window stores). The join's own state store (the compiler's) is named
    ``<name>-store``, or ``<join node name>-store``.
    """
    names = graph.names
    kafka: dict[str, str] = {}
    if kind is JoinKind.STREAM_TABLE:
        label = "LEFTJOIN" if join_type == "left" else "JOIN"
        node_name = names.processor("KSTREAM", label, name)
    elif kind is JoinKind.STREAM_GLOBAL_TABLE:
        # Kafka Streams names every stream-GlobalKTable join KSTREAM-LEFTJOIN
        node_name = names.processor("KSTREAM", "LEFTJOIN", name)
    elif kind is JoinKind.STREAM_STREAM:
        node_name = _stream_stream_names(graph, join_type, name, kafka)
    else:
        node_name = names.processor("KTABLE", "MERGE", name)
        kafka["this"] = names.suffixed(name, "-join-this", "KTABLE", "JOINTHIS")
        kafka["other"] = names.suffixed(name, "-join-other", "KTABLE", "JOINOTHER")
    store = names.claim(f"{name if name is not None else node_name}-store", kind="store")
    graph.add(
        JoinNode(
            node_name,
            parents,
            kafka_names=kafka,
            kind=kind,
            join_type=join_type,
            joiner=joiner,
            key_selector=key_selector,
            windows=windows,
            store_names=(store,),
        )
    )
    return node_name


def _stream_stream_names(
    graph: GraphBuilder, join_type: str, name: str | None, kafka: dict[str, str]
) -> str:
    """Kafka Streams' ``KStreamImplJoin`` names: two windowed processors, the two join sides,
    their window stores (and the shared store of left/outer joins); returns the merge name.
    """
    names = graph.names
    left_outer = join_type in ("left", "outer")
    right_outer = join_type == "outer"
    kafka["this_windowed"] = names.suffixed(name, "-this-windowed", "KSTREAM", "WINDOWED")
    kafka["other_windowed"] = names.suffixed(name, "-other-windowed", "KSTREAM", "WINDOWED")
    this_generated = names.generated("KSTREAM", "OUTERTHIS" if right_outer else "JOINTHIS")
    other_generated = names.generated("KSTREAM", "OUTEROTHER" if left_outer else "JOINOTHER")
    this_suffix = "-outer-this-join" if right_outer else "-this-join"
    other_suffix = "-outer-other-join" if left_outer else "-other-join"
    kafka["this"] = names.claim(this_generated if name is None else name + this_suffix)
    kafka["other"] = names.claim(other_generated if name is None else name + other_suffix)
    # the window stores: StreamJoined.as(name), else the generated join names
    kafka["this_store"] = f"{kafka['this'] if name is not None else this_generated}-store"
    kafka["other_store"] = f"{kafka['other'] if name is not None else other_generated}-store"
    if left_outer:
        shared = "-outer-shared-join" if right_outer else "-left-shared-join"
        base = f"KSTREAM-OUTERSHARED-{this_generated[-10:]}" if name is None else name + shared
        kafka["shared_store"] = f"{base}-store"
    return names.suffixed(name, "-merge", "KSTREAM", "MERGE")


def add_foreign_key_join(
    graph: GraphBuilder,
    join_type: str,
    parents: tuple[str, str],
    *,
    joiner: Callable[[Any, Any], Any],
    foreign_key_extractor: Callable[[Any], Any],
    name: str | None,
) -> str:
    """Add a foreign-key :class:`JoinNode` (``KTable.join(..., foreign_key_extractor=)``).

    Kafka Streams' ``KTableImpl.doJoinOnForeignKey`` names (``TableJoined.as(name)``): the
    subscription topics, processors, sinks and sources, the subscription store (the node's
    store) and the result processor (the node's name).
    """
    names = graph.names
    fk = "FK-JOIN-SUBSCRIPTION"

    def part(suffix: str, label: str) -> str:
        return names.suffixed(name, suffix, "KTABLE", label)

    def topic(suffix: str, label: str) -> str:
        base = names.generated("KTABLE", label)
        return (base if name is None else name + suffix) + "-topic"

    kafka = {"registration_topic": topic("-subscription-registration", f"{fk}-REGISTRATION")}
    kafka["registration"] = part("-subscription-registration-processor", f"{fk}-REGISTRATION")
    kafka["registration_sink"] = part("-subscription-registration-sink", "SINK")
    kafka["registration_source"] = part("-subscription-registration-source", "SOURCE")
    store = part("-subscription-store", f"{fk}-STATE-STORE")
    kafka["receive"] = part("-subscription-receive", f"{fk}-PROCESSOR")
    kafka["join_foreign"] = part("-subscription-join-foreign", f"{fk}-PROCESSOR")
    kafka["foreign_join"] = part("-foreign-join-subscription", f"{fk}-PROCESSOR")
    kafka["response_topic"] = topic("-subscription-response", f"{fk}-RESPONSE")
    kafka["response_sink"] = part("-subscription-response-sink", "SINK")
    kafka["response_source"] = part("-subscription-response-source", "SOURCE")
    kafka["resolver"] = part("-subscription-response-resolver", f"{fk}-RESPONSE-RESOLVER-PROCESSOR")
    node_name = part("-result", "FK-JOIN-OUTPUT")
    kafka["result_store"] = names.store("KTABLE", "FK-JOIN-OUTPUT")
    graph.add(
        JoinNode(
            node_name,
            parents,
            kafka_names=kafka,
            kind=JoinKind.TABLE_TABLE_FK,
            join_type=join_type,
            joiner=joiner,
            foreign_key_extractor=foreign_key_extractor,
            store_names=(store,),
        )
    )
    return node_name


def repartition_for_join(graph: GraphBuilder, parent: str, prefix: str) -> str:
    """Insert the repartition Kafka Streams adds before a join when the key was changed.

    ``prefix``: the join's name (``-left``/``-right`` for stream-stream joins) or the name of
    the stream's last processor (``KStreamImpl.repartitionForJoin``).
    """
    last = graph.join_repartition.get(parent)
    if prefix == parent and last is not None:
        # an unnamed join of a stream already repartitioned for a join reuses the repartition
        # its last join added, named or not; Kafka Streams' name counter advances all the
        # same (KStreamImpl.repartitionForJoin keeps repartitionNode while name equals its own)
        graph.stream_repartition(prefix, reuse=True)
        return last
    topic, kafka_names = graph.stream_repartition(prefix)
    rep = graph.names.claim(topic)
    graph.add(RepartitionNode(rep, (parent,), kafka_names=kafka_names, topic_name=topic))
    graph.join_repartition[parent] = rep
    return rep
