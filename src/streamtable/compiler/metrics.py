"""Counting dropped records with Spark's observed metrics (visible in query progress)."""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from streamtable.compiler.frame import CompileContext

from streamtable.compiler.metrics_names import METRIC_PREFIX


def count_and_drop(
    ctx: CompileContext,
    df: DataFrame,
    conditions: dict[str, Column],
    weights: dict[str, Column] | None = None,
    *,
    observe: bool = True,
) -> DataFrame:
    """Count the rows matching each condition as dropped for that reason, then remove them.

    Each count appears in ``StreamingQueryProgress.observedMetrics`` under an observation named
    ``streamtable_dropped_<n>`` with one column per reason; :meth:`KafkaStreams.metrics` sums
    them by reason (Kafka Streams' ``dropped-records`` metric, split by cause). A row counts
    as ``weights[reason]`` records when given (a row standing for several dropped records).
    A row matching several conditions counts once, for the first of them in ``conditions``'
    order: Kafka Streams' ``dropped-records`` counts a record with a null key and a null value
    once (as a null key, the first check of its processors). With ``observe=False`` the rows
    are only removed (an operator that another query of the topology already counts).
    """
    any_match = reduce(lambda a, b: a | b, conditions.values())
    if not observe:
        return df.filter(~F.coalesce(any_match, F.lit(False)))
    weights = weights or {}
    name = ctx.unique(METRIC_PREFIX)
    ctx.metric_names.append(name)
    aggs = []
    earlier: Column | None = None
    for reason, c in conditions.items():
        c = F.coalesce(c, F.lit(False))
        first = c if earlier is None else c & ~earlier
        aggs.append(F.sum(F.when(first, weights.get(reason, F.lit(1))).otherwise(0)).alias(reason))
        earlier = c if earlier is None else earlier | c
    observed = df.observe(name, *aggs)
    return observed.filter(~F.coalesce(any_match, F.lit(False)))
