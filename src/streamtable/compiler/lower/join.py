"""Lowering of ``JoinNode``: every join is one paged operator over both inputs (tagged by
side), so ordering across the two topics is decided by timestamps, not by read order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from streamtable.compiler.changelog import logged
from streamtable.compiler.codecs import Codec, result_codec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.fk_join import lower_fk_join
from streamtable.compiler.lower.paged import frame_columns_only, run_paged
from streamtable.compiler.lower.record_ops import convert, validated
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.paged.join_kernels import (
    StreamStreamJoinKernel,
    StreamTableJoinKernel,
    TableTableJoinKernel,
)
from streamtable.compiler.paged.stages import LOOKUP_DDL, LookupKeyStage
from streamtable.compiler.paged.stores import JoinTableEntries
from streamtable.errors import TopologyError
from streamtable.topology.nodes import (
    AggregateNode,
    JoinKind,
    JoinNode,
    MergeNode,
    Node,
    RecordOpNode,
    SourceNode,
    TableOpKind,
    TableOpNode,
    TableSourceNode,
)

if TYPE_CHECKING:
    from streamtable.compiler.plan import Lowerer


def lower_join(lowerer: Lowerer, node: JoinNode, want_value: Codec | None = None) -> Frame:
    """Compile ``node``; see :mod:`streamtable.compiler.paged.join_kernels` for semantics.

    The results are pickled, or in the encoding ``want_value`` names when it is a serde's (a
    sink's wish: the kernel serializes them, and the sink needs no Python stage).

    Raises
    ------
    TopologyError
        If co-partitioned inputs are read from topics with different partition counts
        (Kafka Streams refuses such a topology too).
    """
    if node.kind is JoinKind.TABLE_TABLE_FK:
        return lower_fk_join(lowerer, node, want_value)
    ctx = lowerer.ctx
    out_codec = result_codec(want_value)
    if node.kind is not JoinKind.STREAM_GLOBAL_TABLE:
        check_copartitioned(lowerer, node)
    left = _logged_table(lowerer, node.parents[0], validated(ctx, lowerer.lower(node.parents[0])))
    right = _logged_table(lowerer, node.parents[1], validated(ctx, lowerer.lower(node.parents[1])))
    assert node.joiner is not None
    if node.kind is JoinKind.TABLE_TABLE:
        right = convert(ctx, right, left.key_codec, None)
        kernel = TableTableJoinKernel(*_kernel_args(node, left, right), out_codec=out_codec)
        df = frame_columns_only(run_paged(ctx, [left, right], kernel))
        return Frame(df, left.key_codec, out_codec, stateful=True)

    if node.kind is JoinKind.STREAM_STREAM:
        # KIP-962 (Kafka Streams 3.7+): a side whose non-matches a left or outer join emits
        # joins a null-key record that has a value with null at once (the kernel, no group key)
        null_key = F.col("key").isNull() & F.col("value").isNotNull()
        outer = node.join_type == "outer"
        left = _without_null_records(
            ctx, left, keep=null_key if outer or node.join_type == "left" else None
        )
        right = _without_null_records(
            ctx, convert(ctx, right, left.key_codec, None), keep=null_key if outer else None
        )
        w = node.windows
        assert w is not None
        kernel = StreamStreamJoinKernel(*_kernel_args(node, left, right), w, out_codec=out_codec)
        # no late drops: KStreamKStreamJoin joins a late record with what its stores hold
        df = run_paged(
            ctx, [left, right], kernel, watermark_delay_ms=w.before_ms + w.after_ms + w.grace_ms
        )
        return Frame(frame_columns_only(df), left.key_codec, out_codec, stateful=True)

    # A GlobalKTable join never looks at the record's own key: only a null lookup key (or
    # value) drops a record (Kafka Streams' KStreamKTableJoinProcessor). KIP-962 (Kafka
    # Streams 3.7+): a left join joins a null-key record that has a value with null instead
    # of dropping it; such records reach the kernel without a group key (see KernelPack).
    null_key = F.col("key").isNull() & F.col("value").isNotNull()
    keep_null_key = node.kind is JoinKind.STREAM_GLOBAL_TABLE or node.join_type == "left"
    left = _without_null_records(ctx, left, keep=null_key if keep_null_key else None)
    history = _history_ms(lowerer, node.parents[1])
    if node.kind is JoinKind.STREAM_GLOBAL_TABLE:
        assert node.key_selector is not None
        stage = LookupKeyStage(
            node.key_selector, node.name, left.key_codec, left.value_codec, right.key_codec
        )
        looked_up = left.df.mapInArrow(stage, LOOKUP_DDL)
        no_lookup = F.col("group_key").isNull()
        if node.join_type == "left":
            no_lookup = no_lookup & F.col("key").isNotNull()
        looked_up = count_and_drop(ctx, looked_up, {"null_lookup_key": no_lookup})
        left = left.with_(df=looked_up)
    else:
        left = convert(ctx, left, right.key_codec, None)
    kernel = StreamTableJoinKernel(
        *_kernel_args(node, left, right),
        history,
        as_of=node.kind is JoinKind.STREAM_TABLE,
        out_codec=out_codec,
    )
    # table updates older than the history retention (a versioned store's grace period)
    expired = ("expired",) if history is not None and kernel.as_of else ()
    df = frame_columns_only(run_paged(ctx, [left, right], kernel, drop_reasons=expired))
    table = lowerer.nodes[node.parents[1]]
    if isinstance(table, TableSourceNode):  # the join holds the table's contents
        decode = JoinTableEntries(right.value_codec, versioned=kernel.as_of)
        ctx.register_store(table.store_name, "key_value", right.key_codec, decode)
    return Frame(df, left.key_codec, out_codec, stateful=True)


def _kernel_args(node: JoinNode, left: Frame, right: Frame) -> tuple[Any, ...]:
    """What every join kernel takes first: name, join type, joiner and the sides' codecs."""
    return node.name, node.join_type, node.joiner, left.value_codec, right.value_codec


def _logged_table(lowerer: Lowerer, name: str, upserts: Frame) -> Frame:
    """A queryable table read from a topic and held by a join: its upserts also go to the
    store's changelog (:mod:`..changelog`); other inputs are returned as they are.
    """
    table = lowerer.nodes[name]
    if not isinstance(table, TableSourceNode) or not table.queryable:
        return upserts
    return logged(lowerer.ctx, upserts, table.name, table.store_name, table.value_serde)


def _without_null_records(ctx: CompileContext, stream: Frame, keep: Column | None = None) -> Frame:
    """Stream records with a null key or value take no part in a join (dropped, counted),
    except those matching ``keep``.
    """
    null_key = F.col("key").isNull()
    if keep is not None:
        null_key = null_key & ~keep
    checks = {"null_key": null_key, "null_value": F.col("value").isNull()}
    return stream.with_(df=count_and_drop(ctx, stream.df, checks))


def _history_ms(lowerer: Lowerer, name: str) -> int | None:
    node = lowerer.nodes[name]
    while isinstance(node, TableOpNode):
        node = lowerer.nodes[node.parents[0]]
    return node.history_retention_ms if isinstance(node, TableSourceNode) else None


def copartition_topics(nodes: dict[str, Node], name: str) -> set[str] | None:
    """The source topics whose partitioning ``name``'s records still have, or ``None`` when
    they were redistributed (repartition, aggregation, key change) on the way.
    """
    node = nodes[name]
    if isinstance(node, SourceNode):
        return set(node.topics)
    if isinstance(node, TableSourceNode):
        return {node.topic}
    if isinstance(node, RecordOpNode) and node.changes_key:
        return None
    if isinstance(node, TableOpNode) and node.kind is TableOpKind.GROUP_BY:
        return None
    if isinstance(node, RecordOpNode | TableOpNode | MergeNode):
        out: set[str] = set()
        for p in node.parents:
            topics = copartition_topics(nodes, p)
            if topics is None:
                return None
            out |= topics
        return out
    if isinstance(node, AggregateNode | JoinNode):
        return None
    return None


def check_copartitioned(lowerer: Lowerer, node: JoinNode) -> None:
    """Kafka Streams' co-partitioning check: both inputs' topics must have equal partition
    counts (it cannot check the partitioners; murmur2 of the key bytes is assumed).
    """
    ctx: CompileContext = lowerer.ctx
    sides = [copartition_topics(lowerer.nodes, p) for p in node.parents]
    if any(s is None for s in sides):
        return
    topics = sorted(set().union(*sides))  # type: ignore[arg-type]
    counts = {t: ctx.topic_partitions.get(t) for t in topics}
    if len({c for c in counts.values() if c is not None}) > 1:
        listed = ", ".join(f"{t} ({c} partitions)" for t, c in counts.items())
        raise TopologyError(
            f"Join {node.name!r} needs co-partitioned inputs, but its topics have different "
            f"partition counts: {listed}. Kafka Streams refuses this topology too. Give the "
            "topics the same number of partitions, or repartition one side first "
            "(KStream.repartition(num_partitions=n) with n the other side's partition count, "
            "or to_stream().repartition() for a table)."
        )
