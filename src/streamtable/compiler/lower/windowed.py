"""Lowering of a windowed ``AggregateNode`` (and a ``suppress(until_window_closes)`` on it).

One paged ``transformWithState`` operator running a window kernel
(:mod:`..paged.window_kernels`) on partition time (:mod:`..paged.partition_time`): lateness
is decided per record by the stream time of its own source partition, never by Spark's
watermark, so the output and the dropped set do not depend on micro-batch boundaries. A
suppression until the window closes is fused into the same operator: the kernel then emits one
final record per window instead of updates.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from streamtable.compiler.changelog import logged_windows
from streamtable.compiler.codecs import (
    Codec,
    PickleCodec,
    SerdeCodec,
    SessionWindowedCodec,
    WindowedCodec,
)
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.late_records import LateRecordsWriter
from streamtable.compiler.lower.aggregate import fold_output_codec
from streamtable.compiler.lower.paged import frame_columns_only, run_paged
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.paged.processor import LATE
from streamtable.compiler.paged.stores import WindowEntries
from streamtable.compiler.paged.window_kernels import (
    TimeWindowKernel,
    WindowAggregateSpec,
    WindowKernel,
)
from streamtable.errors import TopologyError
from streamtable.topology.nodes import (
    AggregateNode,
    CustomWindowSpec,
    SessionWindowSpec,
    SlidingWindowSpec,
    SuppressSpec,
    TimeWindowSpec,
    WindowSpec,
    default_retention_ms,
)


def windowed_key_codec(key: Codec, windows: WindowSpec) -> Codec:
    """How the output's windowed keys are written (Kafka Streams' windowed serializers)."""
    if isinstance(windows, SessionWindowSpec):
        return SessionWindowedCodec(key)
    return WindowedCodec(key, windows.size_ms)


def late_value_codec(ctx: CompileContext, node: AggregateNode) -> Codec:
    """The serde encoding values reach a windowed aggregation in when its late records are
    written to a topic (so they keep the bytes a consumer can read).

    Raises
    ------
    TopologyError
        If neither the grouping nor the configuration gives a value serde.
    """
    serde = node.value_serde or ctx.config.default_value_serde
    if serde is None:
        raise TopologyError(
            f"Windowed aggregation {node.name!r} writes late records to topic "
            f"{node.late_records_topic!r} but has no value serde: pass value_serde= to "
            "group_by()/group_by_key() or set 'default.value.serde' in the config (as Kafka "
            "Streams fails for any topic without one: ConfigException 'Please specify a value "
            "serde ...')."
        )
    return SerdeCodec(serde)


def window_kernel(spec: WindowAggregateSpec) -> WindowKernel:
    """The kernel of the window kind."""
    w = spec.windows
    if isinstance(w, TimeWindowSpec | CustomWindowSpec):
        return TimeWindowKernel(spec)
    if isinstance(w, SlidingWindowSpec):
        from streamtable.compiler.paged.sliding_kernels import SlidingWindowKernel

        return SlidingWindowKernel(spec)
    assert isinstance(w, SessionWindowSpec)
    from streamtable.compiler.paged.session_kernels import SessionWindowKernel

    return SessionWindowKernel(spec)


def lower_windowed_aggregate(
    ctx: CompileContext,
    node: AggregateNode,
    parent: Frame,
    *,
    emit_final: SuppressSpec | None = None,
    with_old: bool = False,
    want_value: Codec | None = None,
) -> Frame:
    """Aggregate ``parent`` (keyed by the group key codec) per key and window.

    Output: one row per updated window per micro-batch (or, with ``emit_final``, the
    ``suppress(until_window_closes)`` spec, one row per window once it has closed), keyed by
    the windowed key, the aggregate as value; session merges also emit tombstones for the
    merged-away sessions. ``with_old`` adds a column ``old``, each changed window's
    aggregate before the micro-batch (with ``emit_final``: before the last micro-batch that
    changed it; pickled, as ``value`` then is). Values are pickled, or in the serde
    ``want_value`` names (a sink's) when :func:`.aggregate.fold_output_codec` allows it: the
    sink and a changelog in that serde then take the bytes as they are.

    Raises
    ------
    TopologyError
        If a late-records topic lacks a serde.

    ``parent`` comes straight from Kafka sources, in each partition's order: the compiler cuts
    a chain after another stateful operator or an explicit ``repartition(num_partitions=...)``
    into sub-topologies first (:mod:`streamtable.compiler.subtopologies`), so the windows
    track the stream time of the repartition topic's partitions, as Kafka Streams' do.
    """
    assert not parent.stateful, f"{node.name}: chained aggregations are cut before lowering"
    agg = node.aggregation
    windows = node.windows
    assert agg is not None and windows is not None
    checks = {"null_key": F.col("key").isNull(), "negative_timestamp": F.col("ts") < 0}
    if agg.skip_null_values and isinstance(windows, SlidingWindowSpec):
        # only KStreamSlidingWindowAggregate skips null values; time and session window
        # aggregations pass them to the aggregator (a windowed count counts them)
        checks["null_value"] = F.col("value").isNull()
    # a windowed table read by several sinks is computed once per sink's query: only the
    # first counts its drops and writes its late records (Kafka Streams has one processor)
    report = ctx.first_report(node.name)
    df = count_and_drop(ctx, parent.df, checks, observe=report)
    retention = node.retention_ms or default_retention_ms(windows)
    out_codec = PickleCodec() if with_old else fold_output_codec(ctx, node, want_value)
    spec = WindowAggregateSpec(
        node_name=node.name,
        aggregation=agg,
        key_codec=parent.key_codec,
        value_codec=parent.value_codec,
        windows=windows,
        retention_ms=retention,
        emit_final=emit_final is not None,
        keep_late=report and node.late_records_topic is not None,
        buffer_max_records=None if emit_final is None else emit_final.max_records,
        buffer_max_bytes=None if emit_final is None else emit_final.max_bytes,
        with_old=with_old,
        out_codec=out_codec,
    )
    writer = None
    if spec.keep_late:
        if parent.key_codec.serde() is None:
            raise TopologyError(
                f"Windowed aggregation {node.name!r} writes late records to topic "
                f"{node.late_records_topic!r} but has no key serde: pass key_serde= to "
                "group_by()/group_by_key() or set 'default.key.serde' in the config (as Kafka "
                "Streams fails for any topic without one: ConfigException 'Please specify a key "
                "serde ...')."
            )
        writer = LateRecordsWriter(node.late_records_topic, ctx.output_spec(f"late-{node.name}"))
    out = run_paged(
        ctx,
        [parent.with_(df=df)],
        window_kernel(spec),
        drop_reasons=(LATE,),
        late_records=writer,
        count_drops=report,
    )
    kind = "session" if isinstance(windows, SessionWindowSpec) else "window"
    ctx.register_store(node.store_name, kind, parent.key_codec, WindowEntries())
    frame = Frame(
        out if with_old else frame_columns_only(out),
        windowed_key_codec(parent.key_codec, windows),
        out_codec,
        stateful=True,
    )
    if not node.queryable:
        return frame
    if emit_final is not None:
        # the operator emits final results only; Kafka Streams' window store holds every update
        ctx.unlogged.setdefault(
            node.store_name,
            "its aggregation is suppressed until windows close, and streamtable's window "
            "store then holds final results only; query an unsuppressed named aggregation",
        )
        return frame
    size = None if isinstance(windows, SessionWindowSpec) else windows.size_ms
    return logged_windows(
        ctx, frame, node.name, node.store_name, node.store_value_serde, size, retention
    )
