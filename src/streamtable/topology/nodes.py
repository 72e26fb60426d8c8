"""The core nodes of a topology graph.

Every DSL operation becomes one of a handful of core nodes; the compiler has one lowering
module per core node (``streamtable.compiler``). Sugar such as ``filter_not``, ``map_values``,
``select_key`` or ``count`` is expressed through these nodes and never lowered separately.

| core node | DSL operations |
|---|---|
| :class:`SourceNode` | ``StreamsBuilder.stream`` |
| :class:`RecordOpNode` | ``filter``, ``filter_not``, ``map``, ``map_values``, ``flat_map``,
  ``flat_map_values``, ``select_key``, ``peek``, ``foreach``, KTable ``filter``/``map_values``/
  ``to_stream`` |
| :class:`MergeNode` | ``merge`` |
| :class:`RepartitionNode` | ``repartition``, the implicit repartition of ``group_by`` |
| :class:`AggregateNode` | ``count``, ``reduce``, ``aggregate`` (windowed or not) |
| :class:`TableSourceNode` | ``StreamsBuilder.table``, ``StreamsBuilder.global_table`` |
| :class:`TableOpNode` | KTable ``filter``/``filter_not``/``map_values``, ``group_by`` (re-keying) |
| :class:`TableAggregateNode` | KGroupedTable ``count``, ``reduce``, ``aggregate`` |
| :class:`SuppressNode` | ``KTable.suppress`` |
| :class:`JoinNode` | every ``join``/``left_join``/``outer_join``, incl. the KTable
  foreign-key join |
| :class:`SinkNode` | ``to`` |
| :class:`FileSinkNode` | ``to_files`` |

Nodes are immutable; a node refers to its parents by name. A node's name is the name of the
Kafka Streams processor whose output it is (the name a ``KStream``/``KTable`` handle carries in
Kafka Streams); the other processors Kafka Streams builds for it (a repartition's filter, sink and
source, a join's two sides, ...) are named in :attr:`Node.kafka_names`, for ``describe()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamtable.serde import Serde


class RecordOpKind(str, Enum):
    """How a :class:`RecordOpNode` applies its function to one record ``(key, value)``."""

    FILTER = "filter"  #: ``fn(key, value) -> bool``; keep the record when true
    MAP = "map"  #: ``fn(key, value) -> (key, value)``
    SELECT_KEY = "select_key"  #: ``fn(key, value) -> key``; the value is kept
    MAP_VALUES = "map_values"  #: ``fn(value) -> value``; the key is kept
    FLAT_MAP = "flat_map"  #: ``fn(key, value) -> iterable of (key, value)``
    FLAT_MAP_VALUES = "flat_map_values"  #: ``fn(value) -> iterable of values``; key kept
    PEEK = "peek"  #: ``fn(key, value)`` called for its side effect; the record passes unchanged
    IDENTITY = "identity"  #: the record passes unchanged (``KTable.to_stream``); no Python runs


@dataclass(frozen=True, eq=False)
class Node:
    """Base class: a named node with the names of its parent nodes."""

    name: str
    parents: tuple[str, ...]
    #: the names of the other Kafka Streams processors, topics and stores this node stands for,
    #: by role (e.g. ``{"sink": ..., "source": ...}`` of a repartition); only
    #: :mod:`streamtable.topology.describe` reads them
    kafka_names: Mapping[str, str] = field(default_factory=dict, kw_only=True)

    #: Kafka Streams' description kind: "Source", "Processor" or "Sink".
    description_kind = "Processor"

    @property
    def stores(self) -> tuple[str, ...]:
        """Names of the state stores this node owns (empty for stateless nodes)."""
        return ()


@dataclass(frozen=True, eq=False)
class SourceNode(Node):
    """Reads records from one or more Kafka topics (Kafka Streams' ``KSTREAM-SOURCE``).

    The serdes are ``None`` when the topology relies on ``default.key.serde`` /
    ``default.value.serde`` from the configuration.
    """

    topics: tuple[str, ...] = ()
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    timestamp_extractor: Callable[..., int] | None = None
    auto_offset_reset: str | None = None
    #: reads an internal repartition topic the compiler added (see
    #: :mod:`streamtable.compiler.subtopologies`); never set by the DSL
    internal: bool = False

    description_kind = "Source"


@dataclass(frozen=True, eq=False)
class RecordOpNode(Node):
    """A stateless per-record operation (see :class:`RecordOpKind`).

    ``changes_key`` marks operations after which Kafka Streams marks the stream for
    repartitioning (``map``, ``flat_map``, ``select_key``). ``terminal`` marks ``foreach``.
    ``op_label`` is the Kafka Streams operator name used in generated node names
    (``FILTER``, ``MAPVALUES``, ``KEY-SELECT``, ...).
    """

    kind: RecordOpKind = RecordOpKind.MAP
    fn: Callable[..., Any] | None = None
    op_label: str = "MAP"
    changes_key: bool = False
    terminal: bool = False


@dataclass(frozen=True, eq=False)
class MergeNode(Node):
    """Union of two or more streams; keeps each input's order, none across inputs."""


@dataclass(frozen=True, eq=False)
class RepartitionNode(Node):
    """Redistributes records by key (Kafka Streams' ``<application.id>-<name>-repartition``).

    On Spark the repartition is a shuffle by the serialized key; ``topic_name`` is the
    internal topic Kafka Streams would create, shown by ``describe()``. ``kafka_names`` holds
    Kafka Streams' ``filter`` (absent before a ``KTable.group_by`` aggregation), ``sink`` and
    ``source`` processor names.
    """

    topic_name: str = ""
    num_partitions: int | None = None
    key_serde: Serde | None = None
    value_serde: Serde | None = None


@dataclass(frozen=True)
class TimeWindowSpec:
    """Epoch-aligned time windows ``[start, start + size_ms)`` every ``advance_ms`` (ms)."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    def windows_for(self, timestamp: int) -> list[int]:
        """Start times (ms) of every window containing ``timestamp``.

        Follows Kafka Streams' ``TimeWindows.windowsFor``: windows start at multiples of the
        advance, no window starts before 0.

        >>> TimeWindowSpec(size_ms=10, advance_ms=3, grace_ms=0).windows_for(12)
        [3, 6, 9, 12]
        >>> TimeWindowSpec(size_ms=10, advance_ms=10, grace_ms=0).windows_for(12)
        [10]
        """
        if self.advance_ms == self.size_ms:  # tumbling: the one window, if it starts >= 0
            return [timestamp - timestamp % self.size_ms] if timestamp >= 0 else []
        start = max(0, timestamp - self.size_ms + self.advance_ms)
        start -= start % self.advance_ms
        starts = []
        while start <= timestamp:
            starts.append(start)
            start += self.advance_ms
        return starts

    def bounds_for(self, timestamp: int) -> list[tuple[int, int]]:
        """``(start, end)`` (ms, end exclusive) of every window containing ``timestamp``.

        >>> TimeWindowSpec(size_ms=10, advance_ms=5, grace_ms=0).bounds_for(12)
        [(5, 15), (10, 20)]
        """
        return [(s, s + self.size_ms) for s in self.windows_for(timestamp)]


@dataclass(frozen=True)
class CustomWindowSpec:
    """User-defined time windows: a :class:`streamtable.Windows` subclass (Kafka Streams'
    ``Windows<TimeWindow>`` subclasses), aggregated like the built-in time windows.

    ``name`` is the subclass's qualified name, ``size_ms`` its ``size()`` and ``grace_ms`` its
    ``grace_period()`` (ms); ``windows`` is the object itself, asked for the windows of each
    record (``windows_for``) where the aggregation runs.
    """

    name: str
    size_ms: int
    grace_ms: int
    windows: Any = field(compare=False, repr=False)

    def bounds_for(self, timestamp: int) -> list[tuple[int, int]]:
        """``(start, end)`` of the windows ``windows.windows_for(timestamp)`` returns, by start.

        Raises
        ------
        TypeError
            If ``windows_for`` does not return a mapping of int starts to windows whose
            ``start`` equals the key and whose ``end`` is after it (Kafka's ``TimeWindow``).
        """
        found = self.windows.windows_for(timestamp)
        if not isinstance(found, Mapping):
            raise TypeError(
                f"{self.name}.windows_for({timestamp}) must return a dict "
                f"{{start ms: TimeWindow}}; got {type(found).__name__}"
            )
        bounds = []
        for start, window in found.items():
            end = getattr(window, "end", None)
            if (
                isinstance(start, bool)
                or not isinstance(start, int)
                or getattr(window, "start", None) != start
                or isinstance(end, bool)
                or not isinstance(end, int)
                or end <= start
            ):
                raise TypeError(
                    f"{self.name}.windows_for({timestamp}) returned {start!r}: {window!r}; "
                    "each entry must be start ms -> TimeWindow(start, end) with end > start"
                )
            bounds.append((start, end))
        bounds.sort()
        return bounds

    def fingerprint(self) -> dict[str, object]:
        """What a checkpoint of this window's aggregation depends on."""
        return {"name": self.name, "size_ms": self.size_ms, "grace_ms": self.grace_ms}


@dataclass(frozen=True)
class SlidingWindowSpec:
    """Kafka Streams' sliding windows: ``[start, start + time_difference_ms]``, both ends
    inclusive, created where records enter or leave a window (ms).
    """

    time_difference_ms: int
    grace_ms: int

    @property
    def size_ms(self) -> int:
        """The window length: its end is ``start + size_ms`` (inclusive)."""
        return self.time_difference_ms


@dataclass(frozen=True)
class SessionWindowSpec:
    """Session windows: records of a key closer than ``inactivity_gap_ms`` share a session
    ``[first ts, last ts]`` (both inclusive, ms).
    """

    inactivity_gap_ms: int
    grace_ms: int


#: Any window specification of a windowed aggregation.
WindowSpec = TimeWindowSpec | CustomWindowSpec | SlidingWindowSpec | SessionWindowSpec


def default_retention_ms(windows: WindowSpec) -> int:
    """Kafka Streams' default (and minimum) window-store retention: window size + grace;
    sessions: gap + grace; sliding windows: twice the time difference + grace
    (``SlidingWindowStoreMaterializer``).
    """
    if isinstance(windows, SessionWindowSpec):
        return windows.inactivity_gap_ms + windows.grace_ms
    if isinstance(windows, SlidingWindowSpec):
        return 2 * windows.time_difference_ms + windows.grace_ms
    return windows.size_ms + windows.grace_ms


#: The serde kinds (``Serde.kind``) of the values a built-in reducer folds in Spark itself
#: (:mod:`streamtable.dsl.reducers`): their bytes are read by Spark expressions.
NATIVE_VALUE_SERDES = ("long", "integer")


@dataclass(frozen=True)
class Aggregation:
    """A fold over the values of one key: ``agg = aggregator(key, value, agg)``.

    ``initializer()`` gives the starting aggregate. ``native`` names a built-in Spark
    aggregation that yields the same result (``"count"``; ``"sum"``, ``"min"``, ``"max"`` for
    a built-in reducer over values Spark reads, see :mod:`streamtable.dsl.reducers`), used by
    the compiler instead of calling Python per record. ``skip_null_values`` follows
    ``KStreamAggregate``: records with a null key or a null value are skipped.
    """

    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    native: str | None = None
    skip_null_values: bool = True
    #: session windows: ``merger(key, agg1, agg2)`` combines the aggregates of merged sessions
    merger: Callable[[Any, Any, Any], Any] | None = None


@dataclass(frozen=True, eq=False)
class AggregateNode(Node):
    """Groups records by key (and window) and folds them into a table.

    Output: a changelog of the aggregate per key — ``(key, aggregate)`` for unwindowed,
    ``(Windowed(key, start, end), aggregate)`` for windowed aggregations. Null keys are
    skipped and counted, as in Kafka Streams.
    """

    store_name: str = ""
    aggregation: Aggregation | None = None
    windows: WindowSpec | None = None
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    op_label: str = "AGGREGATE"
    #: how long (ms) a window is kept after its start; default: window size + grace
    retention_ms: int | None = None
    #: where records dropped for a closed window are written (``None``: only counted)
    late_records_topic: str | None = None
    #: the store was named by the user: Kafka Streams' queryable store (interactive queries)
    queryable: bool = False
    #: the store's value serde (``count``: Long; ``reduce``: the grouped values' serde;
    #: ``None``: ``default.value.serde``), Kafka Streams' ``Materialized`` default
    store_value_serde: Serde | None = None

    @property
    def stores(self) -> tuple[str, ...]:
        """The aggregation's state store."""
        return (self.store_name,)


@dataclass(frozen=True, eq=False)
class TableSourceNode(Node):
    """Reads a topic as a table (``StreamsBuilder.table`` / ``global_table``).

    Each record upserts its key; a null value (tombstone) deletes it. ``source_name`` is the
    ``KSTREAM-SOURCE`` node Kafka Streams shows in front of the ``KTABLE-SOURCE`` processor.
    ``history_retention_ms`` bounds the versions kept for timestamped (as-of) lookups by
    stream-table joins (``None``: all versions are kept).
    """

    topic: str = ""
    source_name: str = ""
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    store_name: str = ""
    is_global: bool = False
    history_retention_ms: int | None = None
    #: the store was named by the user (``Materialized.as``): Kafka Streams always builds it;
    #: an unnamed table's store only when a join, ``group_by`` or ``suppress`` needs it
    queryable: bool = False

    @property
    def stores(self) -> tuple[str, ...]:
        """The table's state store."""
        return (self.store_name,)


class TableOpKind(str, Enum):
    """How a :class:`TableOpNode` maps a table change (applied to new and old values alike)."""

    FILTER = "filter"  #: ``fn(key, value) -> bool``; a failing value becomes ``None``
    MAP_VALUES = "map_values"  #: ``fn(value) -> value``; never called for ``None``
    GROUP_BY = "group_by"  #: ``fn(key, value) -> (key, value)``; feeds a table aggregation


@dataclass(frozen=True, eq=False)
class TableOpNode(Node):
    """A stateless operation on a table's changes (Kafka Streams' ``KTableFilter``,
    ``KTableMapValues``, ``KTableRepartitionMap``); see :class:`TableOpKind`.
    """

    kind: TableOpKind = TableOpKind.FILTER
    fn: Callable[..., Any] | None = None
    op_label: str = "FILTER"


@dataclass(frozen=True, eq=False)
class TableAggregateNode(Node):
    """Aggregates a re-grouped table with an adder and a subtractor (``KTableAggregate``).

    On an update of a source row the subtractor removes the old value from its old group
    before the adder adds the new value to its new group; a tombstone only subtracts. A
    subtractor result of ``None`` deletes the group (the next add starts from
    ``initializer()``). ``reduce`` marks the reduce form: adder/subtractor take
    ``(aggregate, value)`` and a group's first value is its aggregate.
    """

    store_name: str = ""
    initializer: Callable[[], Any] | None = None
    adder: Callable[..., Any] | None = None
    subtractor: Callable[..., Any] | None = None
    reduce: bool = False
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    op_label: str = "AGGREGATE"
    #: see :class:`AggregateNode`
    queryable: bool = False
    store_value_serde: Serde | None = None

    @property
    def stores(self) -> tuple[str, ...]:
        """The aggregation's state store."""
        return (self.store_name,)


class JoinKind(str, Enum):
    """Which operands a :class:`JoinNode` joins (parents: left first, then right)."""

    STREAM_STREAM = "stream-stream"
    STREAM_TABLE = "stream-table"
    STREAM_GLOBAL_TABLE = "stream-globaltable"
    TABLE_TABLE = "table-table"
    #: KTable-KTable foreign-key join (KIP-213): ``foreign_key_extractor(left_value)`` is
    #: the right table's key; the result is keyed by the left table's key
    TABLE_TABLE_FK = "table-table-fk"


@dataclass(frozen=True)
class JoinWindowSpec:
    """A stream-stream join window: a left record at ``t`` matches right records with
    ``t - before_ms <= t' <= t + after_ms``; ``grace_ms`` delays the window's close.
    """

    before_ms: int
    after_ms: int
    grace_ms: int


@dataclass(frozen=True, eq=False)
class JoinNode(Node):
    """A join of two streams/tables; ``join_type`` is ``inner``, ``left`` or ``outer``.

    ``joiner(left_value, right_value)``; ``key_selector(key, value)`` gives the lookup key of
    a stream-GlobalKTable join; ``foreign_key_extractor(left_value)`` the right table's key
    of a foreign-key table join (:attr:`JoinKind.TABLE_TABLE_FK`, inner or left only);
    ``windows`` is set for stream-stream joins. The node is named after the processor Kafka
    Streams' joined stream or table comes out of (a stream-table join's ``KSTREAM-JOIN``, a
    merge, a foreign-key join's result); ``kafka_names`` names the join's other processors,
    window stores and internal topics in Kafka Streams, for ``describe()``.
    """

    kind: JoinKind = JoinKind.STREAM_TABLE
    join_type: str = "inner"
    joiner: Callable[[Any, Any], Any] | None = None
    key_selector: Callable[[Any, Any], Any] | None = None
    foreign_key_extractor: Callable[[Any], Any] | None = None
    windows: JoinWindowSpec | None = None
    store_names: tuple[str, ...] = ()

    @property
    def stores(self) -> tuple[str, ...]:
        """The join's state stores."""
        return self.store_names


@dataclass(frozen=True)
class SuppressSpec:
    """What ``KTable.suppress`` holds back (Kafka Streams' ``Suppressed``).

    ``until_window_closes``: one final result per window once the window has closed.
    Otherwise ``time_limit_ms``: a key's update waits until stream time has passed its
    timestamp + the limit, replaced by later updates meanwhile. ``max_records``/``max_bytes``
    bound the buffer (``None``: unbounded); when full, ``emit_early`` evicts the oldest keys,
    else the application stops (``shutDownWhenFull``).
    """

    until_window_closes: bool
    time_limit_ms: int = 0
    max_records: int | None = None
    max_bytes: int | None = None
    emit_early: bool = False


@dataclass(frozen=True, eq=False)
class SuppressNode(Node):
    """``KTable.suppress``: holds back a table's updates (see :class:`SuppressSpec`)."""

    suppress: SuppressSpec | None = None
    store_name: str = ""

    @property
    def stores(self) -> tuple[str, ...]:
        """The suppression buffer."""
        return (self.store_name,)


@dataclass(frozen=True, eq=False)
class ProcessNode(Node):
    """``KStream.process`` / ``process_values``: a user
    :class:`~streamtable.processor.api.Processor` (Kafka Streams' ``KSTREAM-PROCESSOR`` /
    ``KSTREAM-PROCESSVALUES``).

    ``supplier()`` returns a new processor instance; ``store_builders`` are the connected
    stores' builders (:class:`~streamtable.processor.stores.KeyValueStoreBuilder`);
    ``fixed_key`` marks ``process_values`` (forwarded records keep the input key).
    """

    supplier: Callable[[], Any] | None = None
    store_builders: tuple[Any, ...] = ()
    fixed_key: bool = False

    @property
    def stores(self) -> tuple[str, ...]:
        """The connected stores."""
        return tuple(b.name for b in self.store_builders)


@dataclass(frozen=True, eq=False)
class SinkNode(Node):
    """Writes records to a Kafka topic (Kafka Streams' ``KSTREAM-SINK``).

    ``partitioner(key, value, num_partitions) -> int | None``; ``None`` (the default) means
    murmur2 of the serialized key, Java's default partitioner.
    """

    topic: str = ""
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    partitioner: Callable[..., int | None] | None = None
    #: writes an internal repartition topic the compiler added (see
    #: :mod:`streamtable.compiler.subtopologies`); never set by the DSL
    internal: bool = False

    description_kind = "Sink"


@dataclass(frozen=True, eq=False)
class FileSinkNode(Node):
    """Writes records to files (Parquet by default) through Spark's file sink.

    No Kafka Streams processor matches it (Kafka Streams leaves files to Kafka Connect's sink
    connectors); ``describe()`` shows it as a sink whose "topic" is ``files:<format>:<path>``.
    """

    path: str = ""
    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    #: how often the sink's query writes a micro-batch of files (ms); ``None``: the
    #: application's ``commit.interval.ms``
    commit_interval_ms: int | None = None

    description_kind = "Sink"

    @property
    def target(self) -> str:
        """``files:<format>:<path>``, the name ``describe()`` shows for the sink's output."""
        return f"files:{self.format}:{self.path}"


@dataclass(frozen=True)
class GraphSnapshot:
    """The nodes of a topology in creation order, with lookups by name."""

    nodes: tuple[Node, ...]
    by_name: dict[str, Node] = field(init=False, repr=False)
    children: dict[str, tuple[str, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        by_name = {n.name: n for n in self.nodes}
        children: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for p in n.parents:
                children[p].append(n.name)
        object.__setattr__(self, "by_name", by_name)
        object.__setattr__(self, "children", {k: tuple(v) for k, v in children.items()})

    def of_type(self, cls: type) -> Iterable[Node]:
        """The nodes that are instances of ``cls``, in creation order."""
        return (n for n in self.nodes if isinstance(n, cls))
