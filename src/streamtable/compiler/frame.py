"""A compiled intermediate result: a streaming DataFrame plus how to read its columns."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from streamtable.compiler.codecs import Codec

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from streamtable.compiler.changelog import ChangelogInfo
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
    fused_changelog : FusedChangelog or None
        ``df`` ends with a store's changelog stage that a Kafka sink taking these rows as they
        are can replace with changelog rows of its own (see :class:`FusedChangelog`).
    """

    df: DataFrame
    key_codec: Codec
    value_codec: Codec
    stateful: bool = False
    pending_source: SourceNode | None = None
    fused_changelog: FusedChangelog | None = None

    def with_(self, **changes: Any) -> Frame:
        """A copy with some fields changed; a derived frame no longer offers the fusion of its
        changelog stage unless ``fused_changelog`` is given again.
        """
        changes.setdefault("fused_changelog", None)
        return replace(self, **changes)


@dataclass(frozen=True)
class FusedChangelog:
    """A store's changelog that a Kafka sink right after the store can write itself.

    A :class:`Frame` whose rows are a key-value store's updates ends with a Python stage that
    produces each row to the store's changelog and passes it on unchanged
    (:class:`streamtable.compiler.changelog.ChangelogWriter`). When the store's keys and values
    are already its changelog's bytes (or a native count: Kafka's ``Long``), a sink that writes
    the rows without changing them writes one changelog row per update beside each output row
    instead, with no Python stage (:func:`streamtable.compiler.lower.sink.sink_frame`).

    Attributes
    ----------
    df : DataFrame
        The rows before the changelog stage (the same rows the stage passes on).
    topic : str
        The changelog topic.
    """

    df: DataFrame
    topic: str


#: The kinds of store a :class:`StoreLocation` holds (Kafka Streams' store types).
STORE_KINDS = ("key_value", "window", "session")


@dataclass(frozen=True)
class StoreLocation:
    """Where a state store's contents are in a query's checkpoint, and how to decode them.

    Metadata only: production never reads it; the TopologyTestDriver reads the store with
    Spark's ``statestore`` batch data source over the query's checkpoint.

    Attributes
    ----------
    query : str
        The query (checkpoint sub-folder) holding the state.
    kind : str
        ``"key_value"``, ``"window"`` or ``"session"`` (:data:`STORE_KINDS`).
    key_codec : Codec
        Decodes the stored keys (the group keys, without window).
    operator : int
        Which stateful operator of the query holds the state: its index in the order the
        compiler created the query's stateful operators (inputs before the operator reading
        them, as :meth:`CompileContext.stateful_operator` counts). Spark numbers the
        operators differently (``operatorId``); the reader maps one to the other.
    state_var : str or None
        The ``transformWithState`` state variable (``"page"`` for paged operators), or
        ``None`` for Spark's built-in aggregation state.
    decode : callable
        ``decode(rows) -> entries``: ``rows`` are the ``(key, value)`` structs the
        ``statestore`` source returns; entries are ``(key bytes, value)`` for key-value
        stores and ``(key bytes, start, end, value)`` for window and session stores (values
        as Python objects, window bounds in ms).
    """

    query: str
    kind: str
    key_codec: Codec
    operator: int = 0
    state_var: str | None = None
    decode: Callable[[list[tuple[Any, Any]]], list[tuple[Any, ...]]] | None = None


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
    #: set while lowering a query whose sink only appends (Spark's file sink): stateful
    #: operators avoid Spark's native aggregation, which appends nothing without a watermark
    append_only: bool = False
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
    #: query -> how many stateful Spark operators lowering has created in it so far
    stateful_counts: dict[str, int] = field(default_factory=dict)
    #: sinks keep the input coordinates of their rows (``sink.ORDER_COLUMNS``)
    order_columns: bool = False
    #: Python output stages write to this folder instead of Kafka (the TopologyTestDriver)
    capture_dir: str | None = None
    #: internal repartition topics of the cut topology -> partitions (set by
    #: ``compile_topology``; the runtime creates them before starting the queries)
    internal_topics: dict[str, int] = field(default_factory=dict)
    #: queryable stores' changelogs (:mod:`streamtable.compiler.changelog`), by store name
    changelogs: dict[str, ChangelogInfo] = field(default_factory=dict)
    #: queryable stores without a changelog -> why (no serde), for interactive queries' errors
    unlogged: dict[str, str] = field(default_factory=dict)
    #: the TopologyTestDriver's mocked wall clock: returns a streaming DataFrame of tick
    #: records (value = 8-byte ms) that Processor API operators read as their wall clock
    wall_clock_source: Callable[[], DataFrame] | None = None
    #: query -> what runs Python in it (operators with Python callables, sources checked in
    #: Python); recorded by ``record_ops.run_stage`` for real-time mode's error message
    python_stages: dict[str, list[str]] = field(default_factory=dict)
    #: query -> Kafka partitions its sources read (each read of a topic counts)
    source_partitions: dict[str, int] = field(default_factory=dict)
    #: query -> the topics of each Spark source it reads, in lowering order (a topic read
    #: twice is two sources): what its checkpoint's offset log must match on a restart
    query_sources: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
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

    def stateful_operator(self) -> int:
        """Count a stateful Spark operator created in the current query; its index there.

        Every lowering that creates one (an aggregation, a ``transformWithState``) calls this
        as it creates it, so the index orders the query's operators inputs first.
        """
        i = self.stateful_counts.get(self.query, 0)
        self.stateful_counts[self.query] = i + 1
        return i

    def register_store(
        self,
        name: str,
        kind: str,
        key_codec: Codec,
        decode: Callable[[list[tuple[Any, Any]]], list[tuple[Any, ...]]],
        *,
        state_var: str | None = "page",
    ) -> None:
        """Record where store ``name`` lives: in the stateful operator created last (see
        :meth:`stateful_operator`) of the current query. Metadata only (for the
        TopologyTestDriver); the first registration of a name wins (a table lowered in two
        queries is read from the first).
        """
        if not name:
            return
        assert kind in STORE_KINDS, kind
        op = self.stateful_counts.get(self.query, 0) - 1
        assert op >= 0, f"store {name!r} registered before its operator"
        self.stores.setdefault(
            name, StoreLocation(self.query, kind, key_codec, op, state_var, decode)
        )

    def first_report(self, operator: str) -> bool:
        """Whether this query is the first to lower ``operator``, and so the one that counts
        its drops (see :attr:`reporting_done`); later calls answer False.
        """
        first = operator not in self.reporting_done
        self.reporting_done.add(operator)
        return first

    def unique(self, prefix: str) -> str:
        """A name unique within this compilation (for observed metrics)."""
        self._counter += 1
        return f"{prefix}_{self._counter}"
