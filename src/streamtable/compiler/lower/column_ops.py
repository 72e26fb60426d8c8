"""Lowering of stateless operations given as column expressions: Spark SQL, no Python.

A run of consecutive record operations whose functions are column expressions
(:mod:`streamtable.functions`) becomes one ``select``/``where``/``posexplode`` over typed
``key`` and ``value`` columns, decoded from the frame's bytes with Spark expressions and
encoded back the same way. Only serdes whose bytes Spark can read and write itself take part:

======================  ===========  ==================================================
serde                   column type  bytes
======================  ===========  ==================================================
``Serdes.string()``     ``string``   UTF-8 (invalid sequences read as U+FFFD, as Java)
``Serdes.bytes()``      ``binary``   as they are
``Serdes.long()``       ``bigint``   8 bytes, big-endian two's complement
``Serdes.integer()``    ``int``      4 bytes, big-endian two's complement
======================  ===========  ==================================================

Semantics follow the Python path's: ``filter`` keeps a record when the predicate is true
(``NULL`` drops it, as a falsy Python result does), ``flat_map_values`` gives one record per
array element in order with the sequence numbers the Python stage gives (``seq * 1024 +
index``), timestamps and source coordinates pass through unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from streamtable.columns import is_column_expression, resolve_column
from streamtable.compiler.codecs import Codec, PresenceCodec, SerdeCodec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.record_ops import presence
from streamtable.compiler.record_stage import StageOp
from streamtable.errors import TopologyError
from streamtable.serde import Serdes
from streamtable.topology.nodes import RecordOpKind

log = logging.getLogger("streamtable")

__all__ = ["decode_column", "encode_column", "is_column_op", "run_columns", "segments"]

_KEY_BYTES, _VALUE_BYTES = "__st_key_bytes", "__st_value_bytes"
_POS, _ELEM = "__st_pos", "__st_elem"
_COORDINATES = ("ts", "partition", "offset", "seq", "topic")
_SUPPORTED = "Serdes.string(), Serdes.bytes(), Serdes.long() or Serdes.integer()"
_RESULT_TYPES = "string, binary, bigint or int"
_OPERATION = {
    RecordOpKind.FILTER: "KStream.filter/filter_not",
    RecordOpKind.MAP_VALUES: "KStream.map_values",
    RecordOpKind.FLAT_MAP_VALUES: "KStream.flat_map_values",
    RecordOpKind.SELECT_KEY: "KStream.select_key/group_by",
}


def is_column_op(op: StageOp) -> bool:
    """Whether ``op``'s function is a column expression."""
    return is_column_expression(op.fn)


def segments(ops: tuple[StageOp, ...]) -> list[tuple[bool, tuple[StageOp, ...]]]:
    """``ops`` cut into maximal runs of column operations (``True``) and Python ones."""
    out: list[tuple[bool, tuple[StageOp, ...]]] = []
    for op in ops:
        native = is_column_op(op)
        if out and out[-1][0] == native:
            out[-1] = (native, (*out[-1][1], op))
        else:
            out.append((native, (op,)))
    return out


def _serde_kind(codec: Codec) -> str | None:
    serde = codec.serde()
    return None if serde is None else serde.kind


def decode_column(codec: Codec, data: Column) -> Column | None:
    """The typed column of ``codec``'s bytes ``data``, or ``None`` if Spark cannot read them."""
    if codec.native_long:
        return data
    kind = _serde_kind(codec)
    if kind == "string":
        return F.make_valid_utf8(data.cast("string"))
    if kind == "bytes":
        return data
    if kind in ("long", "integer"):
        n = F.conv(F.hex(data), 16, -10).cast("bigint")  # signed 64-bit of the hex digits
        if kind == "long":
            return n
        return F.when(n >= 2**31, n - 2**32).otherwise(n).cast("int")
    return None


def encode_column(dtype: T.DataType, typed: Column) -> tuple[Column, Codec] | None:
    """``typed`` as the bytes of its type's serde (see the module doc), or ``None``."""
    if isinstance(dtype, T.StringType):
        return typed.cast("binary"), SerdeCodec(Serdes.string())
    if isinstance(dtype, T.BinaryType):
        return typed, SerdeCodec(Serdes.bytes())
    if isinstance(dtype, T.LongType):
        return F.unhex(F.lpad(F.hex(typed), 16, "0")), SerdeCodec(Serdes.long())
    if isinstance(dtype, T.IntegerType | T.ShortType | T.ByteType):
        hex16 = F.lpad(F.hex(typed.cast("int")), 16, "0")  # hex of a negative int: 16 digits
        return F.unhex(F.substring(hex16, 9, 8)), SerdeCodec(Serdes.integer())
    return None


def _why_not(codec: Codec) -> str:
    serde = codec.serde()
    if serde is None:
        return "it holds Python objects (an earlier Python callable or operator made it)"
    return f"its serde is {serde.name}"


class _Columns:
    """The typed ``key``/``value`` columns of one run, and what changed them."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.unreadable: dict[str, str] = {}
        self.changed_by: dict[str, StageOp] = {}
        df = frame.df.select(
            F.col("key").alias(_KEY_BYTES), F.col("value").alias(_VALUE_BYTES), *_COORDINATES
        )
        typed: dict[str, Column] = {}
        for name, data, codec in (
            ("key", _KEY_BYTES, frame.key_codec),
            ("value", _VALUE_BYTES, frame.value_codec),
        ):
            column = decode_column(codec, F.col(data))
            if column is None:
                self.unreadable[name] = _why_not(codec)
            else:
                typed[name] = column
        self.df = df.withColumns(typed) if typed else df

    def typed(self, op: StageOp, column: Any) -> tuple[Column, T.DataType]:
        """``op``'s expression resolved against the run's columns, and its type.

        The expression must give one value per record: a generator (``explode``), an
        aggregate or a window function would change the number of records, so each is
        refused here (Spark refuses them in a ``WHERE``, which the probe uses).
        """
        try:
            c = resolve_column(column)
        except TopologyError as e:
            raise self.error(op, str(e).rstrip(".")) from None
        if not isinstance(c, Column):
            raise self.error(op, f"it is a {type(c).__name__}, not a pyspark.sql.Column")
        # PySpark logs a failed analysis at ERROR level by itself: the error raised says it all
        quiet = logging.getLogger("DataFrameQueryContextLogger")
        was, quiet.disabled = quiet.disabled, True
        try:
            dtype = self.df.select(c.alias("__st_probe")).schema["__st_probe"].dataType
            self.df.where(F.isnull(c) | F.lit(True)).schema  # noqa: B018 (analysis only)
        except AnalysisException as e:
            reason = (e.getMessage() or str(e)).strip().splitlines()[0]
            raise self.error(op, f"Spark cannot evaluate it per record: {reason}") from None
        finally:
            quiet.disabled = was
        return c, dtype

    def error(self, op: StageOp, problem: str) -> TopologyError:
        hint = "".join(
            f" The {name} is not a column here: {why}; column expressions read {_SUPPORTED}."
            for name, why in self.unreadable.items()
        )
        return TopologyError(
            f"{_OPERATION.get(op.kind, op.kind.value)} of node {op.node_name!r} is the column "
            f"expression {op.fn!r}: {problem}.{hint} Change the expression, or use a Python "
            "callable."
        )


def run_columns(
    ctx: CompileContext,
    base: Frame,
    ops: tuple[StageOp, ...],
    *,
    want_key: Codec | None = None,
    want_value: Codec | None = None,
) -> Frame:
    """Apply the column operations ``ops`` to ``base`` as Spark SQL.

    Output columns are encoded as wanted when Spark can produce that encoding (the serde of
    the column's type, or a :class:`PresenceCodec`), else in the serde of their type (see the
    module doc); an unchanged column keeps its bytes.

    Raises
    ------
    TopologyError
        If an expression cannot be evaluated over the frame (a column that is not there, a
        type error), a ``filter`` is not boolean, a ``flat_map_values`` is not an array, or a
        result has a type no serde above holds; the message names the operator and the
        expression.
    """
    if base.pending_source is not None:
        from streamtable.compiler.lower.record_ops import validated

        base = validated(ctx, base)  # raw strings and bytes as they are; else a Python stage
    cfg = ctx.config
    if cfg.processing_exception_handler == "log_and_continue" or cfg.dead_letter_queue_topic:
        log.warning(
            "streamtable: %s run as Spark SQL, which the processing exception handler does not "
            "cover: a record on which a Spark function fails (an ANSI cast, a division by zero) "
            "stops the query. Use Spark's try_* functions (try_cast, try_divide, "
            "try_element_at) to get NULL instead.",
            ", ".join(repr(op.node_name) for op in ops),
        )
    run = _Columns(base)
    for op in ops:
        _apply(run, op)
    key, key_codec = _output(run, "key", _KEY_BYTES, base.key_codec, want_key)
    value, value_codec = _output(run, "value", _VALUE_BYTES, base.value_codec, want_value)
    df = run.df.select(key.alias("key"), value.alias("value"), *_COORDINATES)
    return Frame(df, key_codec, value_codec, stateful=base.stateful)


def _apply(run: _Columns, op: StageOp) -> None:
    kind = op.kind
    c, dtype = run.typed(op, op.fn)
    if kind is RecordOpKind.FILTER:
        if not isinstance(dtype, T.BooleanType):
            raise run.error(op, f"a predicate must be boolean, this one is {dtype.simpleString()}")
        run.df = run.df.where(F.coalesce(c, F.lit(False)))
    elif kind is RecordOpKind.MAP_VALUES:
        run.df = run.df.withColumn("value", c)
        run.changed_by["value"] = op
    elif kind is RecordOpKind.SELECT_KEY:
        run.df = run.df.withColumn("key", c)
        run.changed_by["key"] = op
    elif kind is RecordOpKind.FLAT_MAP_VALUES:
        if not isinstance(dtype, T.ArrayType):
            raise run.error(op, f"it must give an array, this one is {dtype.simpleString()}")
        run.df = (
            run.df.select("*", F.posexplode(c).alias(_POS, _ELEM))
            .withColumn("value", F.col(_ELEM))
            .withColumn("seq", F.col("seq") * 1024 + F.col(_POS))
            .drop(_POS, _ELEM)
        )
        run.changed_by["value"] = op
    else:
        raise run.error(op, f"{kind.value} takes a Python callable only")
    for name in run.changed_by:
        run.unreadable.pop(name, None)


def _output(
    run: _Columns, name: str, data: str, codec: Codec, want: Codec | None
) -> tuple[Column, Codec]:
    """The bytes of column ``name`` after the run, and their codec."""
    op = run.changed_by.get(name)
    if op is None:  # unchanged: its bytes as they came, unless the consumer wants presence
        if isinstance(want, PresenceCodec) and codec != want:
            return presence(F.col(data)), want
        return F.col(data), codec
    field = run.df.schema[name]
    dtype = field.dataType
    typed = F.col(name)
    if isinstance(want, PresenceCodec):
        return (presence(typed) if field.nullable else F.lit(b"")), want
    if want is not None and want.native_long and isinstance(dtype, T.LongType):
        return typed, want
    encoded = encode_column(dtype, typed)
    if encoded is None:
        raise run.error(
            op,
            f"it gives a {dtype.simpleString()} {name}; a {name} made by a column expression "
            f"must be {_RESULT_TYPES} (cast it, e.g. .cast('string'))",
        )
    return encoded
