"""Lowering of ``RepartitionNode`` within one query: a shuffle by the serialized key.

Kafka Streams writes a repartition topic; inside one Spark query the same redistribution is the
shuffle of the next operator (an aggregation's or a join's ``groupBy``), so the node only fixes
the key's encoding. Repartitions that need a real topic (``repartition(num_partitions=n)``, or an
aggregation reading another stateful operator) are cut into sub-topologies before lowering
(:mod:`streamtable.compiler.subtopologies`) and never reach this module.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.subtopologies import keeps_null_keys
from streamtable.topology.nodes import RepartitionNode


def lower_repartition(ctx: CompileContext, node: RepartitionNode, parent: Frame) -> Frame:
    """``parent`` without its null-key records (Kafka Streams' repartition filter, counted as
    ``null_key``), unless a join downstream joins them (:func:`keeps_null_keys`); the
    consumer's own shuffle redistributes it by key.
    """
    assert node.num_partitions is None, "explicit repartitions are cut into sub-topologies"
    if keeps_null_keys(ctx.graph, node.name) or not parent.df.schema["key"].nullable:
        return parent
    checks = {"null_key": F.col("key").isNull()}
    report = ctx.first_report(node.name)  # counted by the first query lowering it
    return parent.with_(df=count_and_drop(ctx, parent.df, checks, observe=report))
