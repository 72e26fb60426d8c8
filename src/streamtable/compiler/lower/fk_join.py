"""Lowering of the KTable-KTable foreign-key join (``JoinKind.TABLE_TABLE_FK``, KIP-213).

The left table's changes ``(key, new, old)`` go through a
:class:`~streamtable.compiler.paged.fk_join_kernels.SubscriptionStage` (``mapInArrow``) that
addresses subscription instructions to foreign keys; they are unioned with the right table's
upserts and run through one paged
:class:`~streamtable.compiler.paged.fk_join_kernels.ForeignKeyJoinKernel` per foreign key
(the shuffle by foreign key stands for Kafka Streams' subscription-registration topic, the
results keyed by the left key for its subscription-response topic). No co-partitioning is
needed: both sides are redistributed by foreign key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from streamtable.compiler.codecs import Codec, PickleCodec, result_codec
from streamtable.compiler.frame import Frame
from streamtable.compiler.lower.paged import frame_columns_only, run_paged
from streamtable.compiler.lower.record_ops import validated
from streamtable.compiler.lower.table import lower_table_changes
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.paged.fk_join_kernels import (
    SUBSCRIPTION_DDL,
    ForeignKeyJoinKernel,
    SubscriptionStage,
)
from streamtable.topology.nodes import JoinNode

if TYPE_CHECKING:
    from streamtable.compiler.plan import Lowerer


def lower_fk_join(lowerer: Lowerer, node: JoinNode, want_value: Codec | None = None) -> Frame:
    """Compile a foreign-key table join; the result is keyed by the left table's keys, its
    values pickled or in the serde ``want_value`` names (see :func:`.join.lower_join`).

    Left records whose foreign key is ``None`` in an inner join are counted as dropped
    (``null_foreign_key``), as Kafka Streams' drop sensor counts them.
    """
    ctx = lowerer.ctx
    assert node.joiner is not None and node.foreign_key_extractor is not None
    left = lower_table_changes(lowerer, node.parents[0])
    right = validated(ctx, lowerer.lower(node.parents[1]))
    stage = SubscriptionStage(
        node.name, node.join_type, node.foreign_key_extractor, left.value_codec, right.key_codec
    )
    df = left.df.mapInArrow(stage, SUBSCRIPTION_DDL)
    df = count_and_drop(
        ctx, df, {"null_foreign_key": F.col("dropped") == F.lit("null_foreign_key")}
    )
    subscriptions = Frame(df.drop("dropped"), left.key_codec, PickleCodec(), stateful=True)
    out_codec = result_codec(want_value)
    kernel = ForeignKeyJoinKernel(
        node.name, node.join_type, node.joiner, right.value_codec, out_codec=out_codec
    )
    out = frame_columns_only(run_paged(ctx, [subscriptions, right], kernel))
    return Frame(out, left.key_codec, out_codec, stateful=True)
