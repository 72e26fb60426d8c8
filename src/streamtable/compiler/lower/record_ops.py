"""Lowering of chains of ``RecordOpNode``: one fused ``mapInArrow`` stage per chain."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from streamtable.compiler.codecs import Codec, PickleCodec, PresenceCodec, same_bytes
from streamtable.compiler.dead_letters import DESERIALIZATION, PROCESSING, DeadLetterSpec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.record_stage import (
    KEY_CHANGING,
    VALUE_CHANGING,
    RecordStage,
    StageOp,
    accepts_any_bytes,
)
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
    validates) it under the configured deserialization handler. User code of ``ops`` (and
    the source's timestamp extractor) runs under the processing handler; records either
    handler skips are counted as dropped (``deserialization`` / ``processing``) and written
    to ``errors.dead.letter.queue.topic.name`` when set, by the first query lowering the
    source or operation only.
    """
    kinds = {op.kind for op in ops}
    out_key = want_key or (PickleCodec() if kinds & KEY_CHANGING else base.key_codec)
    out_value = want_value or (
        PickleCodec()
        if kinds & VALUE_CHANGING or base.value_codec.native_long
        else base.value_codec
    )
    cfg = ctx.config
    source = base.pending_source
    errors = cfg.deserialization_handler if source is not None else None
    extractor = source.timestamp_extractor if source is not None else None
    policy = None if source is None else policy_of(extractor, cfg.invalid_timestamp_policy)
    processing = _HANDLERS[cfg.processing_exception_handler]
    # A source or an operation lowered by several queries (a stream feeding two sinks) runs
    # in each; only the first reports (counts, logs, dead-letters) the records it drops.
    report_source = source is not None and source.name not in ctx.reporting_done
    if source is not None:
        ctx.reporting_done.add(source.name)
    unreported = frozenset(op.node_name for op in ops if op.node_name in ctx.reporting_done)
    reported = [op.node_name for op in ops if op.node_name not in unreported]
    ctx.reporting_done.update(reported)
    emit_dropped = (
        report_source
        and (
            errors == "log_and_continue"
            or (extractor is not None and (policy == "skip" or processing == "continue"))
        )
    ) or (processing == "continue" and bool(reported))
    may_write = (
        (source is not None and (report_source or errors == "log_and_fail"))
        or (extractor is not None and processing == "fail")
        or (bool(ops) and (processing == "fail" or bool(reported)))
    )
    letters = None
    if may_write and cfg.dead_letter_queue_topic is not None:
        names = ([source.name] if report_source and source is not None else []) + reported
        names += [source.name] if source is not None else []
        names += [op.node_name for op in ops]
        by_source_partition = not base.stateful
        letters = dead_letter_spec(ctx, cfg.dead_letter_queue_topic, names[0], by_source_partition)
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
        processing_errors=processing,
        source_name=None if source is None else source.name,
        report_source=report_source,
        unreported=unreported,
        dead_letters=letters,
    )
    ctx.python_stages.setdefault(ctx.query, []).extend(_python_parts(ops, source, partitioner))
    df = base.df.mapInArrow(stage, stage.output_ddl())
    if emit_dropped:
        reasons = (DESERIALIZATION, "invalid_timestamp", PROCESSING)
        df = count_and_drop(ctx, df, {r: F.col("dropped") == F.lit(r) for r in reasons}).drop(
            "dropped"
        )
    return Frame(df, out_key, out_value, stateful=base.stateful)


def _python_parts(ops: tuple[StageOp, ...], source: object, partitioner: object) -> list[str]:
    """What a Python stage runs, for messages: its operators, its source, its partitioner."""
    parts = [f"{op.node_name} (a Python {op.kind.value} function)" for op in ops]
    if source is not None:
        parts.append(f"the source {source.name} (its records are checked in Python)")  # type: ignore[attr-defined]
    if partitioner is not None:
        parts.append("the sink's partitioner")
    return parts or ["re-encoding keys or values in Python"]


def lower_chain(
    ctx: CompileContext,
    base: Frame,
    ops: tuple[StageOp, ...],
    *,
    want_key: Codec | None = None,
    want_value: Codec | None = None,
    partitioner: object = None,
    num_partitions: int = 0,
) -> Frame:
    """Apply ``ops`` to ``base``: runs of column-expression operations as Spark SQL
    (:mod:`.column_ops`), the others in Python stages (:func:`run_stage`).

    The result is encoded as wanted (and partitioned by ``partitioner``), as
    :func:`run_stage`'s is; a Python stage does it when the last run is Spark SQL and Spark
    cannot produce the wanted encoding itself.
    """
    from streamtable.compiler.lower.column_ops import run_columns, segments

    runs = segments(ops)
    frame = base
    for i, (native, run) in enumerate(runs):
        last = i == len(runs) - 1
        wk, wv = (want_key, want_value) if last else (None, None)
        if native:
            frame = run_columns(ctx, frame, run, want_key=wk, want_value=wv)
        else:
            frame = run_stage(
                ctx,
                frame,
                run,
                want_key=wk,
                want_value=wv,
                partitioner=partitioner if last else None,
                num_partitions=num_partitions,
            )
    unmet = (want_key is not None and frame.key_codec != want_key) or (
        want_value is not None and frame.value_codec != want_value
    )
    if runs and runs[-1][0] and (unmet or partitioner is not None):
        frame = run_stage(
            ctx,
            frame,
            (),
            want_key=want_key,
            want_value=want_value,
            partitioner=partitioner,
            num_partitions=num_partitions,
        )
    return frame


def dead_letter_spec(
    ctx: CompileContext, topic: str, name: str, by_source_partition: bool
) -> DeadLetterSpec:
    """Where a stage named after node ``name`` writes its dead letters: output stage
    ``<query>.dlq.<name>`` (a numeric suffix when the query has another stage of that name);
    its tasks are named after their source partition when it runs before any shuffle.
    """
    stage = f"dlq.{name}"
    n = 1
    while f"{ctx.query}.{stage}".replace(" ", "_") in ctx.output_stages:
        n += 1
        stage = f"dlq.{name}.{n}"
    return DeadLetterSpec(topic, ctx.output_spec(stage), by_source_partition)


def validated(ctx: CompileContext, frame: Frame) -> Frame:
    """``frame`` with raw topic data deserialized once (bad records caught), else unchanged.

    Raw data that :func:`natively_valid` finds valid as it is skips the Python stage: its
    deserialization could reject nothing.
    """
    if frame.pending_source is None:
        return frame
    if natively_valid(ctx, frame):
        return frame.with_(pending_source=None)
    return run_stage(ctx, frame, ())


def natively_valid(ctx: CompileContext, frame: Frame) -> bool:
    """Whether raw topic data needs no Python source stage to be valid: serdes that accept any
    bytes (String replaces invalid UTF-8 as Java's does; Bytes takes them as they are), the
    record timestamp as it is (no extractor), and no invalid-timestamp check to run (a
    negative record timestamp is left to the windowed aggregations unless the policy is
    ``fail``).
    """
    src = frame.pending_source
    return (
        src is not None
        and accepts_any_bytes(frame.key_codec)
        and accepts_any_bytes(frame.value_codec)
        and src.timestamp_extractor is None
        and ctx.config.invalid_timestamp_policy != "fail"
    )


def convert(ctx: CompileContext, frame: Frame, key: Codec | None, value: Codec | None) -> Frame:
    """``frame`` re-encoded to the wanted codecs (``None``: keep), with a Python stage if needed
    (raw topic data in the wanted codecs that :func:`natively_valid` finds valid needs none,
    nor such data going to a native ``count``, which only reads whether values are null).
    """
    # columns an operator wrote already holding the wanted bytes (a windowed aggregation's
    # keys for its windowed serde, say) only change their label (raw topic data is validated
    # in its own codecs first)
    if frame.pending_source is None:
        fused = frame.fused_changelog
        if key is not None and frame.key_codec != key and same_bytes(frame.key_codec, key):
            frame = frame.with_(key_codec=key, fused_changelog=fused)
        if (
            value is not None
            and frame.value_codec != value
            and same_bytes(frame.value_codec, value)
        ):
            frame = frame.with_(value_codec=value, fused_changelog=fused)
    key_ok = key is None or frame.key_codec == key
    value_ok = value is None or frame.value_codec == value
    if key_ok and value_ok:
        return validated(ctx, frame)
    if key_ok and isinstance(value, PresenceCodec) and natively_valid(ctx, frame):
        # a count of raw String or Bytes records: whether a value is null is all it reads
        df = frame.df.withColumn("value", presence(F.col("value")))
        return frame.with_(df=df, value_codec=value, pending_source=None)
    return run_stage(ctx, frame, (), want_key=key, want_value=value)


def presence(c: Column) -> Column:
    """:class:`PresenceCodec` bytes of column ``c``: ``b""`` for a value, null for ``NULL``."""
    return F.when(c.isNull(), F.lit(None).cast("binary")).otherwise(F.lit(b""))


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
