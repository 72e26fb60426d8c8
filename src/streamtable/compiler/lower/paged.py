"""Running a kernel as a paged ``transformWithState`` operator over one or more inputs."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.paged.pack import PAGED_DDL, KernelPack
from streamtable.compiler.paged.processor import OUTPUT_DDL, PagedProcessor

_FRAME = ["key", "value", "ts", "partition", "offset", "seq", "topic"]


def run_paged(
    ctx: CompileContext,
    inputs: list[Frame],
    kernel: Any,
    *,
    drop_reasons: tuple[str, ...] = (),
    watermark_delay_ms: int | None = None,
) -> DataFrame:
    """Pack each input (side = its index), union, and run ``kernel`` per state page.

    Returns the kernel's outputs in frame columns plus ``old``; rows the kernel reported as
    dropped are counted under their reason and removed. With ``watermark_delay_ms`` the
    operator runs in event time (Spark's watermark over the latest record timestamps).
    """
    ctx.uses_tws = True
    packed = None
    for side, frame in enumerate(inputs):
        df = frame.df.mapInArrow(KernelPack(side), PAGED_DDL)
        packed = df if packed is None else packed.unionByName(df)
    assert packed is not None
    time_mode = "None"
    if watermark_delay_ms is not None:
        packed = packed.withWatermark("event_time", f"{watermark_delay_ms} milliseconds")
        time_mode = "EventTime"
    out = packed.groupBy("page").transformWithState(
        statefulProcessor=PagedProcessor(kernel),
        outputStructType=OUTPUT_DDL,
        outputMode="Update",
        timeMode=time_mode,
    )
    is_drop = F.col("dropped") > 0
    if drop_reasons:
        out = count_and_drop(
            ctx,
            out,
            {r: is_drop & (F.col("reason") == r) for r in drop_reasons},
            weights={r: F.col("dropped") for r in drop_reasons},
        )
    return out.filter(~is_drop).select(*_FRAME, "old")


def frame_columns_only(df: DataFrame) -> DataFrame:
    """``df`` without the ``old`` column (a table's changes read as upserts)."""
    return df.select(*_FRAME)
