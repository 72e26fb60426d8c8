"""Lowering of tables: ``TableSourceNode``, ``TableOpNode`` and ``TableAggregateNode``.

A table is compiled in one of two forms, chosen by its consumer:

- *upserts* (joins, ``to_stream``, sinks): the topic's records as they are — each one an
  upsert or a tombstone of its key. Joins keep the table state they need themselves, so no
  extra stateful stage runs.
- *changes* (``group_by`` aggregations, which need the value each update replaces): the
  table is materialized by a paged :class:`~streamtable.compiler.paged.table_kernels.
  TableSourceKernel`, which emits ``(key, new, old)`` per updated key and micro-batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from streamtable.compiler.changelog import logged
from streamtable.compiler.codecs import PickleCodec, SerdeCodec, codec_for
from streamtable.compiler.dead_letters import DeadLetterSpec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.paged import frame_columns_only, run_paged
from streamtable.compiler.lower.record_ops import (
    convert,
    dead_letter_spec,
    run_stage,
    validated,
)
from streamtable.compiler.lower.source import lower_source
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.paged.stages import (
    CHANGE_DDL,
    REGROUP_DDL,
    SKIPPING_CHANGE_DDL,
    RegroupStage,
    TableOpStage,
    apply_table_op,
)
from streamtable.compiler.paged.stores import KeyValueEntries
from streamtable.compiler.paged.table_kernels import TableAggregateKernel, TableSourceKernel
from streamtable.compiler.record_stage import StageOp
from streamtable.errors import TopologyError
from streamtable.topology.nodes import (
    Node,
    RecordOpKind,
    RepartitionNode,
    SourceNode,
    TableAggregateNode,
    TableOpKind,
    TableOpNode,
    TableSourceNode,
)

if TYPE_CHECKING:
    from streamtable.compiler.plan import Lowerer


def lower_table_upserts(ctx: CompileContext, node: TableSourceNode) -> Frame:
    """The table's topic as upserts, deserialized (validated) once; null keys are dropped
    and counted (Kafka Streams' ``KTableSource`` skips them). A global table's topic is read
    from its beginning whatever ``auto.offset.reset`` says, as Kafka Streams'
    ``GlobalStateManagerImpl`` restores a global table in full, and without
    ``streamtable.max.offsets.per.trigger``: the first micro-batch holds the whole table,
    applied before that batch's stream records look it up, as Kafka Streams bootstraps a
    global table before it processes any record.
    """
    source = SourceNode(
        node.name,
        (),
        topics=(node.topic,),
        key_serde=node.key_serde,
        value_serde=node.value_serde,
        auto_offset_reset="earliest" if node.is_global else None,
    )
    frame = validated(ctx, lower_source(ctx, source, rate_limited=not node.is_global))
    df = count_and_drop(ctx, frame.df, {"null_key": F.col("key").isNull()})
    return frame.with_(df=df)


class _UpsertTableOp:
    """A table operation on an upsert record, as a record-stage ``map``."""

    def __init__(self, kind: TableOpKind, fn: Any) -> None:
        self.kind = kind
        self.fn = fn

    def __call__(self, key: Any, value: Any) -> tuple[Any, Any]:
        return key, apply_table_op(self.kind, self.fn, key, value)


def lower_table_op_upserts(ctx: CompileContext, node: TableOpNode, parent: Frame) -> Frame:
    """``filter``/``map_values`` on upserts: a failing or deleted row becomes a tombstone."""
    if node.kind is TableOpKind.GROUP_BY:
        raise TopologyError(
            f"{node.name!r}: KTable.group_by must be followed by an aggregation: call "
            "count(), reduce() or aggregate() on it, or drop it (Kafka Streams' KGroupedTable "
            "offers only these, and without one the grouping does nothing)."
        )
    op = StageOp(RecordOpKind.MAP, _UpsertTableOp(node.kind, node.fn), node.name)
    return run_stage(ctx, parent, (op,), want_key=parent.key_codec)


def over_table_aggregate(nodes: dict[str, Node], node: TableOpNode) -> bool:
    """Whether ``node`` is a chain of ``filter``/``map_values`` over a ``KTable.group_by``
    aggregation (whose output carries each update's old aggregate).
    """
    parent: Node = node
    while isinstance(parent, TableOpNode) and parent.kind is not TableOpKind.GROUP_BY:
        parent = nodes[parent.parents[0]]
    return isinstance(parent, TableAggregateNode)


def lower_table_op_over_aggregate(
    lowerer: Lowerer, node: TableOpNode, base: Frame | None = None
) -> Frame:
    """``filter``/``map_values`` over a ``KTable.group_by`` aggregation, or over the changes
    ``base`` of a stream aggregation (unwindowed or windowed) that emits old
    aggregates (``(key, new, old)``, see
    :mod:`streamtable.topology.old_values`), as upserts: applied to the new and old aggregate
    of each update, so that a filter sends a tombstone only for a row that passed before and
    now fails, and nothing for a row that neither passes nor passed (Kafka Streams'
    ``KTableFilter``, which gets old values from ``KTableAggregate``, ``KStreamAggregate`` and
    ``KStreamReduce``). It adds no state: the aggregation's kernel holds the old values.
    ``processing.exception.handler`` covers the chain's user code: a change on which it raises
    goes to the dead-letter topic (``errors.dead.letter.queue.topic.name``), and under
    ``log_and_continue`` is skipped and counted as ``processing``.
    """
    ctx = lowerer.ctx
    cfg = ctx.config
    continue_on_error = cfg.processing_exception_handler == "log_and_continue"
    # a table read by several sinks is computed once per sink's query: only the first query
    # to lower an operator counts, logs and dead-letters its skipped changes (Kafka Streams
    # has one processor)
    chain = _chain(lowerer, node)
    unreported = frozenset(n.name for n in chain if not ctx.first_report(n.name))
    letters = None
    if cfg.dead_letter_queue_topic is not None:
        letters = dead_letter_spec(ctx, cfg.dead_letter_queue_topic, node.name, False)
    changes = _table_op_changes(
        lowerer, chain, continue_on_error, base, dead_letters=letters, unreported=unreported
    )
    df = changes.df
    if continue_on_error:
        observe = len(unreported) < len(chain)
        df = count_and_drop(ctx, df, {"processing": F.col("skipped")}, observe=observe)
    return changes.with_(df=frame_columns_only(df))


def _chain(lowerer: Lowerer, node: TableOpNode) -> list[TableOpNode]:
    """The chain of ``filter``/``map_values`` ending at ``node``, first operation first."""
    chain = [node]
    while True:
        parent = lowerer.nodes[chain[-1].parents[0]]
        if isinstance(parent, TableOpNode) and parent.kind is not TableOpKind.GROUP_BY:
            chain.append(parent)
        else:
            break
    chain.reverse()
    return chain


def _table_op_changes(
    lowerer: Lowerer,
    chain: list[TableOpNode],
    continue_on_error: bool,
    base: Frame | None = None,
    *,
    dead_letters: DeadLetterSpec | None = None,
    unreported: frozenset[str] | None = None,
) -> Frame:
    """The changes of ``chain`` (see :func:`_chain`), over the changes ``base`` of the
    chain's parent (by default :func:`lower_table_changes`).
    ``unreported`` (the chain's operators another query reports) set: the changes are read
    as upserts and ``processing.exception.handler`` covers the chain (see
    :class:`TableOpStage`); unset: they feed an aggregation, and an error always stops the
    application.
    """
    if base is None:
        base = lower_table_changes(lowerer, chain[0].parents[0])
    stage = TableOpStage(
        tuple((n.kind, n.fn, n.name) for n in chain),
        base.key_codec,
        base.value_codec,
        continue_on_error,
        handled=unreported is not None,
        dead_letters=dead_letters,
        unreported=unreported or frozenset(),
    )
    df = base.df.mapInArrow(stage, SKIPPING_CHANGE_DDL if continue_on_error else CHANGE_DDL)
    return Frame(df, base.key_codec, PickleCodec(), stateful=True)


def lower_table_changes(lowerer: Lowerer, name: str) -> Frame:
    """The changes ``(key, new, old)`` of table ``name`` (see module doc).

    - a table read from a topic: materialized by a paged ``TableSourceKernel``;
    - ``filter``/``map_values`` of it: the table operation applied to new and old values;
    - a ``KTable.group_by`` aggregation: its own output, which carries the old aggregate;
    - any other table (a stream aggregation, a join result): its upserts materialized by a
      ``TableSourceKernel``, which keeps the latest value per key to supply ``old``.
    """
    ctx = lowerer.ctx
    node: Node = lowerer.nodes[name]
    if isinstance(node, TableSourceNode):
        changes = _materialized(ctx, lower_table_upserts(ctx, node), store=node.store_name)
        if not node.queryable:
            return changes
        return logged(ctx, changes, node.name, node.store_name, node.value_serde)
    if isinstance(node, RepartitionNode):
        return lower_table_changes(lowerer, node.parents[0])
    if isinstance(node, TableOpNode) and node.kind is not TableOpKind.GROUP_BY:
        # feeding an aggregation: a skipped change would leave its old value in a group
        return _table_op_changes(lowerer, _chain(lowerer, node), continue_on_error=False)
    if isinstance(node, TableAggregateNode):
        return _table_aggregate_changes(lowerer, node)
    upserts = lowerer.lower(name)
    if upserts.value_codec.native_long:  # a native count or Long reduction: bytes for the state
        upserts = convert(ctx, upserts, None, PickleCodec())
    return _materialized(ctx, validated(ctx, upserts))


def _materialized(ctx: CompileContext, upserts: Frame, store: str = "") -> Frame:
    """``upserts`` materialized as a table: one ``(key, new, old)`` per key and batch (the
    table's state store ``store``, if it has one).
    """
    df = run_paged(ctx, [upserts], TableSourceKernel())
    ctx.register_store(store, "key_value", upserts.key_codec, KeyValueEntries(upserts.value_codec))
    return Frame(df, upserts.key_codec, upserts.value_codec, stateful=True)


def lower_table_aggregate(lowerer: Lowerer, node: TableAggregateNode) -> Frame:
    """``KTable.group_by(...).aggregate/reduce/count`` as upserts of the aggregate table."""
    changes = _table_aggregate_changes(lowerer, node)
    return changes.with_(df=frame_columns_only(changes.df))


def _table_aggregate_changes(lowerer: Lowerer, node: TableAggregateNode) -> Frame:
    """Re-group the parent table's changes, then fold them with the adder and subtractor per
    group (paged ``TableAggregateKernel``); the output carries the old aggregate.
    """
    ctx = lowerer.ctx
    rep = lowerer.nodes[node.parents[0]]
    select = lowerer.nodes[rep.parents[0]]
    assert isinstance(select, TableOpNode) and select.kind is TableOpKind.GROUP_BY
    changes = lower_table_changes(lowerer, select.parents[0])
    out_key = codec_for(node.key_serde or ctx.config.default_key_serde)
    stage = RegroupStage(
        select.fn,
        select.name,
        changes.key_codec,
        changes.value_codec,
        out_key,  # type: ignore[arg-type]
    )
    df = changes.df.mapInArrow(stage, REGROUP_DDL)
    df = count_and_drop(ctx, df, {"null_key": F.col("dropped") == F.lit("null_key")})
    regrouped = Frame(df.drop("dropped"), out_key, PickleCodec(), stateful=True)
    kernel = TableAggregateKernel(
        node.name, out_key, node.initializer, node.adder, node.subtractor, node.reduce
    )
    df = run_paged(ctx, [regrouped], kernel)
    ctx.register_store(node.store_name, "key_value", out_key, KeyValueEntries())
    changes = Frame(df, out_key, PickleCodec(), stateful=True)
    if not node.queryable:
        return changes
    return logged(ctx, changes, node.name, node.store_name, node.store_value_serde)


def table_key_codec(ctx: CompileContext, node: TableSourceNode) -> SerdeCodec:
    """How a table's keys are encoded (joins encode the other side's keys the same way)."""
    serde = node.key_serde or ctx.config.default_key_serde
    if serde is None:
        raise TopologyError(
            f"Table {node.name!r} (topic {node.topic!r}) has no key serde: pass key_serde= "
            "or set 'default.key.serde' (Kafka Streams fails too: ConfigException 'Please "
            "specify a key serde ...')."
        )
    return SerdeCodec(serde)
