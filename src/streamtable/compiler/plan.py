"""Compile a :class:`~streamtable.topology.Topology` into Spark streaming queries.

One query per terminal node (each ``to()`` sink and each ``foreach``), plus one per internal
repartition topic where the topology is cut into sub-topologies (see :mod:`.subtopologies`):
such a query writes the topic, and the queries downstream read it. Within a query, nodes are
lowered from the terminal up; each core node has its own lowering module under
``streamtable.compiler.lower``. The consumer of a chain of record operations says which encoding
it wants, so serialization is fused into the chain's Python stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from streamtable.compiler.codecs import Codec, PresenceCodec
from streamtable.compiler.frame import CompileContext, Frame
from streamtable.compiler.lower.aggregate import (
    group_key_codec,
    lower_aggregate,
    native_aggregation,
    native_reduce_codec,
)
from streamtable.compiler.lower.file_sink import file_sink_frame
from streamtable.compiler.lower.join import lower_join
from streamtable.compiler.lower.merge import lower_merge
from streamtable.compiler.lower.process import lower_process
from streamtable.compiler.lower.record_ops import (
    chain_of,
    convert,
    lower_chain,
    run_stage,
    stage_ops,
    validated,
)
from streamtable.compiler.lower.repartition import lower_repartition
from streamtable.compiler.lower.sink import (
    native_long_ok,
    sink_codecs,
    sink_frame,
    windowed_partitioner,
)
from streamtable.compiler.lower.source import lower_source
from streamtable.compiler.lower.suppress import lower_suppress
from streamtable.compiler.lower.table import (
    lower_table_aggregate,
    lower_table_changes,
    lower_table_op_over_aggregate,
    lower_table_op_upserts,
    lower_table_upserts,
    over_table_aggregate,
)
from streamtable.compiler.lower.windowed import (
    late_value_codec,
    lower_windowed_aggregate,
    windowed_key_codec,
)
from streamtable.compiler.metrics import count_and_drop
from streamtable.compiler.subtopologies import (
    cut_topology,
    keeps_null_keys,
    repartition_partitions,
)
from streamtable.errors import TopologyError
from streamtable.runtime.internal_topics import STREAMTABLE_INTERNAL_SUFFIX
from streamtable.topology.nodes import (
    AggregateNode,
    FileSinkNode,
    JoinNode,
    MergeNode,
    Node,
    ProcessNode,
    RecordOpNode,
    RepartitionNode,
    SinkNode,
    SourceNode,
    SuppressNode,
    SuppressSpec,
    TableAggregateNode,
    TableOpNode,
    TableSourceNode,
)
from streamtable.topology.old_values import filtered_stream_aggregate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamtable.topology.topology import Topology


@dataclass(frozen=True)
class QueryPlan:
    """One Spark streaming query of the topology.

    Attributes
    ----------
    name : str
        The terminal node's name; also the query's checkpoint sub-folder.
    df : DataFrame
        The rows to write.
    sink : str
        ``"kafka"`` (rows ``key, value, topic, ...``), ``"files"`` (Spark's file sink,
        ``to_files``) or ``"noop"`` (``foreach``).
    output_mode : str
        ``"append"`` for stateless paths, ``"update"`` when an aggregation is upstream.
    state_encoding : str
        ``spark.sql.streaming.stateStore.encodingFormat`` for the query: ``"avro"`` (state
        schemas can evolve) when all its state is ``transformWithState``, else ``"unsaferow"``
        (Spark's built-in aggregations support nothing else).
    writes_internal : str or None
        The internal repartition topic the query writes (it then writes nothing else).
    file_sink : FileSinkNode or None
        For ``sink == "files"``: the sink (path, format, partition columns).
    reads_internal : tuple of str
        The internal repartition topics the query reads (written by queries before it).
    """

    name: str
    df: DataFrame
    sink: str
    output_mode: str
    state_encoding: str = "unsaferow"
    writes_internal: str | None = None
    reads_internal: tuple[str, ...] = ()
    file_sink: FileSinkNode | None = None


class Lowerer:
    """Lowers the nodes feeding one terminal node."""

    def __init__(self, ctx: CompileContext, query: str) -> None:
        self.ctx = ctx
        ctx.query = query
        ctx.uses_tws = False
        ctx.uses_native_state = False
        ctx.append_only = False
        self.nodes = ctx.graph.by_name
        #: unions of stateless inputs reading a topic twice (see _note_shared_scans)
        self.shared_scans: dict[str, set[str]] = {}

    def lower(
        self, name: str, want_key: Codec | None = None, want_value: Codec | None = None
    ) -> Frame:
        """The frame of node ``name``, encoded as wanted where that costs nothing extra."""
        node = self.nodes[name]
        if isinstance(node, SourceNode):
            return lower_source(self.ctx, node)
        if isinstance(node, RecordOpNode):
            chain = chain_of(self.nodes, node)
            ops = stage_ops(chain)
            if not ops:  # only identities: the parent's frame as it is
                return self.lower(chain[0].parents[0], want_key, want_value)
            base = self.lower(chain[0].parents[0])
            return lower_chain(self.ctx, base, ops, want_key=want_key, want_value=want_value)
        if isinstance(node, MergeNode):
            inputs = [self.lower(p) for p in node.parents]
            self._note_shared_scans(node, inputs)
            return lower_merge(self.ctx, inputs)
        if isinstance(node, RepartitionNode):
            parent = self.lower(node.parents[0], want_key=want_key, want_value=want_value)
            return lower_repartition(self.ctx, node, validated(self.ctx, parent))
        if isinstance(node, AggregateNode):
            return self._aggregate(node, want_value=want_value)
        if isinstance(node, SuppressNode):
            return self._suppress(node, want_value=want_value)
        if isinstance(node, TableSourceNode):
            return lower_table_upserts(self.ctx, node)
        if isinstance(node, TableOpNode):
            if over_table_aggregate(self.nodes, node):
                return lower_table_op_over_aggregate(self, node)
            aggregate = filtered_stream_aggregate(self.nodes, node)
            if isinstance(aggregate, SuppressNode):
                base = self._suppress(aggregate, with_old=True)
                return lower_table_op_over_aggregate(self, node, base)
            if aggregate is not None:
                base = self._aggregate(aggregate, with_old=True)
                return lower_table_op_over_aggregate(self, node, base)
            return lower_table_op_upserts(self.ctx, node, self.lower(node.parents[0]))
        if isinstance(node, TableAggregateNode):
            return lower_table_aggregate(self, node)
        if isinstance(node, JoinNode):
            return lower_join(self, node, want_value)
        if isinstance(node, ProcessNode):  # several parents (hand-built): their union
            inputs = [self.lower(p) for p in node.parents]
            self._note_shared_scans(node, inputs)
            parent = inputs[0] if len(inputs) == 1 else lower_merge(self.ctx, inputs)
            return lower_process(self.ctx, node, parent)
        raise TopologyError(
            f"Cannot compile node {name!r} of type {type(node).__name__}: a streamtable bug, "
            "please report it (Kafka Streams' topology builder fails likewise on a node it "
            "does not know: 'Unknown definition class')."
        )

    def _note_shared_scans(self, node: Node, inputs: list[Frame]) -> None:
        """Note a union of stateless inputs that read one topic each through a scan of their
        own (a stream merged with a branch of itself): ``self.shared_scans[node] = topics``.
        """
        from streamtable.compiler.subtopologies import read_topics

        seen: set[str] = set()
        shared: set[str] = set()
        for parent, frame in zip(node.parents, inputs, strict=True):
            if frame.stateful:  # after a shuffle: its tasks are named by stable numbers
                continue
            topics = set(read_topics(self.ctx.graph, parent))
            shared |= seen & topics
            seen |= topics
        if not shared:
            return
        self.shared_scans[node.name] = shared
        cfg = self.ctx.config
        eos = cfg.processing_guarantee == "exactly_once_v2" and self.ctx.capture_dir is None
        if eos and cfg.dead_letter_queue_topic is not None:
            # the record stages after the union write dead letters per source partition too,
            # before any shuffle, in the same two tasks
            raise TopologyError(
                f"{type(node).__name__} {node.name!r} unites inputs that each read topic(s) "
                f"{sorted(shared)} in one query, and its dead letters "
                f"('errors.dead.letter.queue.topic.name'={cfg.dead_letter_queue_topic!r}) "
                "cannot be written exactly once then (each Kafka partition would be read by two "
                "Spark tasks sharing one transaction). Put .repartition(num_partitions=n) on "
                "one of the inputs before it (a sub-topology boundary), or compute the inputs in "
                "one operator (e.g. flat_map_values returning what each branch gives)."
            )

    def _check_exactly_once_sink(self, node: SinkNode, frame: Frame) -> None:
        """Refuse, under ``exactly_once_v2``, a Kafka sink fed without a shuffle by a union
        noted by :meth:`_note_shared_scans`.

        Spark then runs two tasks per partition of the topic read twice in every
        micro-batch, and the output of a task reading Kafka directly is written in the
        transaction of its source partition (the name that survives a re-run): the two tasks
        would share one, and the second, finding the batch written, would write nothing. (A
        frame that went through a stateful operator is written by shuffled tasks, named by
        their numbers.)

        Raises
        ------
        TopologyError
            Naming the union, the topics read twice and what to do.
        """
        eos = self.ctx.config.processing_guarantee == "exactly_once_v2"
        if not eos or frame.stateful or self.ctx.capture_dir is not None:
            return  # (the TopologyTestDriver captures the output: no transactions)
        todo, seen = [node.name], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            shared = self.shared_scans.get(name)
            if shared:
                raise TopologyError(
                    f"{type(self.nodes[name]).__name__} {name!r} unites inputs that each read "
                    f"topic(s) {sorted(shared)} in the query writing {node.topic!r}, which "
                    "exactly_once_v2 cannot write exactly once yet (each Kafka partition "
                    "would be read by two Spark tasks sharing one transaction). Put "
                    ".repartition(num_partitions=n) on one of the inputs before it (a "
                    "sub-topology boundary: that input then reads its own internal topic), or "
                    "compute the inputs in one operator (e.g. flat_map_values returning what "
                    "each branch gives)."
                )
            todo.extend(self.nodes[name].parents)

    def _aggregate(
        self,
        node: AggregateNode,
        *,
        emit_final: SuppressSpec | None = None,
        want_value: Codec | None = None,
        with_old: bool = False,
    ) -> Frame:
        gk = group_key_codec(self.ctx, node)
        native = native_aggregation(self.ctx, node)
        values: Codec | None = None
        if native == "count" and node.windows is None:
            values = PresenceCodec()  # Spark's count only looks at whether a value is null
        elif native is not None and node.windows is None:
            values = native_reduce_codec(node)  # bytes Spark decodes itself
        elif node.late_records_topic is not None:
            values = late_value_codec(self.ctx, node)  # late records keep their serde bytes
        parent = convert(
            self.ctx, self.lower(node.parents[0], want_key=gk, want_value=values), gk, values
        )
        parent = validated(self.ctx, parent)
        if node.windows is not None:
            return lower_windowed_aggregate(
                self.ctx,
                node,
                parent,
                emit_final=emit_final,
                with_old=with_old,
                want_value=want_value,
            )
        return lower_aggregate(self.ctx, node, parent, want_value, with_old=with_old)

    def _suppress(
        self, node: SuppressNode, with_old: bool = False, want_value: Codec | None = None
    ) -> Frame:
        spec = node.suppress
        assert spec is not None
        parent = self.nodes[node.parents[0]]
        if spec.until_window_closes:
            # validated at build time: the parent is a windowed aggregation
            assert isinstance(parent, AggregateNode)
            return self._aggregate(
                parent, emit_final=spec, want_value=want_value, with_old=with_old
            )
        if with_old:  # the updates of a stream aggregation, with their old aggregates
            assert isinstance(parent, AggregateNode)
            return lower_suppress(self.ctx, node, self._aggregate(parent, with_old=True), True)
        return lower_suppress(self.ctx, node, self.lower(parent.name))

    def sink(self, node: SinkNode) -> QueryPlan:
        """The query writing ``node``'s topic."""
        parent_node = self.nodes[node.parents[0]]
        hint = self._hint(parent_node)
        key, value = sink_codecs(self.ctx, node, *hint)
        # Kafka Streams' StreamSinkNode partitions windowed keys by their inner key; its
        # repartition nodes do not
        partitioner = node.partitioner or (None if node.internal else windowed_partitioner(key))
        if isinstance(parent_node, RecordOpNode) and stage_ops(chain_of(self.nodes, parent_node)):
            chain = chain_of(self.nodes, parent_node)
            base = self.lower(chain[0].parents[0])
            frame = lower_chain(
                self.ctx,
                base,
                stage_ops(chain),
                want_key=key,
                want_value=value,
                partitioner=partitioner,
                num_partitions=self.ctx.topic_partitions.get(node.topic, 0),
            )
        else:
            frame = self.lower(parent_node.name, want_key=key, want_value=value)
            if partitioner is not None:
                frame = run_stage(
                    self.ctx,
                    frame,
                    (),
                    want_key=key,
                    want_value=value,
                    partitioner=partitioner,
                    num_partitions=self.ctx.topic_partitions.get(node.topic, 0),
                )
            elif native_long_ok(frame, value) and frame.key_codec == key:
                pass  # written natively
            else:
                frame = convert(self.ctx, frame, key, value)
        repartition = node.internal and not node.topic.endswith(STREAMTABLE_INTERNAL_SUFFIX)
        # (a join downstream of the topic's readers joining null keys keeps them: they are
        # written, and the producer places them as Kafka Streams' does)
        if repartition and not keeps_null_keys(self.ctx.graph, node.name):
            # Kafka Streams' repartition filter (streamtable's own internal topics, where
            # Kafka Streams has no topic, pass null keys on as Kafka Streams' task does)
            df = count_and_drop(self.ctx, frame.df, {"null_key": F.col("key").isNull()})
            frame = frame.with_(df=df)
        self._check_exactly_once_sink(node, frame)
        mode = "update" if frame.stateful else "append"
        return QueryPlan(
            node.name,
            sink_frame(node, frame, key, value, order_columns=self.ctx.order_columns),
            "kafka",
            mode,
            self._encoding(),
            writes_internal=node.topic if node.internal else None,
            reads_internal=self._internal_inputs(node.name),
        )

    def file_sink(self, node: FileSinkNode) -> QueryPlan:
        """The query writing ``node``'s files: Spark's file sink, in append output mode (the
        only mode it has; stateful operators upstream run as ``transformWithState``, whose
        output Spark appends).
        """
        self.ctx.append_only = True
        parent_node = self.nodes[node.parents[0]]
        key, value = sink_codecs(self.ctx, node, *self._hint(parent_node))
        frame = self.lower(parent_node.name, want_key=key, want_value=value)
        if not (native_long_ok(frame, value) and frame.key_codec == key):
            frame = convert(self.ctx, frame, key, value)
        return QueryPlan(
            node.name,
            file_sink_frame(node, frame, key, value),
            "files",
            "append",
            self._encoding(),
            reads_internal=self._internal_inputs(node.name),
            file_sink=node,
        )

    def foreach(self, node: RecordOpNode) -> QueryPlan:
        """The query running a terminal ``foreach``."""
        return self._noop_plan(node.name, self.lower(node.name))

    def store_only(self, node: Node) -> QueryPlan:
        """The query keeping queryable store ``node`` (and its changelog) when nothing
        downstream reads it; it writes nothing else.
        """
        if isinstance(node, TableSourceNode):
            return self._noop_plan(node.name, lower_table_changes(self, node.name))
        return self._noop_plan(node.name, self.lower(node.name))

    def _noop_plan(self, name: str, frame: Frame) -> QueryPlan:
        """A query that computes ``frame`` (its side effects) and writes no rows."""
        return QueryPlan(
            name,
            frame.df,
            "noop",
            "update" if frame.stateful else "append",
            self._encoding(),
            reads_internal=self._internal_inputs(name),
        )

    def _internal_inputs(self, name: str) -> tuple[str, ...]:
        """The internal repartition topics read by the sources above node ``name``."""
        topics: dict[str, None] = {}
        seen: set[str] = set()
        todo = [name]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            node = self.nodes[n]
            if isinstance(node, SourceNode) and node.internal:
                topics.update(dict.fromkeys(node.topics))
            todo.extend(node.parents)
        return tuple(topics)

    def _encoding(self) -> str:
        return "avro" if self.ctx.uses_native_state is False and self.ctx.uses_tws else "unsaferow"

    def _hint(self, node: Node) -> tuple[Codec, Codec]:
        """The codecs a node's output would have without a wish (serde hints for sinks)."""
        from streamtable.compiler.codecs import PickleCodec, SerdeCodec, codec_for

        if isinstance(node, SourceNode | TableSourceNode):
            k = node.key_serde or self.ctx.config.default_key_serde
            v = node.value_serde or self.ctx.config.default_value_serde
            return (
                SerdeCodec(k) if k else PickleCodec(),
                SerdeCodec(v) if v else PickleCodec(),
            )
        if isinstance(node, AggregateNode):
            gk = group_key_codec(self.ctx, node)
            if node.windows is not None:
                gk = windowed_key_codec(gk, node.windows)
            return gk, PickleCodec()
        if isinstance(node, RecordOpNode):
            # key-preserving chains keep the key's serde
            chain = chain_of(self.nodes, node)
            k, v = self._hint(self.nodes[chain[0].parents[0]])
            if any(n.changes_key for n in chain):
                k = PickleCodec()
            return k, PickleCodec()
        if isinstance(node, MergeNode):
            # KStreamImpl.merge drops the serdes (neither input's can safely be used): a hint
            # only where every input agrees
            hints = [self._hint(self.nodes[p]) for p in node.parents]
            k = hints[0][0] if all(h[0] == hints[0][0] for h in hints) else PickleCodec()
            v = hints[0][1] if all(h[1] == hints[0][1] for h in hints) else PickleCodec()
            return k, v
        if isinstance(node, (RepartitionNode, SuppressNode)):
            return self._hint(self.nodes[node.parents[0]])
        if isinstance(node, TableOpNode | JoinNode):  # keys are the left input's
            return self._hint(self.nodes[node.parents[0]])[0], PickleCodec()
        if isinstance(node, TableAggregateNode):
            return codec_for(node.key_serde or self.ctx.config.default_key_serde), PickleCodec()
        if isinstance(node, ProcessNode) and node.fixed_key:
            return self._hint(self.nodes[node.parents[0]])[0], PickleCodec()
        return PickleCodec(), PickleCodec()


def compile_topology(topology: Topology, ctx: CompileContext) -> list[QueryPlan]:
    """Lower every terminal node of ``topology`` to a :class:`QueryPlan`.

    Where one Spark query cannot hold a chain of stateful operators, the topology is first cut
    into sub-topologies (:func:`~streamtable.compiler.subtopologies.cut_topology`); the
    internal topics and their partition counts are then in ``ctx.internal_topics``, and
    ``ctx.graph`` is the cut graph. Plans come upstream first: a plan reading an internal
    topic comes after the plan writing it.

    Raises
    ------
    TopologyError
        When a node cannot be compiled (the message names it and says what to change).
    """
    cfg = ctx.config
    graph, cuts = cut_topology(
        topology.graph,
        cfg.application_id,
        default_key_serde=cfg.default_key_serde,
        default_value_serde=cfg.default_value_serde,
    )
    if cuts:
        ctx.graph = graph
        ctx.internal_topics = repartition_partitions(graph, cuts, ctx.topic_partitions)
        ctx.topic_partitions = {**ctx.topic_partitions, **ctx.internal_topics}
    _check_file_sink_paths(graph.nodes)
    plans = []
    for node in terminal_nodes(graph.nodes):
        if isinstance(node, SinkNode):
            plans.append(Lowerer(ctx, node.name).sink(node))
        elif isinstance(node, FileSinkNode):
            plans.append(Lowerer(ctx, node.name).file_sink(node))
        else:
            plans.append(Lowerer(ctx, node.name).foreach(node))
    plans += _store_only_plans(ctx, graph.nodes)
    if not plans:
        raise TopologyError(
            "The topology has no output: add a sink (Topology.add_sink, KStream.to) or a "
            "KStream.foreach; there would be nothing to run."
        )
    return plans


def terminal_nodes(nodes: tuple[Node, ...]) -> list[Node]:
    """The nodes that get a query of their own, named after them, in graph order.

    Each sink (Kafka, files, internal repartition topics) and each ``foreach``. Store-only
    queries of queryable stores come on top (:func:`_store_only_plans`).
    """
    return [
        n
        for n in nodes
        if isinstance(n, SinkNode | FileSinkNode) or (isinstance(n, RecordOpNode) and n.terminal)
    ]


def _check_file_sink_paths(nodes: tuple[Node, ...]) -> None:
    """Spark's file sink has one writer per path (its log would interleave two queries')."""
    by_path: dict[str, list[str]] = {}
    for node in nodes:
        if isinstance(node, FileSinkNode):
            by_path.setdefault(node.path.rstrip("/"), []).append(node.name)
    for path, names in by_path.items():
        if len(names) > 1:
            raise TopologyError(
                f"File sinks {names} all write path {path!r}: Spark's file sink allows one "
                "writer per path. Give each to_files() its own path, or merge() the streams "
                "and write them with one to_files()."
            )


def _store_only_plans(ctx: CompileContext, nodes: tuple[Node, ...]) -> list[QueryPlan]:
    """A query for each queryable key-value store that no query holds (a named table or
    aggregation nothing downstream reads): Kafka Streams materializes such a store anyway, so
    interactive queries can read it.
    Not in the TopologyTestDriver, which reads stores from the queries' checkpoints.
    """
    plans = []
    for node in nodes:
        store = getattr(node, "store_name", "")
        if not getattr(node, "queryable", False) or store in ctx.changelogs:
            continue
        if store not in ctx.unlogged and ctx.capture_dir is None:
            plans.append(Lowerer(ctx, node.name).store_only(node))
    return plans
