"""Running a kernel as a paged ``transformWithState`` operator over one or more inputs."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.late_records import LateRecordsWriter
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.paged.pack import PAGED_DDL, KernelPack
from streamtable.compiler.paged.partition_time import PARTITION_TIME_DDL, PartitionTimePack
from streamtable.compiler.paged.processor import (
    OUTPUT_DDL,
    PagedProcessor,
    PartitionTimeProcessor,
)

_FRAME = ["key", "value", "ts", "partition", "offset", "seq", "topic"]


def run_paged(
    ctx: CompileContext,
    inputs: list[Frame],
    kernel: Any,
    *,
    drop_reasons: tuple[str, ...] = (),
    watermark_delay_ms: int | None = None,
    late_records: LateRecordsWriter | None = None,
    single_stream_time: bool = False,
    count_drops: bool = True,
) -> DataFrame:
    """Pack each input (side = its index), union, and run ``kernel`` per state page (a
    kernel with ``latest_per_key`` gets only each key's latest record per map task).

    Returns the kernel's outputs in frame columns plus ``old``; rows the kernel reported as
    dropped are counted under their reason and removed (after ``late_records`` has written
    the late ones to their topic). With ``watermark_delay_ms`` the operator runs in event
    time (Spark's watermark over the latest record timestamps). A kernel with
    ``partition_time`` runs on partition time instead (:mod:`..paged.partition_time`): its
    single input must come straight from the Kafka sources, unshuffled, unless
    ``single_stream_time`` gives the operator one stream time over all its input. With
    ``count_drops=False`` dropped rows are removed without being counted.
    """
    ctx.uses_tws = True
    time_mode = "None"
    if getattr(kernel, "partition_time", False):
        (frame,) = inputs
        pack = PartitionTimePack(single=single_stream_time)
        packed = frame.df.mapInArrow(pack, PARTITION_TIME_DDL)
        processor: PagedProcessor = PartitionTimeProcessor(kernel)
    else:
        packed = None
        for side, frame in enumerate(inputs):
            latest = getattr(kernel, "latest_per_key", False)
            df = frame.df.mapInArrow(KernelPack(side, latest_per_key=latest), PAGED_DDL)
            packed = df if packed is None else packed.unionByName(df)
        assert packed is not None
        if watermark_delay_ms is not None:
            packed = packed.withWatermark("event_time", f"{watermark_delay_ms} milliseconds")
            time_mode = "EventTime"
        processor = PagedProcessor(kernel)
    out = packed.groupBy("page").transformWithState(
        statefulProcessor=processor,
        outputStructType=OUTPUT_DDL,
        outputMode="Update",
        timeMode=time_mode,
    )
    ctx.stateful_operator()  # stores of this operator: registered by the caller right after
    if late_records is not None:
        out = out.mapInArrow(late_records, OUTPUT_DDL)
    is_drop = F.col("dropped") > 0
    if drop_reasons:
        out = count_and_drop(
            ctx,
            out,
            {r: is_drop & (F.col("reason") == r) for r in drop_reasons},
            weights={r: F.col("dropped") for r in drop_reasons},
            observe=count_drops,
        )
    return out.filter(~is_drop).select(*_FRAME, "old")


def frame_columns_only(df: DataFrame) -> DataFrame:
    """``df`` without the ``old`` column (a table's changes read as upserts)."""
    return df.select(*_FRAME)
