"""``KafkaStreams``: runs a topology as Spark streaming queries against Kafka."""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from streamtable.compiler.lower.sink import SOURCE_SLOT_COLUMN, TIMESTAMP_COLUMN
from streamtable.config import StreamsConfig, is_loopback, split_host_port
from streamtable.errors import (
    ConfigError,
    IllegalStateError,
    InvalidStateStoreException,
    StreamsError,
    StreamsTimeoutError,
    TopologyError,
)
from streamtable.runtime.changelog_topics import ensure_changelog_topics
from streamtable.runtime.checkpoint import (
    FINGERPRINT_FILE,
    check_fingerprint,
    read_fingerprint,
    reset_command,
)
from streamtable.runtime.checkpoint_adoption import adopt_renamed_checkpoints
from streamtable.runtime.fencing import fence_recorded, prepare_exactly_once
from streamtable.runtime.file_sink import file_sink_writer, prepare_file_sink
from streamtable.runtime.group_offsets import GroupOffsetCommitter
from streamtable.runtime.kafka_admin import KafkaAdmin
from streamtable.runtime.kafka_sink import ForeachBatchSink
from streamtable.runtime.librdkafka_config import librdkafka_settings
from streamtable.runtime.metrics import Metric, application_metrics, with_end_offsets
from streamtable.runtime.progress import (
    ProgressLedger,
    QueryFigures,
    caught_up,
    end_offsets,
    executed,
)
from streamtable.runtime.query_errors import headline, is_transient
from streamtable.runtime.query_sources import check_query_sources
from streamtable.runtime.repartition_topics import RepartitionPurger, ensure_repartition_topics
from streamtable.runtime.starting_offsets import pending_batch_records
from streamtable.runtime.state_lock import StateDirLock
from streamtable.runtime.state_partitions import fixed_partitions_notice, kept_partitions
from streamtable.runtime.task_output import output_spec
from streamtable.topology.topology import Topology

log = logging.getLogger("streamtable")

#: Spark's shortest real-time batch (``spark.sql.streaming.realTimeMode.minBatchDuration``), ms.
REAL_TIME_MIN_BATCH_MS = 5000

#: How long a reported failure waits for the uncaught exception handler to return, s.
HANDLER_WAIT_S = 60.0


class State(str, Enum):
    """Kafka Streams' client states (``KafkaStreams.State``)."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"


_TRANSITIONS: dict[State, set[State]] = {
    State.CREATED: {State.RUNNING, State.PENDING_SHUTDOWN, State.PENDING_ERROR},
    State.RUNNING: {State.PENDING_SHUTDOWN, State.PENDING_ERROR},
    State.PENDING_SHUTDOWN: {State.NOT_RUNNING},
    State.NOT_RUNNING: set(),
    State.PENDING_ERROR: {State.ERROR},
    State.ERROR: set(),  # terminal, as in Kafka Streams: close() releases resources, keeps it
}


class KafkaStreams:
    """Runs a :class:`~streamtable.Topology` on Spark Structured Streaming (``KafkaStreams``).

    Parameters
    ----------
    topology : Topology
        From :meth:`StreamsBuilder.build`.
    config : Mapping[str, object] or StreamsConfig
        Kafka Streams' keys (``application.id``, ``bootstrap.servers``, ...), ``spark.*`` keys
        for Spark and ``streamtable.*`` keys; see :class:`streamtable.config.StreamsConfig`.

    Raises
    ------
    ConfigError
        At construction, for an unknown, missing or ill-typed key, the ``real_time`` trigger
        with exactly-once or the ``continue`` production handler (Spark's Kafka sink is
        neither), or an ``application.server`` that is not a loopback address without
        ``streamtable.query.token``.

    Notes
    -----
    Each sink (``to``) and each ``foreach`` of the topology becomes one Spark streaming query,
    checkpointed under ``state.dir/application.id/<node name>``. The topology's fingerprint is
    stored beside the checkpoints; starting a topology whose stateful operators differ fails with
    :class:`~streamtable.errors.TopologyError` (run ``cleanup()`` or ``streamtable reset`` to
    start over).

    With ``application.server`` (``"host:port"``) set, :meth:`start` also serves the
    queryable stores over HTTP on that address (:mod:`streamtable.state.http`) and
    :meth:`close` stops that server. It binds loopback addresses only, unless
    ``streamtable.query.token`` is set: then every request must carry
    ``Authorization: Bearer <token>``.

    With ``streamtable.metrics.address`` (``"host:port"``) set, :meth:`start` also serves
    :meth:`metrics` in Prometheus' text format at ``http://host:port/metrics``
    (:mod:`streamtable.observability.prometheus`) and :meth:`close` stops that server.
    """

    def __init__(self, topology: Topology, config: Mapping[str, object] | StreamsConfig) -> None:
        if not isinstance(topology, Topology):
            raise TypeError(f"KafkaStreams expects a Topology; got {type(topology).__name__}.")
        self.config = StreamsConfig.from_mapping(config)
        if self.config.trigger == "real_time":
            _check_real_time_config(self.config, self._own_sink())
        server = self.config.application_server
        if server is not None and self.config.query_token is None:
            host, port = split_host_port(server)
            if not is_loopback(host):
                raise ConfigError(
                    f"Config 'application.server' is {server!r}, which other machines can "
                    "reach: serving interactive queries beyond this machine needs a bearer "
                    "token. Set 'streamtable.query.token' (clients then send 'Authorization: "
                    f"Bearer <token>'), or bind a loopback address such as '127.0.0.1:{port}'."
                )
        self.topology = topology
        self._state = State.CREATED
        self._closed = False
        self._lock = threading.RLock()
        self._queries: list[Any] = []
        self._handler: Callable[[BaseException], None] | None = None
        self._error: BaseException | None = None
        # set once the uncaught exception handler has returned (or there is none)
        self._failure_handled = threading.Event()
        self._failing_thread: threading.Thread | None = None
        self._monitor: threading.Thread | None = None
        self._stop_monitor = threading.Event()
        self._spark: Any = None
        self._ledger = ProgressLedger()
        self._sinks: list[ForeachBatchSink] = []
        self._plans: list[Any] = []
        #: (topic, partition) of every input of the running topology (this instance runs
        #: every task), for streams_metadata_for_store
        self._source_partitions: list[tuple[str, int]] = []
        self._replayed = 0
        #: queryable store -> its changelog; queryable stores without one -> why not
        self._changelogs: dict[str, Any] = {}
        self._unlogged: dict[str, str] = {}
        #: query index -> the last batch id reported to the replica
        self._reported: dict[int, tuple[int, bool]] = {}  # query -> (batch id, executed)
        self._report_lock = threading.Lock()
        #: query index -> (first failure of the current streak, last restart) in monotonic s
        self._retrying: dict[int, tuple[float, float]] = {}

    #: held from start() until close() or the error state (one instance per state directory)
    _state_dir_lock: StateDirLock | None = None
    #: commits processed offsets to consumer group application.id (for Kafka's lag tools)
    _group_offsets: GroupOffsetCommitter | None = None
    #: deletes committed records of the repartition topics between sub-topologies
    _purger: RepartitionPurger | None = None
    _admin: KafkaAdmin | None = None
    #: the queryable stores' replica (interactive queries), when the topology has any
    _replica: Any = None
    #: the HTTP query service (application.server), from start() to close()
    _query_server: Any = None
    #: the Prometheus endpoint (streamtable.metrics.address), from start() to close()
    _metrics_server: Any = None
    #: the data-loss audit's queries (streamtable.audit.topic), from start() to close()
    _audit: Any = None
    #: the Kafka Connect connectors watched (streamtable.connect.connectors), after start()
    _connectors: Any = None

    # -- state ----------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The client state (:class:`State`); ``ERROR`` after a query failed."""
        return self._state

    def _transition(self, new: State) -> None:
        with self._lock:
            if new not in _TRANSITIONS[self._state]:
                raise IllegalStateError(f"Cannot go from state {self._state.value} to {new.value}.")
            log.info(
                "[%s] state %s -> %s", self.config.application_id, self._state.value, new.value
            )
            self._state = new
            if new is not State.RUNNING and self._replica is not None:
                # views handed out earlier stop answering, as Kafka Streams' stores do once
                # their thread is no longer RUNNING (InvalidStateStoreException)
                self._replica.refuse(f"the application is {new.value}, not RUNNING")

    def set_uncaught_exception_handler(self, handler: Callable[[BaseException], None]) -> None:
        """Call ``handler(exception)`` when a running query fails (then the state is ``ERROR``).

        Methods that report the failure (:meth:`await_caught_up`) raise only after the handler
        has returned, as Kafka Streams calls its handler before the failure surfaces (a
        handler still running after 60 s is not waited for further). Must be called before
        :meth:`start`.
        """
        if self._state is not State.CREATED:
            raise IllegalStateError("set_uncaught_exception_handler must be called before start().")
        self._handler = handler

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Check topics, compile the topology and start its streaming queries.

        Raises
        ------
        IllegalStateError
            If the application was already started.
        ConfigError
            If librdkafka, the client of streamtable's own consumers, producers and admin
            client, refuses a ``consumer.*``, ``producer.*`` or ``admin.*`` value, or cannot
            load the TLS files they name (:func:`~streamtable.runtime.librdkafka_config.
            librdkafka_settings`); nothing was started then.
        BrokerUnreachableError
            If no broker answers within ``request.timeout.ms``.
        MissingSourceTopicError
            If a source or sink topic does not exist.
        TopologyError
            If the topology cannot be compiled, or differs from the one of the checkpoint.
        StateDirLockedError
            If another running instance uses the same ``state.dir/application.id``.
        StreamsError
            If the HTTP query service cannot take ``application.server``, or the Prometheus
            endpoint ``streamtable.metrics.address`` (the port is in use, or the host is not
            an address of this machine); nothing was started then.
        """
        if self._state is not State.CREATED:
            raise IllegalStateError(
                f"start() called in state {self._state.value}; it may be called once."
            )
        cfg = self.config
        # before anything is held: a consumer.*, producer.* or admin.* value librdkafka refuses
        # raises ConfigError (the splits are cached for the output specs and the admin client)
        consumer_settings = librdkafka_settings(cfg.consumer_config, "consumer").accepted
        librdkafka_settings(cfg.producer_config, "producer")
        librdkafka_settings(cfg.admin_config, "admin")
        self._state_dir_lock = StateDirLock(cfg.checkpoint_dir).acquire(cfg.application_id)
        self._group_offsets = GroupOffsetCommitter(
            cfg.application_id, cfg.bootstrap_servers, consumer_settings
        )
        try:
            self._start()
        except BaseException:
            self._stop_query_server()
            self._stop_metrics_server()
            # nothing of a failed start keeps running (an interrupt may have come after the
            # queries started) or keeps a Kafka client
            for q in self._queries:
                with contextlib.suppress(Exception):
                    q.stop()
            self._queries, self._plans = [], []
            with contextlib.suppress(Exception):
                self._stop_audit()
            replica, self._replica = self._replica, None
            if replica is not None:
                with contextlib.suppress(Exception):
                    replica.close()
            self._close_admin()
            self._group_offsets.close(timeout_s=0)
            self._group_offsets = None
            self._release_state_dir()
            raise
        if self._query_server is not None:
            try:
                self._query_server.start()
            except BaseException:
                self.close()
                raise

    def _stop_query_server(self) -> None:
        server, self._query_server = self._query_server, None
        if server is not None:
            server.stop()

    def _stop_metrics_server(self) -> None:
        server, self._metrics_server = self._metrics_server, None
        if server is not None:
            server.stop()

    def _start(self) -> None:
        cfg = self.config
        if cfg.application_server is not None:
            from streamtable.state.http import QueryServer

            # taken now, so that a busy address fails before the queries start
            self._query_server = QueryServer(self, cfg.application_server, token=cfg.query_token)
            self._query_server.bind()
        if cfg.metrics_address is not None:
            from streamtable.observability.prometheus import MetricsCollector, MetricsServer

            # served from now on (before the queries: a busy port fails first)
            collector = MetricsCollector(lambda: self.metrics()["metrics"], cfg.application_id)
            self._metrics_server = MetricsServer(cfg.metrics_address, collector)
            self._metrics_server.start()
        from streamtable.runtime.spark import get_spark

        # the Spark session (a JVM: seconds) starts in this thread while another checks the
        # topics and the checkpoint and, under exactly_once_v2, fences the producers of the
        # transactional ids the last start recorded (once the checks have passed)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamtable-start")
        checks = pool.submit(self._check_and_fence)
        pool.shutdown(wait=False)
        try:
            spark = get_spark(
                cfg.spark_conf,
                log_to=cfg.spark_log_target,
                class_data_sharing=cfg.class_data_sharing,
            )
        except BaseException:
            # its fencing must not outlive this start (the state directory is released)
            wait([checks])
            if checks.exception() is None:
                checks.result()[0].close()
            raise
        admin, partitions, fenced, first_start = checks.result()
        self._admin = admin

        from streamtable.compiler.frame import CompileContext
        from streamtable.compiler.plan import compile_topology

        self._spark = spark
        spark.conf.set("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        ctx = CompileContext(spark, cfg, self.topology.graph, topic_partitions=partitions)
        try:
            plans = compile_topology(self.topology, ctx)
            if cfg.trigger == "real_time":
                from streamtable.compiler.real_time import check_real_time

                check_real_time(plans, ctx)
        except TopologyError:
            # nothing ran: a first start leaves no fingerprint, so that a corrected topology
            # (of another shape) can start under the same application.id
            if first_start:
                (Path(cfg.checkpoint_dir) / FINGERPRINT_FILE).unlink(missing_ok=True)
            raise
        self._metric_names = list(ctx.metric_names)
        check_query_sources(
            cfg.checkpoint_dir,
            ctx.query_sources,
            reset_command(self.topology, cfg.application_id, cfg.bootstrap_servers, cfg.state_dir),
        )
        kept = kept_partitions({p.name: Path(cfg.checkpoint_dir) / p.name for p in plans})
        notice = fixed_partitions_notice(
            kept,
            cfg.shuffle_partitions,
            cfg.application_id,
            reset_command(self.topology, cfg.application_id, cfg.bootstrap_servers, cfg.state_dir),
        )
        if notice is not None:  # Spark says so only in its log file
            log.warning("%s", notice)
        ensure_repartition_topics(admin, ctx.internal_topics, cfg.checkpoint_dir)
        ensure_changelog_topics(admin, ctx.changelogs)
        self._changelogs, self._unlogged = dict(ctx.changelogs), dict(ctx.unlogged)
        read = [*self.topology.source_topics, *ctx.internal_topics]
        self._source_partitions = sorted(
            (t, p) for t in read for p in range(ctx.topic_partitions.get(t, 1))
        )
        if cfg.processing_guarantee == "exactly_once_v2":
            # the tasks are numbered by the state partitions the checkpoints keep (more than
            # configured when the setting was lowered)
            numbered = max([cfg.shuffle_partitions, *kept.values()])
            prepare_exactly_once(
                admin,
                replace(cfg, shuffle_partitions=numbered),
                [f"{p.name}.sink" for p in plans if p.sink == "kafka"] + ctx.output_stages,
                {
                    **{t: partitions[t] for t in self.topology.source_topics},
                    **ctx.internal_topics,
                },
                fenced,
            )
        self._replayed = sum(
            pending_batch_records(Path(cfg.checkpoint_dir) / plan.name) for plan in plans
        )
        if self._replayed:
            log.warning(
                "[%s] %d input records of an interrupted micro-batch are processed again%s",
                cfg.application_id,
                self._replayed,
                " (exactly once: results already committed are not written again)"
                if cfg.processing_guarantee == "exactly_once_v2"
                else "; under at_least_once their results may be written twice",
            )
        self._purger = RepartitionPurger(
            admin,
            {
                t: [i for i, p in enumerate(plans) if t in p.reads_internal]
                for t in ctx.internal_topics
            },
            cfg.repartition_purge_interval_ms,
        )
        # if one fails, start() stops the audit and the queries already started
        if cfg.audit_topic is not None:
            self._start_audit(admin, partitions)
        for plan in plans:
            if cfg.trigger == "available_now" and plan.reads_internal:
                self._await_writers(plan)
            self._queries.append(self._start_query(plan))
            self._plans.append(plan)
        if self._changelogs:
            from streamtable.state.replica import StoreReplica

            self._replica = StoreReplica(
                cfg.bootstrap_servers,
                self._changelogs,
                librdkafka_settings(cfg.consumer_config, "consumer").accepted,
            )
            self._replica.start()
        self._reported = {}
        if cfg.connect_connectors:
            from streamtable.platform.connector_watch import ConnectorWatch

            self._connectors = ConnectorWatch(cfg.connect_url or "", cfg.connect_connectors)
        self._transition(State.RUNNING)
        self._stop_monitor.clear()
        self._monitor = threading.Thread(
            target=self._watch, name="streamtable-monitor", daemon=True
        )
        self._monitor.start()

    def _check_and_fence(
        self,
    ) -> tuple[KafkaAdmin, dict[str, int], set[tuple[str, int | str]], bool]:
        """What ``start()`` does besides Spark: check the topics, take over renamed queries'
        checkpoints, check (and record) the fingerprint, and under ``exactly_once_v2`` fence
        the transactional ids the last start recorded. Returns the admin client, the topics'
        partition counts, the fenced ids and whether no fingerprint was recorded before.
        """
        admin = self._new_admin()
        try:
            return (admin, *self._check_and_fence_with(admin))
        except BaseException:
            admin.close()
            raise

    def _check_and_fence_with(
        self, admin: KafkaAdmin
    ) -> tuple[dict[str, int], set[tuple[str, int | str]], bool]:
        cfg = self.config
        partitions = self._check_topics(admin)
        # before the fingerprint records this version's queries (it reads the last one's)
        adopt_renamed_checkpoints(self.topology, cfg)
        first_start = read_fingerprint(Path(cfg.checkpoint_dir)) is None
        check_fingerprint(
            Path(cfg.checkpoint_dir),
            self.topology,
            cfg.application_id,
            bootstrap_servers=cfg.bootstrap_servers,
            state_dir=cfg.state_dir,
        )
        fenced = fence_recorded(cfg) if cfg.processing_guarantee == "exactly_once_v2" else set()
        return partitions, fenced, first_start

    def _check_topics(self, admin: KafkaAdmin) -> dict[str, int]:
        """Partition counts of the source, sink and dead-letter topics; raises
        :class:`MissingSourceTopicError` naming a topic that does not exist.
        """
        cfg = self.config
        partitions = dict(admin.require_topics(self.topology.source_topics, "Source"))
        partitions.update(admin.require_topics(self.topology.sink_topics, "Sink"))
        if cfg.dead_letter_queue_topic is not None:
            role = "Dead-letter (errors.dead.letter.queue.topic.name)"
            partitions.update(admin.require_topics([cfg.dead_letter_queue_topic], role))
        if cfg.audit_topic is not None:
            admin.require_topics([cfg.audit_topic], "Audit (streamtable.audit.topic)")
        return partitions

    def _start_audit(self, admin: KafkaAdmin, partitions: dict[str, int]) -> None:
        """Start the data-loss audit's queries (before the application's: the sink topics'
        end offsets taken here are where their counts start).
        """
        from streamtable.runtime.audit_queries import AuditQueries
        from streamtable.topology.nodes import SourceNode

        resets = {
            t: n.auto_offset_reset
            for n in self.topology.graph.of_type(SourceNode)
            if n.auto_offset_reset is not None
            for t in n.topics
        }
        cfg = self.config
        sinks = self.topology.sink_topics
        self._audit = AuditQueries(
            self._spark,
            cfg,
            self.topology.source_topics,
            sinks,
            partitions,
            admin.end_offsets(sinks) if sinks else {},
            lambda topic: resets.get(topic, cfg.auto_offset_reset),
        )
        self._audit.start()

    def _stop_audit(self) -> None:
        audit, self._audit = self._audit, None
        if audit is not None:
            audit.stop(lambda q: self._let_batch_finish(q, time.monotonic() + 10.0))

    def _start_query(self, plan: Any) -> Any:
        cfg = self.config
        df = plan.df
        own_sink = self._own_sink() or plan.writes_internal is not None
        if plan.sink == "kafka" and not own_sink:
            # Spark's Kafka sink cannot set record timestamps; it needs no task names
            df = df.drop(TIMESTAMP_COLUMN, SOURCE_SLOT_COLUMN)
        real_time = cfg.trigger == "real_time"
        writer = (
            df.writeStream.queryName(f"{cfg.application_id}-{plan.name}")
            # real-time mode takes update mode only (a stateless query's rows are the same)
            .outputMode("update" if real_time else plan.output_mode)
            .option("checkpointLocation", str(Path(cfg.checkpoint_dir) / plan.name))
        )
        if cfg.trigger == "available_now":
            writer = writer.trigger(availableNow=True)
        elif real_time:
            # the batch duration is how often progress is checkpointed (Kafka Streams' commit
            # interval); records are processed as they arrive. Spark's minimum: 5 s.
            duration = max(cfg.commit_interval_ms, REAL_TIME_MIN_BATCH_MS)
            writer = writer.trigger(realTime=f"{duration} milliseconds")
        else:
            interval = cfg.commit_interval_ms
            if plan.file_sink is not None and plan.file_sink.commit_interval_ms is not None:
                interval = plan.file_sink.commit_interval_ms
            writer = writer.trigger(processingTime=f"{interval} milliseconds")
        if plan.sink == "files":
            checkpoint = Path(cfg.checkpoint_dir) / plan.name
            prepare_file_sink(self._spark, plan.file_sink, checkpoint)
            writer = file_sink_writer(writer, plan.file_sink)
        elif plan.sink == "kafka" and own_sink:
            # also every repartition topic: records keep their timestamps (Kafka Streams'
            # stream time downstream), which Spark's Kafka sink cannot write
            sink = ForeachBatchSink(
                output_spec(cfg, f"{plan.name}.sink"), query=f"{cfg.application_id}-{plan.name}"
            )
            self._sinks.append(sink)
            writer = writer.foreachBatch(sink)
        elif plan.sink == "kafka":
            writer = writer.format("kafka").option("kafka.bootstrap.servers", cfg.bootstrap_servers)
            for k, v in cfg.producer_config.items():
                writer = writer.option(f"kafka.{k}", str(v))
        else:
            writer = writer.format("noop")
        log.info(
            "[%s] starting query %s (%s mode)",
            cfg.application_id,
            plan.name,
            "update" if real_time else plan.output_mode,
        )
        # read by Spark when the query starts (and then fixed by its checkpoint)
        from streamtable.runtime.spark import query_start_conf

        encoding = {"spark.sql.streaming.stateStore.encodingFormat": plan.state_encoding}
        with query_start_conf(self._spark, encoding):
            return writer.start()

    def _await_writers(self, plan: Any) -> None:
        """Under ``available_now``, let the queries writing ``plan``'s repartition topics
        finish first: a query started before them would stop before their records exist.
        """
        for q, p in zip(self._queries, self._plans, strict=True):
            if p.writes_internal in plan.reads_internal:
                q.awaitTermination()
                if q.exception() is not None:
                    raise StreamsError(
                        f"Query {p.name!r} writing repartition topic {p.writes_internal!r} "
                        f"failed: {q.exception()}"
                    )

    def _own_sink(self) -> bool:
        """Whether sinks write through streamtable's producer instead of Spark's Kafka sink."""
        cfg = self.config
        return cfg.processing_guarantee == "exactly_once_v2" or (
            cfg.production_exception_handler == "continue"
        )

    def _watch(self) -> None:
        """The monitor thread: every 0.2 s, the bookkeeping of the queries' progress, then
        their failures. A bookkeeping step that raises is logged and tried again at the next
        tick; the failure check runs regardless (it used to end with the thread, silently).
        """
        warned: set[str] = set()
        while not self._stop_monitor.wait(0.2):
            failure = None
            for step in self._bookkeeping_steps():
                try:
                    result = step()
                    if isinstance(result, BaseException):
                        failure = result
                except Exception as e:
                    if self._stop_monitor.is_set():
                        return  # closing: what the step read is going away
                    message = f"{type(e).__name__}: {e}"
                    if message not in warned:  # once per distinct error, not every tick
                        warned.add(message)
                        log.warning(
                            "[%s] the monitor's bookkeeping failed, retrying at the next tick: %s",
                            self.config.application_id,
                            message,
                        )
            if failure is not None:
                self._fail(failure)
                return
            try:
                if self._check_queries():
                    return
            except Exception as e:  # e.g. the JVM is gone: the queries cannot be told
                if not self._stop_monitor.is_set():
                    self._fail(e)
                return

    def _bookkeeping_steps(self) -> list[Callable[[], BaseException | None]]:
        """One tick's steps of progress bookkeeping, each run on its own (one that raises
        does not keep the others from running); a step may return a connector's failure.
        """
        steps: list[Callable[[], Any]] = [lambda: self._ledger.update(self._queries)]
        if self._group_offsets is not None:
            steps.append(lambda: self._group_offsets.update(self._queries))
        purger = self._purger  # close() drops it
        if purger is not None:
            steps.append(lambda: purger.update(self._queries))
        if self._replica is not None:
            steps.append(self._report_batches)
        if self._connectors is not None:
            steps.append(self._connector_failure)
        audit = self._audit
        if audit is not None:
            steps.append(audit.update)
        return steps

    def _connector_failure(self) -> BaseException | None:
        failure = self._connectors.poll()
        return None if failure is None else StreamsError(failure)

    def _check_queries(self) -> bool:
        """Restart the queries that failed with a transient error; fail the application on
        any other failure (True then).
        """
        for i, q in enumerate(list(self._queries)):
            exc = q.exception()
            if exc is None:
                if i in self._retrying and q.recentProgress:
                    del self._retrying[i]  # the restarted query made progress
                continue
            if not self._restart_if_transient(i, exc):
                self._fail(exc)
                return True
        return False

    def _report_batches(self) -> None:
        """Tell the stores' replica about each micro-batch committed since the last call
        (called by the monitor thread and by :meth:`await_caught_up`).
        """
        with self._report_lock:
            for i, q in enumerate(list(self._queries)):
                progress = q.lastProgress
                if progress is None:
                    continue
                # an idle report (its offsets are committed too: a restarted query with no
                # new input posts only those) carries the next batch's id: that batch, when
                # it runs, is reported after it
                seen = (int(progress["batchId"]), executed(progress))
                if seen <= self._reported.get(i, (-1, True)):
                    continue
                self._reported[i] = seen
                self._replica.batch_committed(self._plans[i].name, end_offsets(progress))

    def _restart_if_transient(self, index: int, exc: BaseException) -> bool:
        """Restart failed query ``index`` from its checkpoint after a transient Kafka error.

        Kafka Streams retries such errors for ``task.timeout.ms`` before it fails; streamtable
        restarts the query (its checkpoint replays the failed batch, exactly once under
        ``exactly_once_v2``). Returns False when the error is not transient or the time is up.
        """
        if not is_transient(exc):
            return False
        now = time.monotonic()
        first, last = self._retrying.get(index, (now, 0.0))
        if (now - first) * 1000 > self.config.task_timeout_ms:
            return False
        if now - last < 1.0:
            return True  # back off: at most one restart per second
        with self._lock:
            if self._state is not State.RUNNING:
                return True
            log.warning(
                "[%s] query %s failed with a transient error; restarting it from its "
                "checkpoint (task.timeout.ms=%d): %s",
                self.config.application_id,
                self._plans[index].name,
                self.config.task_timeout_ms,
                headline(exc),
            )
            try:
                self._queries[index] = self._start_query(self._plans[index])
            except Exception as e:  # the restart itself failed: try again later
                log.warning("[%s] restart failed: %s", self.config.application_id, e)
        self._retrying[index] = (first, time.monotonic())
        return True

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._state not in (State.RUNNING, State.CREATED):
                return
            self._error = exc
            self._failing_thread = threading.current_thread()
            self._transition(State.PENDING_ERROR)
            for q in self._queries:
                try:
                    q.stop()
                except Exception:  # pragma: no cover - best effort
                    pass
            self._stop_audit()
            self._transition(State.ERROR)
            self._release_state_dir()
        log.error("[%s] a query failed: %s", self.config.application_id, exc)
        try:
            if self._handler is not None:
                self._handler(exc)
        finally:
            self._failure_handled.set()

    def close(self, timeout: timedelta | None = None) -> bool:
        """Stop every query and release resources; the state ends ``NOT_RUNNING``.

        After a failure the state stays ``ERROR`` (Kafka Streams' terminal state: its
        ``close()`` leaves it), and the resources are released all the same.

        Returns
        -------
        bool
            True when all queries stopped within ``timeout`` (default: no limit) and no
            running micro-batch had to be interrupted. False when a query was still stopping
            at the deadline, as Kafka Streams' ``close(Duration)`` returns false, or when a
            running micro-batch was interrupted (it is redone on restart): one still running
            at the deadline, after 30 s without a timeout, or any running one under the
            ``real_time`` trigger, whose batches last the commit interval.
        """
        with self._lock:
            if self._state in (State.NOT_RUNNING, State.PENDING_SHUTDOWN) or self._closed:
                return True
            self._closed = True
            failed = self._state in (State.ERROR, State.PENDING_ERROR)
            self._stop_monitor.set()
            if not failed:
                self._transition(State.PENDING_SHUTDOWN)
        self._stop_query_server()
        deadline = None if timeout is None else time.monotonic() + timeout.total_seconds()
        ok = True
        for q in self._queries:
            try:
                # a real-time batch lasts the whole commit interval: it is stopped as it runs
                # (at-least-once: a restart reprocesses what came after its last checkpoint)
                if self.config.trigger == "real_time":
                    ok = ok and not (q.isActive and q.status.get("isTriggerActive"))
                elif not self._let_batch_finish(q, deadline):
                    ok = False
                q.stop()
                if deadline is not None:
                    left = deadline - time.monotonic()
                    # stop() returned past the deadline, or the query still runs at it
                    if left <= 0 or q.awaitTermination(left) is False:
                        ok = False
            except Exception:  # a failed query raises again on stop/await
                pass
        monitor = self._monitor
        if monitor is not None and monitor is not threading.current_thread():
            # a tick may be using the admin client or the offset committer. A failure handler
            # runs on the monitor thread: one that close()s cannot wait for itself, and one
            # waiting for this thread is waited for as long as elsewhere (HANDLER_WAIT_S)
            monitor.join(
                HANDLER_WAIT_S if deadline is None else max(0.0, deadline - time.monotonic())
            )
        self._stop_audit()
        self._stop_metrics_server()
        if self._group_offsets is not None:
            self._group_offsets.update(self._queries)
            self._group_offsets.close()
        if self._replica is not None:
            self._replica.close()
        self._close_admin()
        self._release_state_dir()
        if not failed:
            self._transition(State.NOT_RUNNING)
        return ok

    def _new_admin(self) -> KafkaAdmin:
        """An admin client with the application's settings (``admin.*``, ``request.timeout.ms``,
        ``replication.factor`` for the internal topics it creates).
        """
        cfg = self.config
        return KafkaAdmin(
            cfg.bootstrap_servers,
            timeout_ms=cfg.request_timeout_ms,
            config=cfg.admin_config,
            replication_factor=cfg.replication_factor,
        )

    def _close_admin(self) -> None:
        """Close the admin client of the start (the repartition purger's too), as Kafka
        Streams' close() does: one left connected would log the broker's disappearance on the
        console, for as long as anything (an exception's traceback) references it.
        """
        admin, self._admin, self._purger = self._admin, None, None
        if admin is not None:
            admin.close()

    def _release_state_dir(self) -> None:
        lock, self._state_dir_lock = self._state_dir_lock, None
        if lock is not None:
            lock.release()

    @staticmethod
    def _let_batch_finish(query: Any, deadline: float | None) -> bool:
        """Wait (up to 30 s or the deadline) for a running micro-batch to commit; False when
        one still runs at the deadline (stopping the query interrupts it).

        Stopping a query mid-batch interrupts it (the batch is redone on restart); letting it
        finish first is Kafka Streams' clean close, which commits before it shuts down.
        """
        limit = time.monotonic() + 30.0
        if deadline is not None:
            limit = min(limit, deadline)
        while query.isActive and query.status.get("isTriggerActive"):
            if time.monotonic() >= limit:
                return False
            time.sleep(0.05)
        return True

    def cleanup(self) -> None:
        """Delete this application's local state and checkpoints (``KafkaStreams#cleanUp``).

        Raises
        ------
        IllegalStateError
            While the application is running.
        StateDirLockedError
            If another running instance holds the state directory.
        """
        if self._state in (State.RUNNING, State.PENDING_SHUTDOWN, State.PENDING_ERROR):
            raise IllegalStateError("cleanup() may only be called before start() or after close().")
        cfg = self.config
        if not Path(cfg.checkpoint_dir).exists():
            return
        lock = StateDirLock(cfg.checkpoint_dir).acquire(
            cfg.application_id,
            message=(
                f"cleanup() refused: the state directory {cfg.checkpoint_dir!r} of application "
                f"{cfg.application_id!r} is in use by a running instance (pid {{pid}}). Stop "
                "that instance first."
            ),
        )
        with lock:
            shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)

    def __enter__(self) -> KafkaStreams:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- progress ---------------------------------------------------------------------------

    def await_caught_up(self, timeout: timedelta = timedelta(minutes=2)) -> None:
        """Wait until every record in the input topics *at the call* is processed and committed,
        and every queryable store reflects it (interactive queries made after the return see
        all of that input, as queries of Kafka Streams' active stores do after processing).
        With ``streamtable.audit.topic``, also until the audit's queries have counted that
        input and the output written, and published the counts.

        Parameters
        ----------
        timeout : timedelta
            How long to wait.

        Raises
        ------
        StreamsError
            If the application failed (``__cause__`` is the query's error).
        StreamsTimeoutError
            If not caught up within ``timeout``; says how far each query got.
        IllegalStateError
            If the application is not running.
        """
        if self._state is State.CREATED:
            raise IllegalStateError(
                "await_caught_up() needs a started application; call start() first."
            )
        admin = self._new_admin()
        try:
            self._wait_caught_up(admin, timeout)
        finally:
            admin.close()

    def _wait_caught_up(self, admin: KafkaAdmin, timeout: timedelta) -> None:
        cfg = self.config
        targets = admin.end_offsets(self.topology.source_topics)
        deadline = time.monotonic() + timeout.total_seconds()
        # once every writer of a repartition topic has caught up (with its own inputs), the
        # topic's end offsets are what its readers have to reach
        written = {p.writes_internal for p in self._plans if p.writes_internal is not None}
        reached: set[str] = set()
        while True:
            self._raise_if_failed()
            for topic in sorted(written - reached):
                writers = [
                    (q, p)
                    for q, p in zip(self._queries, self._plans, strict=True)
                    if p.writes_internal == topic
                ]
                if all(
                    set(p.reads_internal) <= reached and caught_up(q, targets) for q, p in writers
                ):
                    targets = {**targets, **admin.end_offsets([topic])}
                    reached.add(topic)
            pending = [q for q in self._queries if not caught_up(q, targets)]
            if not pending and reached == written:
                self._await_stores(deadline)
                self._await_audit(admin, deadline)
                return
            if all(not q.isActive for q in pending) and cfg.trigger == "available_now":
                self._raise_if_failed()
                self._await_audit(admin, deadline)
                return
            if self._state is State.NOT_RUNNING:
                raise IllegalStateError("The application was closed while waiting to catch up.")
            if time.monotonic() >= deadline:
                raise StreamsTimeoutError(
                    f"Not caught up within {timeout}: queries {[q.name for q in pending]} have not "
                    f"processed the input up to {targets}. Last progress: "
                    f"{[str(q.lastProgress and q.lastProgress['sources']) for q in pending]}"
                )
            time.sleep(0.1)

    def _await_audit(self, admin: KafkaAdmin, deadline: float) -> None:
        """Wait until the audit queries (``streamtable.audit.topic``) have counted the input
        and output the application has processed, so that the audit topic reflects it.
        """
        audit = self._audit
        if audit is not None and not audit.await_caught_up(admin.end_offsets, deadline):
            raise StreamsTimeoutError(
                "Caught up with the input, but the data-loss audit's queries "
                f"({[q.name for q in audit.queries]}) did not count it in time; their "
                "errors are in the log."
            )

    def _await_stores(self, deadline: float) -> None:
        """Wait until every queryable store reflects its query's last committed batch, so that
        interactive queries after :meth:`await_caught_up` see all the input it waited for.
        """
        if self._replica is None:
            return
        self._report_batches()
        for store, info in sorted(self._changelogs.items()):
            index = next((i for i, p in enumerate(self._plans) if p.name == info.query), None)
            progress = None if index is None else self._queries[index].lastProgress
            if progress is None:
                continue
            bound = {tp: off - 1 for tp, off in end_offsets(progress).items() if off > 0}
            try:
                self._replica.wait_for(store, bound, max(deadline - time.monotonic(), 0.0))
            except InvalidStateStoreException:
                # the application left RUNNING meanwhile: its failure, or that it was closed
                self._raise_if_failed()
                raise IllegalStateError(
                    f"await_caught_up(): the application is {self._state.value} now, not "
                    "RUNNING (it was closed while waiting)."
                ) from None
            except StreamsError as e:
                if time.monotonic() < deadline:
                    raise  # the replica failed: its own message says how
                raise StreamsTimeoutError(
                    f"Caught up with the input, but the queryable store {store!r} did not "
                    f"reflect it in time: {e}"
                ) from e

    def _raise_if_failed(self) -> None:
        if self._error is None:
            for q in self._queries:
                exc = q.exception()
                if exc is not None and not is_transient(exc):  # transient: the monitor retries
                    self._fail(exc)
                    break
        if self._error is not None:
            if self._failing_thread is not threading.current_thread():
                # the failure surfaces after the handler (run by the thread that failed)
                self._failure_handled.wait(HANDLER_WAIT_S)
            raise StreamsError(
                f"Application {self.config.application_id!r} failed: {self._error}"
            ) from self._error

    def metrics(self) -> dict[str, Any]:
        """The application's metrics: totals over all queries, and Kafka Streams' metrics.

        Returns
        -------
        dict
            ``{"processed-records": int, "dropped-records": {reason: int},
            "replayed-records": int, "metrics": list[Metric]}``.

            ``processed-records`` sums the input records of every query.
            ``replayed-records`` counts the input records of micro-batches an earlier run
            left unfinished and this run processes again: under ``at_least_once`` their
            results may be duplicated (the count bounds the duplicates from the input side);
            under ``exactly_once_v2`` they are not. Drop reasons are ``deserialization``,
            ``invalid_timestamp``, ``negative_timestamp``, ``null_key``, ``null_value``,
            ``null_lookup_key`` (a GlobalKTable join whose key mapper gave ``None``),
            ``late``, ``processing``, ``production`` (Kafka Streams' ``dropped-records``
            metric, by cause), and ``expired`` for table updates older than a versioned
            table's history retention (Kafka Streams' versioned store counts them in
            ``dropped-records`` too).

            ``metrics`` lists :class:`~streamtable.runtime.metrics.Metric` entries (named
            tuples ``(name, group, tags, value, description)``) with Kafka Streams' names and
            meanings, per Spark query (tag ``query``): ``process-total``/``-rate``/
            ``-latency-avg``/``-latency-max`` and ``commit-*`` (group
            ``stream-thread-metrics``), ``dropped-records-total``/``-rate`` by ``reason``
            (``stream-task-metrics``), ``records-lag`` per ``topic``/``partition`` and
            ``records-lag-max`` (``consumer-fetch-manager-metrics``), ``estimate-num-keys``
            and ``memory-used-bytes`` per stateful operator (``stream-state-metrics``), and
            streamtable's own (``streamtable-metrics``): ``replayed-records-total``,
            ``dead-letter-records-total`` with a dead-letter topic, ``aborted-batches-total``
            under ``exactly_once_v2``. Units and definitions: ``docs/metrics.md`` and
            :func:`streamtable.runtime.metrics.query_metrics`.

        Examples
        --------
        ``[m.value for m in app.metrics()["metrics"] if m.name == "records-lag-max"]``
        """
        self._ledger.update(self._queries)
        processed, dropped = self._ledger.totals()
        rejected: dict[str, int] = {}
        aborted: dict[str, int] = {}
        for sink in self._sinks:
            rejected[sink.query] = rejected.get(sink.query, 0) + sink.rejected
            if sink.spec.exactly_once:
                aborted[sink.query] = aborted.get(sink.query, 0) + sink.aborted
        if sum(rejected.values()):
            dropped["production"] = dropped.get("production", 0) + sum(rejected.values())
        snapshot = self._ledger.snapshot()
        entries: list[Metric] = application_metrics(
            with_end_offsets(snapshot, self._end_offsets_now(snapshot)),
            sink_rejected=rejected,
            aborted_batches=aborted,
            replayed=self._replayed,
            dead_letter_topic=self.config.dead_letter_queue_topic,
        )
        return {
            "processed-records": processed,
            "dropped-records": dropped,
            "replayed-records": self._replayed,
            "metrics": entries,
        }

    def _end_offsets_now(self, queries: list[QueryFigures]) -> dict[tuple[str, int], int]:
        """The source partitions' end offsets on the broker now, as the application's
        consumer sees them (the last stable offset when it reads ``read_committed``); empty
        when the application is not running or the broker does not answer within 5 s
        (``records-lag`` then counts from the offsets known when the last micro-batch was
        planned).
        """
        admin = self._admin
        if admin is None or self._state is not State.RUNNING:
            return {}
        counts: dict[str, int] = {}
        for q in queries:
            for topic, partition in q.reached:
                counts[topic] = max(counts.get(topic, 0), partition + 1)
        cfg = self.config
        committed = cfg.processing_guarantee == "exactly_once_v2" or (
            str(cfg.consumer_config.get("isolation.level", "")).lower() == "read_committed"
        )
        try:
            return admin.end_offsets(counts, read_committed=committed, timeout_s=5.0)
        except Exception as e:  # noqa: BLE001 - metrics never fail on a broker hiccup
            log.debug("records-lag: could not read the end offsets: %s", e)
            return {}

    def store(self, parameters: Any) -> Any:
        """A read-only view of a queryable store (Kafka Streams' ``KafkaStreams.store``).

        A store is queryable when the topology names it (``count(name=...)``,
        ``reduce``/``aggregate(name=...)``, ``StreamsBuilder.table(name=...)``: Kafka Streams'
        ``Materialized.as``). The view reads a replica that the application keeps from the
        store's changelog topic; it reflects every committed micro-batch up to its
        ``position()``.

        Parameters
        ----------
        parameters : StoreQueryParameters
            ``StoreQueryParameters.from_name_and_type(name, type)`` with type
            ``QueryableStoreTypes.key_value_store()``, ``window_store()`` or
            ``session_store()`` (the store's kind).

        Returns
        -------
        ReadOnlyKeyValueStore or ReadOnlyWindowStore or ReadOnlySessionStore
            A view that raises :class:`~streamtable.errors.InvalidStateStoreException` once
            the application leaves RUNNING.

        Raises
        ------
        InvalidStateStoreException
            If the application is not running, or the store does not exist, is not queryable
            (unnamed, or without serdes) or is of another type; the message says which and
            what to do.
        """
        from streamtable.errors import InvalidStateStoreException
        from streamtable.state.queries import ReadOnlyKeyValueStore
        from streamtable.state.window_queries import ReadOnlySessionStore, ReadOnlyWindowStore

        name, kind = parameters.store_name, parameters.query_type.kind
        if self._state is not State.RUNNING:
            raise InvalidStateStoreException(
                f"Cannot query store {name!r}: the application is {self._state.value}, not "
                "RUNNING. Call start() first (Kafka Streams raises InvalidStateStoreException "
                "too)."
            )
        info = self._changelogs.get(name)
        if info is None:
            if name in self._unlogged:
                reason = self._unlogged[name]
                raise InvalidStateStoreException(f"Store {name!r} is not queryable: {reason}.")
            stores = sorted(self.topology.store_names)
            queryable = sorted(self._changelogs)
            if name in stores:
                raise InvalidStateStoreException(
                    f"Store {name!r} is not queryable: only stores the topology names are "
                    f"(name= of count/reduce/aggregate or StreamsBuilder.table, Kafka Streams' "
                    f"Materialized.as); the queryable stores are {queryable}."
                )
            raise InvalidStateStoreException(
                f"The topology has no store {name!r}; its queryable stores are {queryable}."
            )
        if kind != info.kind:
            raise InvalidStateStoreException(
                f"Store {name!r} is a {info.kind.replace('_', '-')} store, not a "
                f"{kind.replace('_', '-')} store: query it with "
                f"QueryableStoreTypes.{info.kind}_store()."
            )
        views = {
            "key_value": ReadOnlyKeyValueStore,
            "window": ReadOnlyWindowStore,
            "session": ReadOnlySessionStore,
        }
        return views[info.kind](info, self._replica)

    def _changelog_info(self, name: str, action: str) -> Any:
        """The changelog of queryable store ``name`` of a running application, or why not."""
        from streamtable.errors import InvalidStateStoreException

        if self._state is not State.RUNNING:
            raise InvalidStateStoreException(
                f"Cannot {action} store {name!r}: the application is {self._state.value}, not "
                "RUNNING. Call start() first."
            )
        info = self._changelogs.get(name)
        if info is not None:
            return info
        if name in self._unlogged:
            raise InvalidStateStoreException(
                f"Store {name!r} is not queryable: {self._unlogged[name]}."
            )
        raise InvalidStateStoreException(
            f"The topology has no queryable store {name!r}; its queryable stores are "
            f"{sorted(self._changelogs)}."
        )

    def query_metadata_for_key(self, store_name: str, key: Any, key_serializer: Any = None) -> Any:
        """Which endpoint serves ``key`` of store ``store_name`` (Kafka Streams'
        ``queryMetadataForKey``).

        This instance keeps a replica of every partition of its queryable stores, so it is
        the active host of every key (see :mod:`streamtable.state.metadata`); the partition
        is the changelog partition of the key's bytes (murmur2, as Kafka Streams'
        default partitioner).

        Parameters
        ----------
        store_name : str
        key : object
            The key, as the store's key serde (or ``key_serializer``) serializes it.
        key_serializer : Serde, optional
            Default: the store's key serde.

        Returns
        -------
        KeyQueryMetadata
            Active host = ``application.server`` (``HostInfo.unavailable()`` without one).

        Raises
        ------
        InvalidStateStoreException
            If the application is not running, or has no queryable store of that name.
        """
        from streamtable.errors import InvalidStateStoreException
        from streamtable.serde.murmur2 import default_partition
        from streamtable.state.metadata import HostInfo, KeyQueryMetadata

        info = self._changelog_info(store_name, "locate a key of")
        serde = key_serializer or info.key_serde
        data = serde.serialize(key)
        if data is None:
            raise InvalidStateStoreException(f"Cannot locate a null key of store {store_name!r}.")
        return KeyQueryMetadata(
            HostInfo.parse(self.config.application_server),
            frozenset(),
            default_partition(data, info.partitions),
        )

    def streams_metadata_for_store(self, store_name: str) -> list[Any]:
        """The instances serving store ``store_name`` (Kafka Streams'
        ``streamsMetadataForStore``): this one, with every source partition it covers.

        Raises
        ------
        InvalidStateStoreException
            If the application is not running, or has no queryable store of that name.
        """
        from streamtable.state.metadata import HostInfo, StreamsMetadata

        self._changelog_info(store_name, "describe")
        host = HostInfo.parse(self.config.application_server)
        stores = frozenset(self._changelogs)
        return [StreamsMetadata(host, stores, frozenset(self._source_partitions))]

    def queryable_stores(self) -> dict[str, str]:
        """The stores this instance serves to :meth:`store`, by name, with their kind.

        Returns
        -------
        dict[str, str]
            ``{store name: kind}`` in name order, the kind being ``"key_value"``,
            ``"window"`` or ``"session"``. Empty before :meth:`start`: the compiled topology decides
            which named stores have a changelog to serve them from.

        Examples
        --------
        After ``start()``, for a topology with ``count(name="click-counts")``:
        ``{"click-counts": "key_value"}``.
        """
        return {name: self._changelogs[name].kind for name in sorted(self._changelogs)}

    @property
    def queries(self) -> list[Any]:
        """The running Spark ``StreamingQuery`` objects (for inspection)."""
        return list(self._queries)


def _check_real_time_config(cfg: StreamsConfig, own_sink: bool) -> None:
    """Settings Spark's real-time mode cannot honour, refused when the app is constructed."""
    why = []
    if own_sink:
        why.append(
            "it writes through Spark's Kafka sink, which is at-least-once and stops on a "
            "failed write: set processing.guarantee='at_least_once' and "
            "default.production.exception.handler='fail'"
        )
    if cfg.max_offsets_per_trigger is not None:
        why.append(
            "it reads each record as it arrives, with no per-batch limit: unset "
            "streamtable.max.offsets.per.trigger"
        )
    if cfg.audit_topic is not None:
        why.append(
            "the data-loss audit runs micro-batch queries beside it: unset streamtable.audit.topic"
        )
    if why:
        raise ConfigError(
            "streamtable.trigger='real_time' (Spark's real-time mode): "
            + "; ".join(why)
            + ". Or use streamtable.trigger='processing_time'."
        )
