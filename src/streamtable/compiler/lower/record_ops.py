"""Lowering of chains of ``RecordOpNode``: one fused ``mapInArrow`` stage per chain."""

from __future__ import annotations

from pyspark.sql import functions as F

from streamtable.compiler.codecs import Codec, PickleCodec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.record_stage import KEY_CHANGING, VALUE_CHANGING, RecordStage, StageOp
from streamtable.dsl.timestamps import policy_of
from streamtable.topology.nodes import RecordOpKind, RecordOpNode

_HANDLERS = {"log_and_fail": "fail", "log_and_continue": "continue"}


def run_stage(
    ctx: CompileContext,
    base: Frame,
    ops: tuple[StageOp, ...],
    *,
    want_key: Codec | None = None,
    want_value: Codec | None = None,
    partitioner: object = None,
    num_partitions: int = 0,
) -> Frame:
    """Apply ``ops`` to ``base`` in one Python stage; outputs encoded as wanted.

    Without a wish, an unchanged column keeps its encoding and a changed one is pickled
    (internal). When ``base`` is raw topic data, the stage also deserializes (and so
    validates) it under the configured deserialization handler.
    """
    kinds = {op.kind for op in ops}
    out_key = want_key or (PickleCodec() if kinds & KEY_CHANGING else base.key_codec)
    out_value = want_value or (
        PickleCodec()
        if kinds & VALUE_CHANGING or base.value_codec.native_long
        else base.value_codec
    )
    source = base.pending_source
    errors = ctx.config.deserialization_handler if source is not None else None
    extractor = source.timestamp_extractor if source is not None else None
    policy = None if source is None else policy_of(extractor, ctx.config.invalid_timestamp_policy)
    emit_dropped = errors == "log_and_continue" or (extractor is not None and policy == "skip")
    stage = RecordStage(
        ops=ops,
        in_key=base.key_codec,
        in_value=base.value_codec,
        out_key=out_key,
        out_value=out_value,
        source_errors=None if errors is None else _HANDLERS[errors],
        timestamp_extractor=extractor,
        invalid_timestamps=policy,
        partitioner=partitioner,  # type: ignore[arg-type]
        num_partitions=num_partitions,
        emit_dropped=emit_dropped,
    )
    df = base.df.mapInArrow(stage, stage.output_ddl())
    if emit_dropped:
        df = count_and_drop(
            ctx,
            df,
            {
                "deserialization": F.col("dropped") == F.lit("deserialization"),
                "invalid_timestamp": F.col("dropped") == F.lit("invalid_timestamp"),
            },
        ).drop("dropped")
    return Frame(df, out_key, out_value, stateful=base.stateful)


def validated(ctx: CompileContext, frame: Frame) -> Frame:
    """``frame`` with raw topic data deserialized once (bad records caught), else unchanged."""
    if frame.pending_source is None:
        return frame
    return run_stage(ctx, frame, ())


def convert(ctx: CompileContext, frame: Frame, key: Codec | None, value: Codec | None) -> Frame:
    """``frame`` re-encoded to the wanted codecs (``None``: keep), with a Python stage if needed."""
    key_ok = key is None or frame.key_codec == key
    value_ok = value is None or frame.value_codec == value
    if key_ok and value_ok and frame.pending_source is None:
        return frame
    return run_stage(ctx, frame, (), want_key=key, want_value=value)


def chain_of(graph_nodes: dict, node: RecordOpNode) -> list[RecordOpNode]:
    """The run of record operations ending at ``node``, first to last."""
    chain = [node]
    while True:
        parent = graph_nodes[chain[-1].parents[0]]
        if isinstance(parent, RecordOpNode) and not parent.terminal:
            chain.append(parent)
        else:
            break
    chain.reverse()
    return chain


def stage_ops(chain: list[RecordOpNode]) -> tuple[StageOp, ...]:
    """The stage operations of a chain (identity operations such as ``to_stream`` run nothing)."""
    return tuple(
        StageOp(n.kind, n.fn, n.name)  # type: ignore[arg-type]
        for n in chain
        if n.kind is not RecordOpKind.IDENTITY
    )
