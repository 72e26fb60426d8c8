"""Lowering of ``RepartitionNode`` within one query: a shuffle by the serialized key.

Kafka Streams writes a repartition topic; inside one Spark query the same redistribution is the
shuffle of the next operator (an aggregation's or a join's ``groupBy``), so the node only fixes
the key's encoding. Repartitions that need a real topic (``repartition(num_partitions=n)``, or an
aggregation reading another stateful operator) are cut into sub-topologies before lowering
(:mod:`streamtable.compiler.subtopologies`) and never reach this module.
"""

from __future__ import annotations

from streamtable.compiler.frame import CompileContext, Frame
from streamtable.topology.nodes import RepartitionNode


def lower_repartition(ctx: CompileContext, node: RepartitionNode, parent: Frame) -> Frame:
    """``parent`` as it is: the consumer's own shuffle redistributes it by key."""
    assert node.num_partitions is None, "explicit repartitions are cut into sub-topologies"
    return parent
