"""Lowering of ``ProcessNode`` (``KStream.process``/``process_values``): one paged
``transformWithState`` operator running the user processor (:mod:`..paged.processor_api`).

The input is grouped by source partition, one Kafka Streams task each
(:class:`~..paged.processor_api.TaskPack`). The compiler cuts the topology before a process
node that reads another stateful operator (:mod:`..subtopologies`), so the input always comes
straight from topics, with its partitions.

Before lowering, the processor's ``init`` runs once on the driver with a probing context
(:func:`probe_schedules`): a processor that schedules wall-clock punctuation makes the
operator run in Spark's ``ProcessingTime`` mode, whose timers fire without new records.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.sql import functions as F

from streamtable.compiler.changelog import StoreUpdatesWriter, register_changelog
from streamtable.compiler.codecs import PickleCodec, SerdeCodec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.record_ops import validated
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.paged.processor import OUTPUT_DDL
from streamtable.compiler.paged.processor_api import (
    PAGES_VAR,
    TASK_INPUT_DDL,
    ProcessorApiProcessor,
    TaskPack,
    WallClockTicks,
)
from streamtable.compiler.paged.processor_pages import (
    PROCESSING,
    PageContext,
    ProcessorSpec,
    StoreSpec,
)
from streamtable.compiler.paged.punctuation import WALL_CLOCK_TIME
from streamtable.compiler.paged.stores import ProcessorStoreEntries, ProcessorWindowEntries
from streamtable.errors import StreamsError, TopologyError
from streamtable.topology.nodes import ProcessNode

_FRAME = ["key", "value", "ts", "partition", "offset", "seq", "topic"]


def store_specs(ctx: CompileContext, node: ProcessNode) -> tuple[StoreSpec, ...]:
    """The connected stores with their serdes resolved (the builder's, else the defaults).

    Raises
    ------
    TopologyError
        If a store has no serde and the config gives no default.
    """
    cfg = ctx.config
    out = []
    for b in node.store_builders:
        serdes = []
        for what, given, default in (
            ("key", b.key_serde, cfg.default_key_serde),
            ("value", b.value_serde, cfg.default_value_serde),
        ):
            serde = given or default
            if serde is None:
                raise TopologyError(
                    f"State store {b.name!r} of processor {node.name!r} has no {what} serde: "
                    f"pass it to Stores.key_value_store_builder(..., key_serde, value_serde) or "
                    f"set 'default.{what}.serde' (Kafka Streams fails too: ConfigException "
                    f"'Please specify a {what} serde ...')."
                )
            serdes.append(serde)
        window = getattr(b.supplier, "window_size_ms", None) is not None
        out.append(
            StoreSpec(
                b.name,
                serdes[0],
                serdes[1],
                b.logging,
                b.supplier if window else None,
                persistent=b.supplier.persistent,
            )
        )
    return tuple(out)


def probe_schedules(spec: ProcessorSpec) -> set[str]:
    """The punctuation kinds the processor's ``init`` schedules, run once on the driver
    with empty stores and nothing forwarded.

    Raises
    ------
    TopologyError
        If ``init`` raises (the message names the processor and the error).
    """
    ctx = PageContext(spec, -1, lambda _name: {}, None, None, None)
    proc = spec.supplier()
    ctx.in_init = True
    try:
        proc.init(ctx)
    except (Exception, StreamsError) as e:
        raise TopologyError(
            f"Processor {spec.node_name!r}: init() raised {type(e).__name__}: {e} when "
            "streamtable ran it once while compiling the topology (to learn its punctuation "
            "schedules). init() must work with empty state stores and no record."
        ) from e
    return {state.kind for state, _ in ctx.schedules}


def lower_process(ctx: CompileContext, node: ProcessNode, parent: Frame) -> Frame:
    """Run ``node``'s processor over ``parent`` (see the module doc).

    Output: the forwarded records, keys and values pickled (``process_values``: keys keep
    the input's encoding).
    """
    parent = validated(ctx, parent)
    cfg = ctx.config
    assert node.supplier is not None
    stores = store_specs(ctx, node)
    out_key = parent.key_codec if node.fixed_key else PickleCodec()
    spec = ProcessorSpec(
        node_name=node.name,
        supplier=node.supplier,
        stores=stores,
        key_codec=parent.key_codec,
        value_codec=parent.value_codec,
        out_key_codec=out_key,
        out_value_codec=PickleCodec(),
        fixed_key=node.fixed_key,
        application_id=cfg.application_id,
        continue_on_error=cfg.processing_exception_handler == "log_and_continue",
    )
    mocked = ctx.wall_clock_source is not None
    timers = WALL_CLOCK_TIME in probe_schedules(spec) and not mocked
    # no record with a negative timestamp reaches a Kafka Streams processor (RecordQueue drops
    # it at the source, "negative extracted timestamp"), and a Record refuses one
    records = count_and_drop(ctx, parent.df, {"negative_timestamp": F.col("ts") < 0})
    packed = records.mapInArrow(TaskPack(), TASK_INPUT_DDL)
    if ctx.wall_clock_source is not None:
        tasks = _task_count(ctx, node)
        ticks = ctx.wall_clock_source().mapInArrow(WallClockTicks(tasks), TASK_INPUT_DDL)
        packed = packed.unionByName(ticks)
    ctx.uses_tws = True
    out = packed.groupBy("task").transformWithState(
        statefulProcessor=ProcessorApiProcessor(
            spec, mocked_clock=mocked, wall_clock_timers=timers, run_id=uuid.uuid4().hex
        ),
        outputStructType=OUTPUT_DDL,
        outputMode="Update",
        timeMode="ProcessingTime" if timers else "None",
    )
    ctx.stateful_operator()
    for s in stores:
        decode = (
            ProcessorStoreEntries(s.name, s.value_serde)
            if s.window is None
            else ProcessorWindowEntries(s.name, s.value_serde, s.window.window_size_ms)
        )
        ctx.register_store(s.name, s.kind, SerdeCodec(s.key_serde), decode, state_var=PAGES_VAR)
    topics = _changelogs(ctx, node, stores)
    if topics:
        out = out.mapInArrow(
            StoreUpdatesWriter(topics, ctx.output_spec(f"changelog-{node.name}")), OUTPUT_DDL
        )
    report = ctx.first_report(node.name)
    is_skip = (F.col("dropped") > 0) & (F.col("reason") == PROCESSING)
    out = count_and_drop(
        ctx, out, {PROCESSING: is_skip}, weights={PROCESSING: F.col("dropped")}, observe=report
    )
    out = out.filter((F.col("dropped") == 0) & F.col("reason").isNull())
    return Frame(out.select(*_FRAME), out_key, PickleCodec(), stateful=True)


def _task_count(ctx: CompileContext, node: ProcessNode) -> int:
    """Kafka Streams' task count of the node's sub-topology: the most partitions of the
    topics it reads.
    """
    from streamtable.compiler.subtopologies import read_topics

    return max(
        (ctx.topic_partitions.get(t, 1) for t in read_topics(ctx.graph, node.name)), default=1
    )


def _changelogs(
    ctx: CompileContext, node: ProcessNode, stores: tuple[StoreSpec, ...]
) -> dict[str, Any]:
    """Register the changelogs of the logged stores (not in the TopologyTestDriver, nor when
    another query logs them already); store name -> topic.
    """
    topics = {}
    for s in stores:
        if not s.logged:
            ctx.unlogged.setdefault(
                s.name, "its builder disables logging (with_logging_disabled())"
            )
            continue
        size = None if s.window is None else s.window.window_size_ms
        retention = None if s.window is None else s.window.retention_ms
        info = register_changelog(
            ctx, node.name, s.name, s.key_serde, s.value_serde, s.kind, size, retention
        )
        if info is not None:
            topics[s.name] = info.topic
    return topics
