"""Lowering of ``SourceNode``: Spark's Kafka source, raw bytes plus record coordinates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from streamtable.compiler.codecs import SerdeCodec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.errors import TopologyError
from streamtable.runtime.kafka_source_options import kafka_source_options
from streamtable.runtime.starting_offsets import spark_starting_offsets

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame

    from streamtable.config import StreamsConfig
    from streamtable.serde import Serde
    from streamtable.topology.nodes import SourceNode


def lower_source(ctx: CompileContext, node: SourceNode, *, rate_limited: bool = True) -> Frame:
    """Read ``node.topics`` with Spark's Kafka source.

    Keys and values stay raw bytes here (the first Python stage downstream deserializes them,
    which is where bad records are caught). ``ts`` is the Kafka record timestamp in ms.
    ``streamtable.max.offsets.per.trigger`` bounds each micro-batch's read unless
    ``rate_limited`` is false (a global table's topic: see :func:`..table.lower_table_upserts`).

    Raises
    ------
    TopologyError
        If neither the source nor the configuration gives a key or value serde.
    """
    cfg = ctx.config
    key_serde = node.key_serde or cfg.default_key_serde
    value_serde = node.value_serde or cfg.default_value_serde
    for what, serde, conf in (
        ("key", key_serde, "default.key.serde"),
        ("value", value_serde, "default.value.serde"),
    ):
        if serde is None:
            raise TopologyError(
                f"Source {node.name!r} (topics {list(node.topics)}) has no {what} serde: pass "
                f"{what}_serde= to StreamsBuilder.stream() or set {conf!r} in the config "
                f"(Kafka Streams fails too: ConfigException 'Please specify a {what} serde "
                "...')."
            )
    ctx.source_partitions[ctx.query] = ctx.source_partitions.get(ctx.query, 0) + sum(
        ctx.topic_partitions.get(t, 0) for t in node.topics
    )
    ctx.query_sources.setdefault(ctx.query, []).append(tuple(node.topics))
    if ctx.source_factory is not None:  # in-memory topics (TopologyTestDriver)
        return _frame(ctx.source_factory(node), node, key_serde, value_serde)
    reader = ctx.spark.readStream.format("kafka")
    options = source_options(cfg, node.topics, _starting_offsets(ctx, node), rate_limited)
    for k, v in options.items():
        reader = reader.option(k, v)
    return _frame(reader.load(), node, key_serde, value_serde)


def source_options(
    cfg: StreamsConfig, topics: Sequence[str], starting_offsets: str, rate_limited: bool = True
) -> dict[str, str]:
    """The options of Spark's Kafka source reading ``topics``.

    Under ``exactly_once_v2`` the consumer reads ``read_committed`` whatever
    ``consumer.isolation.level`` says, as Kafka Streams drops that setting
    (``StreamsConfig``'s ``NON_CONFIGURABLE_CONSUMER_EOS_CONFIGS``): aborted and not yet
    committed transactional records are skipped.

    >>> from streamtable.config import StreamsConfig
    >>> cfg = StreamsConfig.from_mapping({"application.id": "a", "bootstrap.servers": "b:9092",
    ...     "processing.guarantee": "exactly_once_v2",
    ...     "consumer.isolation.level": "read_uncommitted"})
    >>> source_options(cfg, ["t"], "earliest")["kafka.isolation.level"]
    'read_committed'
    """
    options = {
        "kafka.bootstrap.servers": cfg.bootstrap_servers,
        "subscribe": ",".join(topics),
        "startingOffsets": starting_offsets,
        "includeHeaders": "false",
    }
    if cfg.max_offsets_per_trigger is not None and rate_limited:
        options["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    options.update(kafka_source_options(cfg.consumer_config))
    if cfg.processing_guarantee == "exactly_once_v2":
        options["kafka.isolation.level"] = "read_committed"
    return options


def _frame(raw: DataFrame, node: SourceNode, key_serde: Serde, value_serde: Serde) -> Frame:
    """The source frame over the Kafka source's columns."""
    df = raw.select(
        F.col("key"),
        F.col("value"),
        F.unix_millis(F.col("timestamp")).alias("ts"),
        F.col("partition"),
        F.col("offset"),
        F.lit(0).cast("bigint").alias("seq"),
        F.col("topic"),
    )
    return Frame(df, SerdeCodec(key_serde), SerdeCodec(value_serde), pending_source=node)


def _starting_offsets(ctx: CompileContext, node: SourceNode) -> str:
    """Spark's ``startingOffsets``: the positions ``streamtable reset`` left, else the reset policy.

    Spark reads the option only when the query has no checkpoint yet, so positions a reset
    wrote in ``state.dir/application.id/starting-offsets.json`` apply to the first start after
    it; partitions the file does not list start from ``auto.offset.reset``.
    """
    default = node.auto_offset_reset or ctx.config.auto_offset_reset
    return spark_starting_offsets(
        ctx.config.checkpoint_dir, node.topics, ctx.topic_partitions, default
    )
