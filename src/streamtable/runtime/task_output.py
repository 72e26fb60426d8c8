"""Records a Spark task writes to Kafka, exactly once per micro-batch under ``exactly_once_v2``.

Spark's Kafka sink is at-least-once, and a Kafka transaction belongs to the producer that opened
it, so a driver cannot commit what executors wrote. streamtable therefore commits **one Kafka
transaction per Spark task**: per output stage (the sink of a query, a late-records or
dead-letter writer), per task partition ``p`` and per micro-batch ``b``.

The protocol (see ``docs/exactly-once.md`` for the failure cases):

1. The task's producer has ``transactional.id = {application.id}-{stage}-{p}``, the same in every
   attempt and every restart of the application. ``init_transactions`` fences any earlier
   producer with that id (a zombie attempt, or the process killed before a restart) and aborts
   its open transaction.
2. The task reads its *marker*: the offset committed by group ``{application.id}-eos-{stage}-{p}``
   on partition 0 of the internal topic ``{application.id}-eos-markers-streamtable-internal``,
   with the Spark query id as offset metadata. Marker ``b + 1`` with this query's id means the
   batch's output for ``p`` is already committed: a replayed batch (Spark re-runs the same
   batch id over the same offsets after a crash) writes nothing.
3. Otherwise it produces its records and the new marker ``b + 1`` in one transaction
   (``send_offsets_to_transaction``) and commits. Output and marker become visible together to
   ``read_committed`` consumers, or not at all.

This is exactly-once per (stage, partition, batch) *provided the records a task writes are a
deterministic function of the batch* (same offsets, same state, same code, same
``streamtable.shuffle.partitions``), which holds for streamtable's operators.

Under ``at_least_once`` the same class is a plain idempotent producer: a retried task writes its
records again.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

from streamtable.errors import StreamsError
from streamtable.runtime.librdkafka_config import librdkafka_settings

if TYPE_CHECKING:
    from streamtable.config import StreamsConfig

log = logging.getLogger("streamtable")

#: Suffix of the internal topic that holds the exactly-once markers (as consumer-group offsets).
MARKER_TOPIC_SUFFIX = "-eos-markers-streamtable-internal"

Header = tuple[str, bytes]


def marker_topic(application_id: str) -> str:
    """The internal topic whose partition 0 carries the exactly-once markers.

    >>> marker_topic("wordcount")
    'wordcount-eos-markers-streamtable-internal'
    """
    return f"{application_id}{MARKER_TOPIC_SUFFIX}"


def marker_group(application_id: str, stage: str, partition: int | str) -> str:
    """The consumer group holding the marker of one (stage, task partition or slot).

    >>> marker_group("wordcount", "Counts-sink", 3)
    'wordcount-eos-Counts-sink-3'
    """
    return f"{application_id}-eos-{stage}-{partition}"


def transactional_id(application_id: str, stage: str, partition: int | str) -> str:
    """The ``transactional.id`` of one (stage, task partition or slot); stable across restarts.

    >>> transactional_id("wordcount", "Counts-sink", 3)
    'wordcount-Counts-sink-3'
    """
    return f"{application_id}-{stage}-{partition}"


@dataclass(frozen=True)
class OutputSpec:
    """Where and how the tasks of one output stage write (built on the driver; picklable).

    Attributes
    ----------
    application_id : str
        ``application.id``: prefix of transactional ids, marker groups and the marker topic.
    stage : str
        Stable id of the output stage within the application (e.g. ``"<query>.sink"``).
    producer_config : dict
        librdkafka settings: ``bootstrap.servers`` and the ``producer.*`` configs that
        librdkafka takes for a producer (:func:`~streamtable.runtime.librdkafka_config.
        librdkafka_settings`; Java-only keys are left out).
    guarantee : {"at_least_once", "exactly_once_v2"}
        ``processing.guarantee``.
    production_handler : {"fail", "continue"}
        ``production.exception.handler``: what to do with a record the client or the broker
        rejects (Kafka Streams' ``ProductionExceptionHandler``).
    timeout_ms : int
        How long a producer call may block (``transaction.timeout.ms`` is twice that).
    capture_dir : str, optional
        Test driver mode: records go to this folder
        (:mod:`~streamtable.runtime.captured_output`), not to Kafka; no transactions.
    """

    application_id: str
    stage: str
    producer_config: dict[str, Any] = field(default_factory=dict)
    guarantee: str = "at_least_once"
    production_handler: str = "fail"
    timeout_ms: int = 60000
    capture_dir: str | None = None

    @property
    def exactly_once(self) -> bool:
        """True under ``exactly_once_v2``."""
        return self.guarantee == "exactly_once_v2"


def output_spec(config: StreamsConfig, stage: str) -> OutputSpec:
    """The :class:`OutputSpec` of output stage ``stage`` of the application ``config`` runs.

    Parameters
    ----------
    config : StreamsConfig
        The application's configuration.
    stage : str
        A stable id, unique within the application (query name plus stage).
    """
    producer: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap_servers,
        "partitioner": "murmur2_random",  # Java's default partitioner for keyed records
    }
    producer.update(librdkafka_settings(config.producer_config, "producer").accepted)
    return OutputSpec(
        application_id=config.application_id,
        stage=stage.replace(" ", "_"),
        producer_config=producer,
        guarantee=config.processing_guarantee,
        production_handler=config.production_exception_handler,
        timeout_ms=max(config.request_timeout_ms, 30000),
    )


@dataclass(frozen=True)
class TaskCoordinates:
    """Which task writes: Spark's task partition, micro-batch id and query id.

    ``slot``, when set, names the task instead of its partition number: tasks reading Kafka
    partitions directly are numbered by Spark in an order that may change when a batch is re-run
    after a restart, so they are named after the source partition they read (``topic-p``).
    """

    partition: int
    batch_id: int | None
    query_id: str | None
    slot: str | None = None

    @property
    def name(self) -> int | str:
        """The slot if set, else the task partition number."""
        return self.partition if self.slot is None else self.slot

    @staticmethod
    def current() -> TaskCoordinates:
        """The coordinates of the running Spark task (partition 0, no batch outside Spark)."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:
            return TaskCoordinates(0, None, None)
        batch = tc.getLocalProperty("streaming.sql.batchId")
        return TaskCoordinates(
            tc.partitionId(),
            None if batch is None else int(batch),
            tc.getLocalProperty("sql.streaming.queryId"),
        )


def _transactional_config(spec: OutputSpec, tid: str) -> dict[str, Any]:
    conf = dict(spec.producer_config)
    conf.setdefault("transaction.timeout.ms", 60000)
    conf.update({"transactional.id": tid, "enable.idempotence": True})
    return conf


def close_cached_clients() -> None:
    """Close the marker consumers and producers this process cached (tests, shutdown)."""
    for consumer in _consumers.values():
        try:
            consumer.close()
        except Exception:  # pragma: no cover - best effort
            pass
    _consumers.clear()
    for producer in _plain_producers.values():
        producer.flush(5)
    _plain_producers.clear()
    _txn_producers.clear()
    _initialized_here.clear()
    _last_used.clear()
    global _next_sweep
    _next_sweep = 0.0


_consumers: dict[tuple[str, str], Any] = {}
#: transactional producers kept by this worker process between batches, by transactional.id
_txn_producers: dict[str, Any] = {}
#: ids whose kept producer was initialized in an earlier batch (its epoch must be probed)
_initialized_here: set[str] = set()
_plain_producers: dict[tuple[tuple[str, str], ...], Any] = {}

#: Seconds a client this process cached may go unused before the start of a later task closes
#: it. The caches live as long as the Python worker, which outlives an application when the
#: Spark session is reused (a notebook, tests, an app started again in the same process);
#: Kafka Streams closes a task's producer with the task. An application whose tasks come back
#: later than this gets new clients (``init_transactions`` again, which fences nothing alive).
CLIENT_IDLE_S = 300.0
_CACHES: dict[str, dict[Any, Any]] = {
    "marker consumer": _consumers,
    "transactional producer": _txn_producers,
    "producer": _plain_producers,
}
#: when each cached client was last handed out or kept: (cache, key) -> time.monotonic()
_last_used: dict[tuple[str, Any], float] = {}
#: the task outputs of this process that were opened and are still referenced
_live_outputs: weakref.WeakSet[TaskOutput] = weakref.WeakSet()
#: when an opening task output next looks for idle clients (time.monotonic()): every task
#: opens one, and a sweep now and then is enough for an idle time of minutes
_next_sweep = 0.0
_SWEEP_EVERY_S = CLIENT_IDLE_S / 10


def _used(cache: str, key: Any) -> None:
    _last_used[(cache, key)] = time.monotonic()


def _keep_transactional(tid: str, producer: Any) -> None:
    """Keep ``producer`` for the next batch of the task ``tid`` in this process."""
    _txn_producers[tid] = producer
    _used("transactional producer", tid)


def _close_idle_clients_now_and_then() -> None:
    """:func:`close_idle_clients`, at most once every ``CLIENT_IDLE_S / 10`` seconds."""
    global _next_sweep
    now = time.monotonic()
    if now >= _next_sweep:
        _next_sweep = now + _SWEEP_EVERY_S
        close_idle_clients(now)


def close_idle_clients(now: float | None = None) -> int:
    """Close the clients of this process no task used for :data:`CLIENT_IDLE_S` seconds.

    Opening a task output calls it (at most every ``CLIENT_IDLE_S / 10`` s). A client an open
    :class:`TaskOutput` of this process holds is never closed, however long ago it was handed
    out (a long first batch may open a second output of the same task minutes after the
    first).

    Parameters
    ----------
    now : float, optional
        ``time.monotonic()`` by default.

    Returns
    -------
    int
        How many clients were closed.
    """
    now = time.monotonic() if now is None else now
    held = {
        id(client)
        for output in list(_live_outputs)
        for client in (output._producer, output._consumer)
        if client is not None
    }
    closed = 0
    for (cache, key), used in list(_last_used.items()):
        if now - used < CLIENT_IDLE_S or id(_CACHES[cache].get(key)) in held:
            continue
        del _last_used[(cache, key)]
        client = _CACHES[cache].pop(key, None)
        if client is None:
            continue
        _initialized_here.discard(key)
        try:
            client.close() if cache == "marker consumer" else client.flush(0)
        except Exception:  # noqa: BLE001 - a client already failed; it is let go either way
            pass
        closed += 1
    if closed:
        log.debug("closed %d Kafka client(s) unused for %.0f s", closed, CLIENT_IDLE_S)
    return closed


def _marker_consumer(spec: OutputSpec, group: str) -> Any:
    """A consumer of group ``group`` (cached per worker process) to read and commit markers."""
    key = (spec.producer_config.get("bootstrap.servers", ""), group)
    consumer = _consumers.get(key)
    if consumer is None:
        from confluent_kafka import Consumer

        conf = {
            k: v
            for k, v in spec.producer_config.items()
            if k.startswith(("bootstrap.", "security.", "sasl.", "ssl.", "client."))
        }
        conf.update(
            {
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        consumer = Consumer(conf)
        _consumers[key] = consumer
    _used("marker consumer", key)
    return consumer


def _with_retries(what: str, timeout_s: float, call: Any) -> Any:
    """``call()``, retried on retriable Kafka errors (coordinator moves, loading) until timeout."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return call()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            retriable = isinstance(err, KafkaError) and (
                err.retriable()
                or err.code()
                in (
                    KafkaError.NOT_COORDINATOR,
                    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.COORDINATOR_NOT_AVAILABLE,
                    KafkaError.UNSTABLE_OFFSET_COMMIT,
                    KafkaError._TIMED_OUT,
                    KafkaError._TRANSPORT,
                )
            )
            if not retriable or time.monotonic() + delay > deadline:
                raise StreamsError(f"{what} failed: {e}") from e
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


#: How long past its own timeout a transactional call may block before it is given up
_STUCK_MARGIN_S = 5.0


class _Stuck(Exception):
    """A client call that did not return within its deadline."""


def _discard_queued(producer: Any, drain_s: float = 1.0) -> None:
    """Drop the records a given-up producer still holds and serve their delivery reports (best
    effort, for at most ``drain_s`` seconds).

    After a failed ``abort_transaction`` (fenced, fatal or timed out) the producer still counts
    the records it could not send, or whose delivery reports nobody served; destroyed later,
    librdkafka would print "Producer terminating with N messages still in queue" on the
    process's stderr. They belong to a transaction that never commits (the next
    ``init_transactions`` of its id aborts it), so they are purged here. ``poll`` raises a
    queued client error (such as the ``_FATAL`` event of a fenced producer) before it serves
    the reports behind it, so it is called again, until nothing is left or time is up.
    """
    try:
        producer.purge()
    except Exception as e:  # a producer that cannot purge is left as it is
        log.debug("purging a given-up producer failed: %s", str(e))
        return
    deadline = time.monotonic() + drain_s
    while len(producer) and time.monotonic() < deadline:
        try:
            producer.poll(0.05)
        except Exception:  # a queued error event, raised before the reports behind it
            continue


def initialized_producer(config: dict[str, Any], tid: str, timeout_s: float) -> Any:
    """A transactional producer of ``config`` whose ``init_transactions`` succeeded (retried
    while retriable, within ``timeout_s`` seconds); it fences every earlier producer of ``tid``.

    Raises
    ------
    StreamsError
        When ``init_transactions`` fails. The producer is let go first: the retried call's
        frame lives on in the error's traceback, and through its function's closure it would
        keep the producer alive, reconnecting, for as long as the error is kept.
    """
    from confluent_kafka import Producer

    producer = Producer(config)
    try:
        _with_retries(
            f"init_transactions of {tid!r}",
            timeout_s,
            lambda: producer.init_transactions(timeout_s),
        )
    except BaseException:
        producer = None  # the closure's cell, shared with the lambda
        raise
    return producer


def _forget_frame_locals(error: BaseException) -> None:
    """Drop the locals of the finished frames in the tracebacks of ``error`` and its causes.

    The error of a task output that failed to open or commit outlives the task (Spark reports
    it, a caller may keep it), and its frames hold the producer they made or took from the
    cache. Kept alive by them, a producer its task gave up would go on reconnecting, to a
    broker that may be gone, for as long as the process runs. Line numbers stay; frames still
    running are left alone.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        e = pending.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)
        pending += [e.__cause__, e.__context__]


def _within(call: Callable[[], None], deadline_s: float) -> None:
    """Run ``call`` and wait for it at most ``deadline_s`` seconds.

    librdkafka's ``send_offsets_to_transaction`` can block for ever, past its own timeout,
    when the group coordinator's broker died and left the cluster (librdkafka issues #5456
    and #5511, open in 2.16): the call runs in a daemon thread, and :class:`_Stuck` is raised
    when it has not returned by the deadline (the thread is left blocked). Errors of ``call``
    are raised as they are.

    >>> _within(lambda: None, 1.0)
    >>> import threading
    >>> _within(threading.Event().wait, 0.05)
    Traceback (most recent call last):
    ...
    streamtable.runtime.task_output._Stuck: no answer within 0.05 s (librdkafka #5456/#5511)
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as e:  # handed to the caller's thread
            outcome.append(e)

    worker = threading.Thread(target=run, name="streamtable-txn-commit", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if not outcome:
        raise _Stuck(f"no answer within {deadline_s:g} s (librdkafka #5456/#5511)")
    if outcome[0] is not None:
        raise outcome[0]


#: Said by :func:`_fatal` of a producer that failed fatally without naming why; the runtime
#: re-runs the batch (see ``streamtable.runtime.query_errors.is_transient``).
PRODUCER_FATAL = "producer in a fatal state; the batch is re-run with a new producer"


#: librdkafka error names no ``production.exception.handler`` may continue from: Kafka Streams'
#: ``RecordCollectorImpl.isFatalException`` (authentication and authorization errors,
#: ``SecurityDisabledException``, ``InvalidTopicException``, ``UnknownServerException``,
#: ``OffsetMetadataTooLarge``) never hands them to the handler
_NEVER_SKIPPED = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        "SASL_AUTHENTICATION_FAILED",
        "ILLEGAL_SASL_STATE",
        "UNSUPPORTED_SASL_MECHANISM",
        "_AUTHENTICATION",
        "_SSL",
        "SECURITY_DISABLED",
        "TOPIC_EXCEPTION",
        "UNKNOWN",
        "OFFSET_METADATA_TOO_LARGE",
    }
)


def _never_skipped(err: Any) -> bool:
    """Whether a ``KafkaError`` is one no handler may continue from (see ``_NEVER_SKIPPED``).

    >>> from confluent_kafka import KafkaError
    >>> _never_skipped(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    True
    >>> _never_skipped(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    False
    """
    from confluent_kafka import KafkaError

    return isinstance(err, KafkaError) and err.name() in _NEVER_SKIPPED


def _is_fatal(e: BaseException) -> bool:
    """Whether ``e`` says the producer is in a fatal state (it accepts nothing any more).

    That is an error flagged fatal, or ``_FATAL``, which ``produce`` raises once the
    producer has failed fatally in its background thread (the flag stays with that first
    error).
    """
    from confluent_kafka import KafkaError

    err = e.args[0] if e.args else None
    if not isinstance(err, KafkaError):
        return False
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def _fatal(spec: OutputSpec, e: BaseException) -> StreamsError:
    """A :class:`StreamsError` for a producer's fatal error, naming its cause.

    confluent-kafka raises a fatal error (such as being fenced by a newer producer with the same
    ``transactional.id``) as a ``SystemError`` from the next call into it, with the real
    ``KafkaException`` as its cause; the message carries both, so that the runtime recognizes
    fencing (and re-runs the batch) by the message.
    """
    parts: list[str] = []
    cur: BaseException | None = e
    while cur is not None and len(parts) < 4:
        parts.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    text = " <- ".join(parts)
    if "FENCED" in text.upper():
        text += " (fenced by a newer instance)"
    elif any(p.startswith("SystemError") for p in parts) or "code=_FATAL" in parts[0]:
        # after a fatal error confluent-kafka may raise a SystemError without its cause (e.g.
        # "flush returned NULL without setting an exception"), or a bare _FATAL: the producer
        # is unusable, the transaction is not committed, and a re-run with a new producer is
        # exactly once
        text += f" ({PRODUCER_FATAL})"
    return StreamsError(f"The producer of output stage {spec.stage!r} failed: {text}")


class TaskOutput:
    """The records one Spark task writes to Kafka for one output stage (see the module).

    Parameters
    ----------
    spec : OutputSpec
        From :func:`output_spec`, built on the driver.
    coordinates : TaskCoordinates, optional
        The task; read from Spark's ``TaskContext`` by default.

    Notes
    -----
    Nothing connects until the first :meth:`produce`; a task without records opens no
    transaction and writes no marker (a replay of it is empty again). Call :meth:`close` at the
    end of the task; :meth:`abort` when the task fails.
    """

    def __init__(
        self,
        spec: OutputSpec,
        coordinates: TaskCoordinates | None = None,
        *,
        slot: str | None = None,
    ) -> None:
        self.spec = spec
        self._coords = coordinates
        self._slot = slot
        self._producer: Any = None
        self._consumer: Any = None
        self._open = False
        self._skip = False
        self._errors: list[tuple[str, bool]] = []
        self._tid = ""
        self.produced = 0
        #: records skipped by ``production.exception.handler=continue``
        self.rejected = 0

    # -- opening -------------------------------------------------------------------------

    @property
    def replayed(self) -> bool:
        """True when this task's batch was already committed (exactly-once): nothing is written."""
        self._ensure_open()
        return self._skip

    def _ensure_open(self) -> None:
        if self._open:
            return
        self._open = True
        _close_idle_clients_now_and_then()
        _live_outputs.add(self)
        coords = self._coords or TaskCoordinates.current()
        if self._slot is not None:
            coords = TaskCoordinates(coords.partition, coords.batch_id, coords.query_id, self._slot)
        self._coords = coords
        if self.spec.capture_dir is not None:
            from streamtable.runtime.captured_output import CaptureProducer

            self._producer = CaptureProducer(self.spec.capture_dir)
        elif self.spec.exactly_once:
            try:
                self._open_transaction(coords)
            except BaseException as e:
                _forget_frame_locals(e)
                raise
        else:
            self._producer = self._plain_producer()

    def _plain_producer(self) -> Any:
        from confluent_kafka import Producer

        conf = dict(self.spec.producer_config)
        conf.setdefault("enable.idempotence", True)
        key = tuple(sorted((k, str(v)) for k, v in conf.items()))
        producer = _plain_producers.get(key)
        if producer is None:
            producer = Producer(conf)
            _plain_producers[key] = producer
        _used("producer", key)
        return producer

    def _open_transaction(self, coords: TaskCoordinates) -> None:
        spec = self.spec
        if coords.batch_id is None or coords.query_id is None:
            raise StreamsError(
                f"Output stage {spec.stage!r} runs outside a streaming micro-batch, so it cannot "
                "write exactly once (processing.guarantee=exactly_once_v2)."
            )
        tid = transactional_id(spec.application_id, spec.stage, coords.name)
        self._tid = tid
        self._consumer = _marker_consumer(
            spec, marker_group(spec.application_id, spec.stage, coords.name)
        )
        # a producer this worker process kept from an earlier batch (Kafka Streams keeps one per
        # task); it is taken out of the cache while this task uses it
        producer = _txn_producers.pop(tid, None)
        if producer is None:
            producer = self._initialized_producer(tid)
        if self._already_committed(coords):
            _initialized_here.add(tid)  # kept for a later batch: probed before it writes
            _keep_transactional(tid, producer)
            self._skip = True
            return
        if not self._begin(producer, probe=tid in _initialized_here):
            # fenced: another producer with this id took over since; start afresh
            _discard_queued(producer)  # the probe's record
            producer = self._initialized_producer(tid)
            if self._already_committed(coords):
                _initialized_here.add(tid)
                _keep_transactional(tid, producer)
                self._skip = True
                return
            self._begin(producer, probe=False)
        _initialized_here.add(tid)
        self._producer = producer

    def _initialized_producer(self, tid: str) -> Any:
        """A new producer for ``tid``; ``init_transactions`` fences every earlier one."""
        producer = initialized_producer(
            _transactional_config(self.spec, tid), tid, self.spec.timeout_ms / 1000.0
        )
        _initialized_here.discard(tid)
        return producer

    def _already_committed(self, coords: TaskCoordinates) -> bool:
        """Whether the marker says this task's batch is committed (a replay: write nothing)."""
        from confluent_kafka import TopicPartition

        spec = self.spec
        timeout_s = spec.timeout_ms / 1000.0
        topic = marker_topic(spec.application_id)
        consumer = self._consumer
        committed = _with_retries(
            f"reading the exactly-once marker of {spec.stage!r} task {coords.name}",
            timeout_s,
            lambda: consumer.committed([TopicPartition(topic, 0)], timeout=timeout_s),
        )
        mark = committed[0] if committed else None
        if mark is not None and mark.error is not None:
            raise StreamsError(
                f"Reading the exactly-once marker of {spec.stage!r} task {coords.name} failed: "
                f"{mark.error}. Does the internal topic {topic!r} exist?"
            )
        done = (
            mark is not None
            and mark.offset >= 0
            and mark.metadata == coords.query_id
            and coords.batch_id is not None
            and mark.offset - 1 >= coords.batch_id
        )
        if done:
            log.info(
                "[%s] %s task %s batch %s already committed: not written again",
                spec.application_id,
                spec.stage,
                coords.name,
                coords.batch_id,
            )
        return done

    def _begin(self, producer: Any, *, probe: bool) -> bool:
        """Begin a transaction; with ``probe``, prove the producer still holds its epoch.

        A kept producer may have been fenced by a producer another worker process started
        for the same id. The probe — one record to the compacted marker topic, flushed — fails
        then, before any of the task's input is consumed. Returns False when fenced.
        """
        try:
            producer.begin_transaction()
            if not probe:
                return True
            errors: list[Any] = []
            producer.produce(
                marker_topic(self.spec.application_id),
                key=self._tid.encode(),
                value=b"",
                partition=0,
                on_delivery=lambda err, _msg: errors.append(err) if err else None,
            )
            left = producer.flush(self.spec.timeout_ms / 1000.0)
            if left or errors:
                raise StreamsError(f"probe failed: {errors[0] if errors else 'timeout'}")
            return True
        except Exception as e:
            log.info("[%s] producer %s fenced (%s)", self.spec.application_id, self._tid, str(e))
            return False

    # -- writing -------------------------------------------------------------------------

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            # the text as before: query_errors.is_transient reads it (a _TIMED_OUT name in it
            # would make a delivery timeout a transient error, re-running the batch)
            text = f"{msg.topic()}[{msg.partition()}]: {err.str()}"
            self._errors.append((text, _never_skipped(err)))

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        timestamp: int | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
    ) -> None:
        """Send one record (a no-op for a replayed batch under exactly-once).

        Parameters
        ----------
        topic : str
        key, value : bytes or None
            Serialized bytes; ``None`` is a null key or a tombstone.
        timestamp : int, optional
            Record timestamp in ms since the epoch (the producer's clock when omitted).
        headers : sequence of (str, bytes), optional
        partition : int, optional
            Explicit partition; else the producer's partitioner (murmur2 on the key, as Java's).

        Raises
        ------
        StreamsError
            When the client rejects the record and ``production.exception.handler`` is ``fail``.
        """
        self._ensure_open()
        if self._skip:
            return
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": self._delivered}
        if timestamp is not None:
            kwargs["timestamp"] = int(timestamp)
        if headers:
            kwargs["headers"] = list(headers)
        if partition is not None and partition >= 0:
            kwargs["partition"] = int(partition)
        self._send(topic, kwargs)

    def produce_many(
        self,
        topics: str | Sequence[str],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None] | None = None,
        partitions: Sequence[int | None] | None = None,
    ) -> None:
        """:meth:`produce` record ``i`` of the columns — ``keys[i]``, ``values[i]``, to
        ``topics`` (one name for all, or one per record), with ``timestamps[i]`` and
        ``partitions[i]`` when given — in order: the same records, errors and handlers, with
        the per-call checks done once.

        Raises
        ------
        ValueError
            If the columns differ in length.
        StreamsError
            As :meth:`produce`.
        """
        n = len(keys)
        columns = (values, timestamps, partitions, None if isinstance(topics, str) else topics)
        if any(c is not None and len(c) != n for c in columns):
            raise ValueError("produce_many(): the columns differ in length")
        self._ensure_open()
        if self._skip:
            return
        send = self._send
        delivered = self._delivered
        rows = zip(
            repeat(topics) if isinstance(topics, str) else topics,
            keys,
            values,
            repeat(None) if timestamps is None else timestamps,
            repeat(None) if partitions is None else partitions,
            strict=False,  # lengths checked above; repeat() is endless
        )
        for topic, key, value, t, p in rows:
            kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
            if t is not None:
                kwargs["timestamp"] = t
            if p is not None and p >= 0:
                kwargs["partition"] = p
            send(topic, kwargs)

    def _send(self, topic: str, kwargs: dict[str, Any]) -> None:
        """Hand one record to the producer, waiting while its queue is full."""
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                self._poll(0.05)
            except SystemError as e:  # confluent-kafka reports a fatal error this way
                raise self._fatal_with_cause(e) from e
            except Exception as e:
                # imported here, off the per-record path (an import statement per record cost
                # a tenth of a changelog writer's time)
                from confluent_kafka import KafkaException

                if not isinstance(e, KafkaException):
                    raise
                if _is_fatal(e):
                    raise self._fatal_with_cause(e) from e
                self._reject(topic, str(e), _never_skipped(e.args[0] if e.args else None))
                return
        self.produced += 1
        if self.produced % 10000 == 0:
            self._poll(0)

    def _poll(self, timeout_s: float) -> None:
        """Serve the producer's callbacks; what it raises there is a fatal error."""
        from confluent_kafka import KafkaException

        try:
            self._producer.poll(timeout_s)
        except (SystemError, KafkaException) as e:
            raise self._fatal_with_cause(e) from e

    def _fatal_with_cause(self, e: BaseException) -> StreamsError:
        """The error of a producer found in a fatal state by ``e``.

        ``produce`` of a producer that failed fatally in its background thread (fenced by a
        newer instance with the same ``transactional.id``, say) only says ``_FATAL``
        ("Local: Fatal error"); its next ``poll`` raises the error that made it fatal, which
        the message then names. A kept at-least-once producer is forgotten, so that the re-run
        creates a new one; a transactional one is out of the cache while its task runs, and
        the task's :meth:`abort` lets it go.
        """
        from confluent_kafka import KafkaException

        producer = self._producer
        for key, kept in list(_plain_producers.items()):
            if kept is producer:
                del _plain_producers[key]
        try:
            producer.poll(0)
        except (KafkaException, SystemError) as cause:
            if isinstance(e, KafkaException):
                cause.__context__ = None  # the named error stands for the bare _FATAL
            return _fatal(self.spec, cause)
        return _fatal(self.spec, e)

    def _reject(self, topic: str, error: str, never_skipped: bool = False) -> None:
        if self.spec.production_handler == "continue" and not never_skipped:
            self.rejected += 1
            log.warning(
                "[%s] skipping a record the producer rejected (%s: %s); "
                "production.exception.handler=continue",
                self.spec.application_id,
                topic,
                error,
            )
            return
        if never_skipped:
            raise StreamsError(
                f"Producing to topic {topic!r} failed: {error}. No production exception "
                "handler skips this error (an authorization, authentication or invalid-topic "
                "error, as in Kafka Streams): fix the cause (e.g. the ACLs), then start again."
            )
        raise StreamsError(
            f"Producing to topic {topic!r} failed: {error}. The default production exception "
            "handler stops the application; set 'production.exception.handler'='continue' to "
            "skip such records."
        )

    # -- finishing -----------------------------------------------------------------------

    def close(self) -> None:
        """Flush (at-least-once) or commit the task's transaction with its marker.

        Raises
        ------
        StreamsError
            When a record could not be delivered (and the handler says ``fail``, or under
            exactly-once, where a failed send aborts the whole transaction), or the commit fails;
            the transaction is aborted first, so nothing of this task becomes visible.
        """
        from confluent_kafka import KafkaException

        if not self._open or self._producer is None:
            return
        spec = self.spec
        timeout_s = spec.timeout_ms / 1000.0
        if not spec.exactly_once or spec.capture_dir is not None:
            try:
                remaining = self._producer.flush(timeout_s)
            except (SystemError, KafkaException) as e:
                raise self._fatal_with_cause(e) from e
            if remaining:
                raise StreamsError(
                    f"{remaining} records to Kafka were not delivered within {timeout_s:g} s."
                )
            self._take_errors(allow_continue=True)
            return
        if self._skip:
            self._producer = None
            return
        try:
            try:
                remaining = self._producer.flush(timeout_s)
            except (SystemError, KafkaException) as e:
                raise self._fatal_with_cause(e) from e
            if remaining:
                raise StreamsError(
                    f"{remaining} records to Kafka were not delivered within {timeout_s:g} s."
                )
            self._take_errors(allow_continue=False)
            self._commit_with_marker(timeout_s)
        except BaseException as e:
            self.abort()
            _forget_frame_locals(e)
            raise
        _keep_transactional(self._tid, self._producer)  # for the task's next batch
        self._producer = None

    def _commit_with_marker(self, timeout_s: float) -> None:
        from confluent_kafka import TopicPartition

        coords = self._coords
        assert coords is not None and coords.batch_id is not None
        marker = TopicPartition(
            marker_topic(self.spec.application_id), 0, coords.batch_id + 1, coords.query_id
        )
        group = self._consumer.consumer_group_metadata()

        producer = self._producer

        # each call is waited for its own timeout plus a margin, in a thread of its own (which
        # holds the producer, not this task output): a send_offsets that blocks past it (the
        # librdkafka bugs) is given up after that, and if it returns later, nothing in its
        # abandoned thread goes on to commit
        def send_offsets() -> None:
            producer.send_offsets_to_transaction([marker], group, timeout_s)

        def commit() -> None:
            producer.commit_transaction(timeout_s)

        try:
            _within(send_offsets, timeout_s + _STUCK_MARGIN_S)
            _within(commit, timeout_s + _STUCK_MARGIN_S)
        except _Stuck as e:
            # the call still blocks a thread: the producer is left to it, never used again.
            # The batch's re-run initializes a new producer for the same transactional id: a
            # commit that had reached the transaction coordinator completes first (the re-run
            # then finds the batch's marker and writes nothing), any other is aborted
            self._producer = None
            log.warning(
                "[%s] producer %s abandoned: %s", self.spec.application_id, self._tid, str(e)
            )
            raise StreamsError(
                f"Committing the transaction of output stage {self.spec.stage!r} task "
                f"{coords.name} batch {coords.batch_id} timed out (_TIMED_OUT): {e}. The batch "
                "is retried with a new producer, which aborts the transaction, or lets it "
                "complete if its commit had reached the coordinator (the retry then writes "
                "nothing): its records become visible to read_committed consumers once."
            ) from e
        except Exception as e:
            raise StreamsError(
                f"Committing the transaction of output stage {self.spec.stage!r} task "
                f"{coords.name} batch {coords.batch_id} failed: {e}. The batch is retried: "
                "nothing of this attempt becomes visible to read_committed consumers, unless "
                "its commit completed after all (then the retry finds the batch's marker and "
                "writes nothing)."
            ) from e
        finally:
            # the calls' frames live on in the error's traceback, and a frame keeps its
            # function, whose closure would keep a given-up producer alive (reconnecting):
            # the closures' cell lets go of it (a call still blocked holds its own reference)
            producer = None

    def _take_errors(self, *, allow_continue: bool) -> None:
        reported, self._errors = self._errors, []
        if not reported:
            return
        errors = [text for text, _ in reported]
        never = [text for text, never_skipped in reported if never_skipped]
        if allow_continue and self.spec.production_handler == "continue" and not never:
            self.rejected += len(errors)
            log.warning(
                "[%s] %d records rejected by the broker and skipped "
                "(production.exception.handler=continue); first: %s",
                self.spec.application_id,
                len(errors),
                errors[0],
            )
            return
        if never:
            hint = (
                " No production exception handler skips this error (an authorization, "
                "authentication or invalid-topic error, as in Kafka Streams): fix the cause "
                "(e.g. the ACLs), then start again."
            )
        elif self.spec.exactly_once:
            hint = (
                " Under exactly_once_v2 the task's transaction is aborted and nothing of it "
                "becomes visible."
            )
        else:
            hint = " Set 'production.exception.handler'='continue' to skip such records."
        raise StreamsError(
            f"{len(errors)} records could not be written by output stage {self.spec.stage!r}; "
            f"first: {(never or errors)[0]}.{hint}"
        )

    def abort(self) -> None:
        """Abort the open transaction (exactly-once; best effort), so nothing becomes visible."""
        producer, self._producer = self._producer, None
        if producer is None or not self.spec.exactly_once or self._skip:
            return
        if self.spec.capture_dir is not None:
            return
        try:
            producer.abort_transaction(self.spec.timeout_ms / 1000.0)
        except Exception as e:  # the next init_transactions with this id aborts it anyway
            log.warning("[%s] abort_transaction failed: %s", self.spec.application_id, str(e))
            _discard_queued(producer)
            self._errors = []  # the purged records' reports: nothing of this task is written
            # this frame may outlive the call (the error's traceback holds it): not the producer
            del producer
