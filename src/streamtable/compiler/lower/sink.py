"""Lowering of ``SinkNode``: serialize with the sink's serdes and write with Spark's Kafka sink."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamtable.compiler.codecs import Codec, SerdeCodec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.errors import TopologyError
from streamtable.serde import Serde
from streamtable.serde.murmur2 import default_partition, default_partitions
from streamtable.serde.windowed import SessionWindowedSerde, TimeWindowedSerde
from streamtable.topology.nodes import FileSinkNode, SinkNode

#: The column of :func:`sink_frame` with each record's event time (ms). streamtable's own sink
#: (:mod:`streamtable.runtime.kafka_sink`, used under exactly-once) writes it as the Kafka record
#: timestamp, as Kafka Streams does; Spark's Kafka sink cannot (its 4.2.0 connector from Maven
#: Central takes only key, value, topic, partition and headers), so the runtime drops the column
#: there and records carry the producer's send time.
TIMESTAMP_COLUMN = "ts"
#: The column of :func:`sink_frame` naming the source partition (``topic-partition``) a task of a
#: stateless query reads. Spark numbers such tasks in an order that can differ when a batch is
#: re-run after a restart, so the exactly-once writer keys its transactions and markers by this
#: name instead of the task number. Null after a shuffle (tasks are then numbered by key hash).
SOURCE_SLOT_COLUMN = "src"


def sink_codecs(
    ctx: CompileContext, node: SinkNode | FileSinkNode, key_hint: Codec, value_hint: Codec
) -> tuple[Codec, Codec]:
    """The codecs the sink writes: its serdes, else the configured defaults, else the stream's.

    Raises
    ------
    TopologyError
        If no serde is known for the key or value.
    """
    files = isinstance(node, FileSinkNode)
    where = f"path {node.path!r}" if files else f"topic {node.topic!r}"  # type: ignore[union-attr]
    method = "to_files" if files else "to"
    out: list[Codec] = []
    for what, serde, default, hint in (
        ("key", node.key_serde, ctx.config.default_key_serde, key_hint),
        ("value", node.value_serde, ctx.config.default_value_serde, value_hint),
    ):
        chosen: Serde | None = serde or hint.serde() or default
        if chosen is None:
            raise TopologyError(
                f"Sink {node.name!r} ({where}) has no {what} serde for the records "
                f"it writes: pass {what}_serde= to KStream.{method}() or set "
                f"'default.{what}.serde' in the config (Kafka Streams fails too: "
                f"ConfigException 'Please specify a {what} serde ...')."
            )
        out.append(SerdeCodec(chosen))
    return out[0], out[1]


@dataclass(frozen=True)
class WindowedPartitioner:
    """Kafka Streams' ``WindowedStreamPartitioner``: a windowed key's partition is that of its
    inner key (``toPositive(murmur2(inner key bytes)) % partitions``), so every window of a key
    lands in one partition. ``StreamSinkNode`` installs it for every sink whose key serializer
    is windowed; a ``None`` key goes to the producer (sticky partitioning).

    Examples
    --------
    >>> from streamtable import Serdes
    >>> from streamtable.serde import Windowed
    >>> p = WindowedPartitioner(Serdes.string())
    >>> {p(Windowed("alice", start, start + 60_000), 1, 6) for start in range(0, 240_000, 60_000)}
    {3}
    """

    inner: Serde

    def __call__(self, key: Any, value: Any, num_partitions: int) -> int | None:
        """The partition of windowed ``key`` (``None`` for a null key)."""
        if key is None:
            return None
        return default_partition(self.inner.serialize(key.key), num_partitions)

    def over_bytes(
        self, key_serde: Serde | None, num_partitions: int
    ) -> Callable[[pa.Array], pa.Array] | None:
        """The partitions of a column of windowed keys already serialized with ``key_serde``,
        from their bytes (the inner key's bytes are a prefix of the windowed key's): the same
        partitions as :meth:`__call__` gives the deserialized keys, hashed with numpy instead
        of one Python call per key. ``None`` when ``key_serde`` is not a windowed serde of this
        partitioner's inner serde, or the partition count is unknown (the caller then calls the
        partitioner per key).

        Examples
        --------
        >>> from streamtable import Serdes
        >>> from streamtable.serde import Windowed
        >>> p = WindowedPartitioner(Serdes.string())
        >>> serde = Serdes.time_windowed(Serdes.string(), 60_000)
        >>> keys = pa.array([serde.serialize(Windowed("alice", 0, 60_000)), None], pa.binary())
        >>> p.over_bytes(serde, 6)(keys).to_pylist()
        [3, None]
        >>> p.over_bytes(Serdes.string(), 6) is None
        True
        """
        if num_partitions <= 0 or getattr(key_serde, "inner", None) != self.inner:
            return None
        if isinstance(key_serde, TimeWindowedSerde):
            drop_last = 8  # the window start
        elif isinstance(key_serde, SessionWindowedSerde):
            drop_last = 16  # the session's end and start
        else:
            return None
        return partial(default_partitions, num_partitions=num_partitions, drop_last=drop_last)


def windowed_partitioner(key: Codec) -> WindowedPartitioner | None:
    """The partitioner of a sink writing keys with codec ``key``: a
    :class:`WindowedPartitioner` for a time- or session-windowed serde, else ``None``.

    >>> from streamtable import Serdes
    >>> windowed_partitioner(SerdeCodec(Serdes.session_windowed(Serdes.long())))
    WindowedPartitioner(inner=Serdes.long())
    >>> windowed_partitioner(SerdeCodec(Serdes.string())) is None
    True
    """
    serde = key.serde()
    if isinstance(serde, TimeWindowedSerde | SessionWindowedSerde):
        return WindowedPartitioner(serde.inner)
    return None


def long_to_bytes(column: str) -> F.Column:
    """8-byte big-endian two's complement of a bigint column (Kafka's ``LongSerializer``)."""
    return F.unhex(F.lpad(F.hex(F.col(column)), 16, "0"))


#: Columns :func:`sink_frame` adds with ``order_columns=True`` (the TopologyTestDriver): the
#: coordinates of the input record a row derives from and its ``seq`` (e.g. a table
#: re-grouping's subtraction before its addition), to put one micro-batch's rows in processing
#: order.
ORDER_COLUMNS = ("_order_partition", "_order_offset", "_order_seq")


def sink_frame(
    node: SinkNode, frame: Frame, key: Codec, value: Codec, *, order_columns: bool = False
) -> DataFrame:
    """The ``key, value, topic[, partition], ts, src`` rows a Kafka sink writes (``ts`` in ms).

    A frame that offers its changelog stage for fusion (``frame.fused_changelog``: the updates
    of a store whose changelog bytes are its columns) is written without that stage: each
    update becomes the sink's row and the changelog's row (``topic`` the changelog's; none
    for a null key, which the stage skips too), so both reach Kafka through the sink's
    producer, in the sink's transaction under exactly-once.
    """
    fused = frame.fused_changelog
    df = frame.df if fused is None else fused.df
    if frame.value_codec.native_long:
        serde = value.serde()
        assert serde is not None and serde.kind == "long"
        value_col = long_to_bytes("value").alias("value")
    else:
        value_col = F.col("value")
    cols = [F.col("key"), value_col, F.lit(node.topic).alias("topic")]
    if "sink_partition" in df.columns:
        cols.append(F.col("sink_partition").alias("partition"))
    ts = F.col("ts").alias(TIMESTAMP_COLUMN)
    if frame.stateful:
        src = F.lit(None).cast("string").alias(SOURCE_SLOT_COLUMN)
    else:  # a Spark task holds one source partition, but tasks are not numbered stably
        src = F.concat_ws("-", F.col("topic"), F.col("partition").cast("string")).alias(
            SOURCE_SLOT_COLUMN
        )
    cols += [ts, src]
    if fused is not None:
        assert not order_columns and "sink_partition" not in df.columns
        changelog = F.struct(F.col("key"), value_col, F.lit(fused.topic).alias("topic"), ts, src)
        both = F.array(F.struct(*cols), F.when(F.col("key").isNotNull(), changelog))
        return df.select(F.inline(both)).where(F.col("topic").isNotNull())
    if order_columns:
        for name, col in zip(ORDER_COLUMNS, ("partition", "offset", "seq"), strict=True):
            cols.append(F.col(col).alias(name))
    return df.select(*cols)


def native_long_ok(frame: Frame, value: Codec) -> bool:
    """A native ``bigint`` (a count or a Long reduction) can be written as Kafka's Long without
    Python.
    """
    serde = value.serde()
    return frame.value_codec.native_long and serde is not None and serde.kind == "long"
