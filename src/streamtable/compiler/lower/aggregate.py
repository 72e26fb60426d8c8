"""Lowering of an unwindowed ``AggregateNode`` (windowed ones: :mod:`.windowed`).

Spark's own aggregation for ``count`` and for built-in reducers over values Spark reads
(:mod:`streamtable.dsl.reducers`); otherwise a ``transformWithState`` processor running the
user's fold (see ``aggregate_processor``), fed with packed records (see ``pack_stage``).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from streamtable.compiler.aggregate_processor import (
    OUTPUT_DDL,
    OUTPUT_OLD_DDL,
    AggregateProcessor,
    AggregateSpec,
)
from streamtable.compiler.changelog import logged
from streamtable.compiler.codecs import (
    Codec,
    LongColumnCodec,
    PickleCodec,
    SerdeCodec,
    result_codec,
)
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.column_ops import decode_column, encode_column
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.pack_stage import PackStage
from streamtable.compiler.paged.stores import KeyValueEntries
from streamtable.topology.nodes import NATIVE_VALUE_SERDES, AggregateNode
from streamtable.topology.old_values import folds_in_python


def group_key_codec(ctx: CompileContext, node: AggregateNode) -> Codec:
    """The encoding records are grouped by: equal keys must give equal bytes."""
    from streamtable.compiler.codecs import codec_for

    return codec_for(node.key_serde or ctx.config.default_key_serde)


def native_aggregation(ctx: CompileContext, node: AggregateNode) -> str | None:
    """The Spark aggregation ``node`` lowers to (``"count"``, ``"sum"``, ``"min"``,
    ``"max"``), or ``None`` for a Python fold: always in append-only queries, and when a table
    filter after it needs old aggregates (:mod:`streamtable.topology.old_values`).
    """
    agg = node.aggregation
    if agg is None or ctx.append_only or folds_in_python(ctx.graph, node):
        return None
    return agg.native


def lower_aggregate(
    ctx: CompileContext,
    node: AggregateNode,
    parent: Frame,
    want_value: Codec | None = None,
    with_old: bool = False,
) -> Frame:
    """Aggregate ``parent`` (already keyed by :func:`group_key_codec`) per key.

    Output: a changelog frame — one row per updated key per micro-batch — keyed by the group
    key, with the aggregate as value: a native count's or Long reduction's ``bigint`` (an
    Integer reduction's serde bytes); for a Python fold the encoding ``want_value`` names when
    it is a serde's (a sink's wish) and :func:`_output_codec` allows it, else pickled.
    ``with_old`` (a Python fold only) adds a column ``old``, the key's aggregate before the
    micro-batch, pickled as ``value`` is.

    ``parent`` never comes from another stateful operator of the same query: the compiler
    cuts such a chain into sub-topologies first (:mod:`streamtable.compiler.subtopologies`).
    """
    assert not parent.stateful, f"{node.name}: chained aggregations are cut before lowering"
    agg = node.aggregation
    assert agg is not None
    df = parent.df
    # Kafka Streams drops records with a null key (and, for most aggregations, a null value);
    # a column Spark knows is never null (a Spark SQL result) needs no check per record
    nullable = {f.name: f.nullable for f in df.schema.fields}
    null_checks = {}
    if nullable["key"]:
        null_checks["null_key"] = F.col("key").isNull()
    if agg.skip_null_values and nullable["value"]:
        null_checks["null_value"] = F.col("value").isNull()
    if null_checks:
        df = count_and_drop(ctx, df, null_checks)

    native = native_aggregation(ctx, node)
    if native is not None:
        assert not with_old, f"{node.name}: old aggregates need a Python fold"
        return _lower_native(ctx, node, parent.with_(df=df), native)

    ctx.uses_tws = True
    out_codec = PickleCodec() if with_old else fold_output_codec(ctx, node, want_value)
    spec = AggregateSpec(
        node.name, agg, parent.key_codec, parent.value_codec, out_codec, with_old=with_old
    )
    pack = PackStage()
    df = df.mapInArrow(pack, pack.output_ddl())
    out = df.groupBy("page").transformWithState(
        statefulProcessor=AggregateProcessor(spec),
        outputStructType=OUTPUT_OLD_DDL if with_old else OUTPUT_DDL,
        outputMode="Update",
        timeMode="None",
    )
    ctx.stateful_operator()
    ctx.register_store(node.store_name, "key_value", parent.key_codec, KeyValueEntries())
    out = _changelog_columns(out, with_old)
    return _logged(ctx, node, Frame(out, parent.key_codec, out_codec, stateful=True))


#: Spark's aggregate function for each built-in reducer (:mod:`streamtable.dsl.reducers`)
_REDUCERS = {"sum": F.sum, "min": F.min, "max": F.max}


def native_reduce_codec(node: AggregateNode) -> Codec:
    """The encoding a built-in reducer's input values arrive in: the grouping's value serde,
    one whose bytes Spark decodes itself (the DSL lowers a reducer natively only then).
    """
    assert node.value_serde is not None and node.value_serde.kind in NATIVE_VALUE_SERDES
    return SerdeCodec(node.value_serde)


def _lower_native(ctx: CompileContext, node: AggregateNode, parent: Frame, native: str) -> Frame:
    """``count`` or a built-in reducer as Spark's own streaming aggregation (state in Spark's
    state store provider, update mode): one row per updated key per micro-batch, its
    timestamp the largest of the key's records so far, as for a Python fold.
    """
    ctx.uses_native_state = True
    codec: Codec = LongColumnCodec()
    if native == "count":
        value = F.count(F.lit(1))
    else:
        typed = decode_column(parent.value_codec, F.col("value"))
        assert typed is not None, f"{node.name}: {parent.value_codec} is not read natively"
        value = _REDUCERS[native](typed)
    out = parent.df.groupBy("key").agg(value.alias("value"), F.max("ts").alias("ts"))
    value_type = out.schema["value"].dataType
    serde = parent.value_codec.serde()
    if native == "sum" and serde is not None and serde.kind == "integer":
        # Spark sums ints as a bigint; an Integer sum stays an int (ANSI: CAST_OVERFLOW)
        out = out.withColumn("value", F.col("value").cast("int"))
        value_type = T.IntegerType()
    if not isinstance(value_type, T.LongType):
        encoded = encode_column(value_type, F.col("value"))
        assert encoded is not None, value_type
        out = out.withColumn("value", encoded[0])
        codec = encoded[1]
    ctx.stateful_operator()
    ctx.register_store(
        node.store_name, "key_value", parent.key_codec, native_entries, state_var=None
    )
    frame = Frame(_changelog_columns(out), parent.key_codec, codec, stateful=True)
    return _logged(ctx, node, frame)


def fold_output_codec(ctx: CompileContext, node: AggregateNode, want: Codec | None) -> Codec:
    """The encoding of a Python fold's updates (windowed or not): the serde of the sink they go
    to (``want``) when the store's changelog, if any, has the same serde (its writer then takes
    them as they are); else pickled, so that a changelog in another serde gets the aggregates
    themselves, not their round trip through the sink's serde.
    """
    codec = result_codec(want)
    store_serde = node.store_value_serde or ctx.config.default_value_serde
    if node.queryable and store_serde != codec.serde():
        return PickleCodec()
    return codec


def _logged(ctx: CompileContext, node: AggregateNode, frame: Frame) -> Frame:
    """A queryable store's updates also go to its changelog (:mod:`..changelog`)."""
    if not node.queryable:
        return frame
    return logged(ctx, frame, node.name, node.store_name, node.store_value_serde)


def native_entries(rows: list[tuple[Any, Any]]) -> list[tuple[bytes, int]]:
    """The contents of a native aggregation's store (``count`` or a built-in reducer):
    ``(key bytes, aggregate)`` from the rows of Spark's ``statestore`` source over the
    aggregation's state (key struct ``key``), whose value struct holds the aggregate's buffer
    first (``count``, ``sum``, ``min`` or ``max``: the aggregate itself), then the timestamp's
    (read by position: a ``max`` reducer's two fields are both named ``max``).
    """
    return [(key["key"], value[0]) for key, value in rows]


def _changelog_columns(df: DataFrame, with_old: bool = False) -> DataFrame:
    """An aggregation's output in frame columns (no source coordinates: it is a new record),
    then ``old`` when ``with_old``.
    """
    return df.select(
        "key",
        "value",
        "ts",
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("bigint").alias("offset"),
        F.lit(0).cast("bigint").alias("seq"),
        F.lit(None).cast("string").alias("topic"),
        *(["old"] if with_old else []),
    )
