"""A compiled intermediate result: a streaming DataFrame plus how to read its columns."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from streamtable.compiler.codecs import Codec

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from streamtable.config import StreamsConfig
    from streamtable.runtime.task_output import OutputSpec
    from streamtable.topology.nodes import GraphSnapshot, SourceNode


@dataclass(frozen=True)
class Frame:
    """A node's output as Spark sees it.

    Attributes
    ----------
    df : DataFrame
        Columns ``key, value, ts, partition, offset, seq, topic`` (``value`` is ``bigint``
        when ``value_codec.native_long``).
    key_codec, value_codec : Codec
        How the ``key`` and ``value`` columns encode Python objects.
    stateful : bool
        An aggregation is upstream: the query runs in update output mode.
    pending_source : SourceNode or None
        The columns are still raw topic bytes nobody has deserialized (and so validated).
    shuffled : bool
        An explicit repartition redistributed the records: Spark tasks no longer hold each
        source partition's records in offset order.
    """

    df: DataFrame
    key_codec: Codec
    value_codec: Codec
    stateful: bool = False
    pending_source: SourceNode | None = None
    shuffled: bool = False

    def with_(self, **changes: Any) -> Frame:
        """A copy with some fields changed."""
        return replace(self, **changes)


@dataclass(frozen=True)
class StoreLocation:
    """Where a state store's contents are in a query's checkpoint, and how to decode them.

    Attributes
    ----------
    query : str
        The query (checkpoint sub-folder) holding the state.
    kind : str
        ``"native_count"``: Spark's aggregation state (key ``key`` binary, value ``count``).
    key_codec : Codec
        Decodes the stored keys.
    """

    query: str
    kind: str
    key_codec: Codec


@dataclass
class CompileContext:
    """What lowering needs besides the graph: Spark, the configuration, topic metadata."""

    spark: SparkSession
    config: StreamsConfig
    graph: GraphSnapshot
    topic_partitions: dict[str, int] = field(default_factory=dict)
    metric_names: list[str] = field(default_factory=list)
    #: set while lowering one query: its name (the terminal node's; stable across restarts)
    query: str = ""
    #: set while lowering one query: which kinds of Spark state it uses
    uses_tws: bool = False
    uses_native_state: bool = False
    #: operators whose drops are already counted (and late records written) by one query;
    #: another query lowering the same operator (a table read by two sinks) only filters
    reporting_done: set[str] = field(default_factory=set)
    #: stable ids of the output stages that write to Kafka from Python tasks (late records,
    #: dead letters); the runtime fences their earlier transactions on start
    output_stages: list[str] = field(default_factory=list)
    #: replaces Spark's Kafka source (the TopologyTestDriver's in-memory topics): called with
    #: the source node, returns a streaming DataFrame with the Kafka source's columns
    #: ``key, value`` (binary), ``timestamp``, ``partition``, ``offset``, ``topic``
    source_factory: Callable[[SourceNode], DataFrame] | None = None
    #: store name -> where its state lives (for reading it between micro-batches: the
    #: TopologyTestDriver's ``get_key_value_store``); registered by the lowering modules
    stores: dict[str, StoreLocation] = field(default_factory=dict)
    #: sinks keep the input coordinates of their rows (``sink.ORDER_COLUMNS``)
    order_columns: bool = False
    #: Python output stages write to this folder instead of Kafka (the TopologyTestDriver)
    capture_dir: str | None = None
    _counter: int = 0

    def output_spec(self, stage: str) -> OutputSpec:
        """The :class:`OutputSpec` of a Python stage writing to Kafka in the current query.

        ``stage`` is made unique per query (``"<query>.<stage>"``) and recorded.
        """
        from streamtable.runtime.task_output import output_spec

        spec = output_spec(self.config, f"{self.query}.{stage}")
        if self.capture_dir is not None:
            spec = replace(spec, capture_dir=self.capture_dir)
        self.output_stages.append(spec.stage)
        return spec

    def unique(self, prefix: str) -> str:
        """A name unique within this compilation (for observed metrics)."""
        self._counter += 1
        return f"{prefix}_{self._counter}"
