"""Lowering of ``FileSinkNode``: the typed columns Spark's file sink writes.

The records arrive serialized by the sink's serdes (as for a Kafka sink); the columns are then
decoded on the JVM side, without Python: text serdes to ``string``, Kafka's long and integer
encodings to ``bigint`` / ``int``, JSON with a schema to one column per field (``from_json``),
anything else kept as the serialized ``binary``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from streamtable.compiler.codecs import Codec
from streamtable.compiler.frame import Frame
from streamtable.errors import TopologyError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamtable.topology.nodes import FileSinkNode

#: The columns every file sink writes besides the key and the value's columns.
METADATA_COLUMNS = ("timestamp", "date", "topic", "partition", "offset")

_MS_PER_DAY = 86_400_000


def file_sink_frame(node: FileSinkNode, frame: Frame, key: Codec, value: Codec) -> DataFrame:
    """The rows ``node`` writes: ``key``, the value's columns, then :data:`METADATA_COLUMNS`.

    ``frame`` holds the records serialized with ``key`` and ``value`` (``value`` may be a
    native ``bigint`` when it is a count written with the long serde).

    Raises
    ------
    TopologyError
        If a value field is named like a key or metadata column, or a ``partition_by``
        column does not exist.
    """
    value_cols = _value_columns(frame, value)
    taken = {"key", *METADATA_COLUMNS}
    clash = sorted(name for name, _ in value_cols if name in taken)
    if clash:
        raise TopologyError(
            f"File sink {node.name!r} ({node.path}): the value's fields {clash} have the names "
            f"of columns the sink adds ({', '.join(sorted(taken))}); rename them in the value "
            "(map_values) or write the value as one JSON column (a JSON serde without schema)."
        )
    ts = F.col("ts")
    cols = [
        _decoded(F.col("key"), key, native_long=False).alias("key"),
        *[col.alias(name) for name, col in value_cols],
        F.timestamp_millis(ts).alias("timestamp"),
        # the UTC date, whatever spark.sql.session.timeZone says
        F.date_from_unix_date(F.floor(ts / _MS_PER_DAY).cast("int")).alias("date"),
        F.col("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("bigint").alias("offset"),
    ]
    names = ["key", *[n for n, _ in value_cols], *METADATA_COLUMNS]
    missing = [c for c in node.partition_by if c not in names]
    if missing:
        raise TopologyError(
            f"File sink {node.name!r} ({node.path}): partition_by names {missing}, which are "
            f"not columns of the output; its columns are {names}."
        )
    return frame.df.select(*cols)


def _value_columns(frame: Frame, value: Codec) -> list[tuple[str, Column]]:
    serde = value.serde()
    raw = F.col("value")
    ddl = serde.spark_ddl() if serde is not None and serde.kind == "json" else None  # type: ignore[attr-defined]
    if ddl:
        parsed = F.from_json(raw.cast("string"), ddl)
        fields = [name for name, _ in serde.schema.items()]  # type: ignore[union-attr]
        return [(name, parsed.getField(name)) for name in fields]
    return [("value", _decoded(raw, value, native_long=frame.value_codec.native_long))]


def _decoded(col: Column, codec: Codec, *, native_long: bool) -> Column:
    """``col`` (serialized by ``codec``'s serde) as the column type of the serde's kind."""
    serde = codec.serde()
    kind = serde.kind if serde is not None else "custom"
    if native_long:
        return col.cast("bigint")
    if kind in ("string", "json"):
        return col.cast("string")
    if kind == "long":
        return _twos_complement(col, 64).cast("bigint")
    if kind == "integer":
        return _twos_complement(col, 32).cast("int")
    return col.cast("binary")


def _twos_complement(col: Column, bits: int) -> Column:
    """The signed big-endian integer in binary ``col`` (Kafka's Long/Integer serializers)."""
    unsigned = F.conv(F.hex(col), 16, 10).cast("decimal(20,0)")
    half = F.lit(str(2 ** (bits - 1))).cast("decimal(20,0)")
    full = F.lit(str(2**bits)).cast("decimal(20,0)")
    return F.when(col.isNull(), None).otherwise(
        F.when(unsigned >= half, unsigned - full).otherwise(unsigned)
    )
