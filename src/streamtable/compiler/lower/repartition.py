"""Lowering of ``RepartitionNode``: a shuffle by the serialized key.

Kafka Streams writes a repartition topic; on Spark the same redistribution is a shuffle. When the
next operator is an aggregation, Spark's ``groupBy`` shuffles by key anyway, so the node only fixes
the key's encoding; an explicit ``repartition(num_partitions=n)`` shuffles into ``n`` partitions.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from streamtable.compiler.frame import CompileContext, Frame
from streamtable.topology.nodes import RepartitionNode


def lower_repartition(ctx: CompileContext, node: RepartitionNode, parent: Frame) -> Frame:
    """Redistribute ``parent`` by key when the node asks for a partition count."""
    if node.num_partitions is None:
        return parent
    return parent.with_(df=parent.df.repartition(node.num_partitions, F.col("key")), shuffled=True)
