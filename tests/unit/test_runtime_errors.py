"""Errors the runtime raises before any Spark work (no JVM needed)."""

import pytest

from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import BrokerUnreachableError, ConfigError, StreamsError, TopologyError
from streamtable.runtime.checkpoint import check_fingerprint
from streamtable.runtime.kafka_streams import State
from streamtable.runtime.state_lock import StateDirLock


def topology(window_name="counts"):
    b = StreamsBuilder()
    b.stream("in", key_serde=Serdes.string(), value_serde=Serdes.string()).group_by_key().count(
        name=window_name
    ).to_stream().to("out", value_serde=Serdes.long())
    return b.build()


def test_unknown_config_key_is_named_with_a_suggestion():
    with pytest.raises(
        ConfigError,
        match=r"Unknown config key 'bootstrap.server'\. Did you mean 'bootstrap.servers'",
    ):
        KafkaStreams(topology(), {"application.id": "a", "bootstrap.server": "localhost:9092"})


def test_ill_typed_config_value_is_named():
    with pytest.raises(ConfigError, match=r"commit.interval.ms"):
        KafkaStreams(
            topology(),
            {"application.id": "a", "bootstrap.servers": "x:1", "commit.interval.ms": "soon"},
        )


def test_exactly_once_is_accepted():
    app = KafkaStreams(
        topology(),
        {
            "application.id": "a",
            "bootstrap.servers": "x:1",
            "processing.guarantee": "exactly_once_v2",
        },
    )
    assert app.config.processing_guarantee == "exactly_once_v2"
    assert app._own_sink()  # transactional writes need streamtable's sink, not Spark's


def test_unreachable_broker_error_names_the_address_and_the_configured_timeout(tmp_path, capfd):
    app = KafkaStreams(
        topology(),
        {
            "application.id": "a",
            "bootstrap.servers": "127.0.0.1:1",
            "request.timeout.ms": 2000,
            "state.dir": str(tmp_path),
        },
    )
    # the admin request waits request.timeout.ms (2 s here), not the client's default
    with pytest.raises(
        BrokerUnreachableError,
        match=r"No Kafka broker answered at bootstrap.servers='127.0.0.1:1' within 2 s ",
    ):
        app.start()
    # the error says it all: librdkafka's "Connect to ... failed" lines stay off the console
    assert "rdkafka" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("key", "value"), [("consumer.session.timeout.ms", "soon"), ("producer.acks", "everything")]
)
def test_a_client_setting_librdkafka_refuses_stops_start_before_anything_is_held(
    tmp_path, key, value
):
    config = {
        "application.id": "a",
        "bootstrap.servers": "127.0.0.1:1",
        "state.dir": str(tmp_path),
        key: value,
    }
    app = KafkaStreams(topology(), config)
    kind = key.split(".")[0]
    with pytest.raises(
        ConfigError,
        match=rf"^Config '{key}' is refused by librdkafka, the Kafka client of streamtable's "
        rf"own {kind}s: Invalid value",
    ):
        app.start()
    assert app.state is State.CREATED
    # nothing was held: the state directory's lock is free
    StateDirLock(app.config.checkpoint_dir).acquire("a").release()


def test_incompatible_restart_names_the_change(tmp_path):
    check_fingerprint(tmp_path, topology("counts"), "app")
    check_fingerprint(tmp_path, topology("counts"), "app")  # same topology: fine
    with pytest.raises(
        TopologyError,
        match=r"not compatible with its checkpoint.*counts.*renamed|not compatible with its checkpoint.*'store': 'counts'.*'store': 'renamed'.*streamtable reset --application-id app",
    ):
        check_fingerprint(tmp_path, topology("renamed"), "app")


def test_a_python_process_that_did_not_connect_back_in_time_restarts_the_query():
    """Spark gives a Python process it starts 10 s to connect back; on an overloaded machine
    the query is restarted (another attempt) rather than failing the application, as a query
    of the cluster test did with both apps and the cluster's JVMs on 2 cores.
    """
    from streamtable.runtime.kafka_streams import is_transient

    failed = RuntimeError(
        "org.apache.spark.SparkException: Python worker failed to connect back.\n"
        "=== Streaming Query ===\nIdentifier: app-KSTREAM-SINK-0000000016"
    )
    assert is_transient(failed)
    assert not is_transient(RuntimeError("Python worker exited unexpectedly (crashed)"))


def test_a_transient_mark_inside_a_quoted_record_value_makes_no_error_transient():
    """A Spark SQL error quoting a record's value that reads like a Kafka error name fails the
    application at once; it used to be retried as transient for ``task.timeout.ms``. The marks
    outside quotes (a Kafka error's code next to its quoted text) still count.
    """
    from streamtable.runtime.query_errors import is_transient

    cast = (
        "org.apache.spark.SparkNumberFormatException: [CAST_INVALID_INPUT] The value "
        '\'NOT_LEADER_OR_FOLLOWER\' of the type "STRING" cannot be cast to "INT" because it '
        "is malformed.\n=== Streaming Query ===\nIdentifier: app-sink"
    )
    assert not is_transient(RuntimeError(cast))
    assert not is_transient(RuntimeError("ValueError: cannot decode b'_TRANSPORT' in 't'"))
    assert is_transient(
        RuntimeError(
            "streamtable.errors.StreamsError: Producing to topic 'orders' doesn't go on: "
            'KafkaError{code=_TRANSPORT,val=-195,str="Local: Broker transport failure"}'
        )
    )


def test_producer_fatal_errors_re_run_the_batch_fenced_or_not():
    """A fenced producer, and one confluent-kafka reports only as a bare SystemError after a
    fatal error, both make the query restart from its checkpoint (exactly once: the batch's
    transaction was not committed); other producer errors do not.
    """
    from confluent_kafka import KafkaError, KafkaException

    from streamtable.config import StreamsConfig
    from streamtable.runtime.kafka_streams import is_transient
    from streamtable.runtime.task_output import _fatal, output_spec

    spec = output_spec(
        StreamsConfig.from_mapping({"application.id": "a", "bootstrap.servers": "x:1"}), "q.sink"
    )
    try:
        try:
            raise RuntimeError('KafkaError{FATAL,code=_FENCED,val=-144,str="fenced"}')
        except RuntimeError as cause:
            raise SystemError(
                "<function _delivered> returned a result with an exception set"
            ) from cause
    except SystemError as e:
        fenced = _fatal(spec, e)
    bare = _fatal(spec, SystemError("<method 'flush'> returned NULL without setting an exception"))
    # what produce() raises once the producer failed fatally in its background thread
    unnamed = _fatal(
        spec,
        KafkaException(
            KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error")
        ),
    )
    other = _fatal(spec, RuntimeError("Broker: Message size too large"))
    assert "fenced by a newer instance" in str(fenced) and is_transient(fenced)
    assert "producer in a fatal state" in str(bare) and is_transient(bare)
    assert "'q.sink'" in str(bare)
    assert "producer in a fatal state" in str(unnamed) and is_transient(unnamed)
    assert not is_transient(other)


def test_a_commit_stuck_past_its_timeout_re_runs_the_batch_with_a_new_producer(monkeypatch):
    """librdkafka's send_offsets_to_transaction can block for ever after the group
    coordinator's broker died (librdkafka #5456/#5511): the task gives the producer up and
    fails with a transient error, so the query re-runs the batch (a new producer for the same
    transactional id fences the stuck one: its transaction is aborted)."""
    import dataclasses
    import threading

    from streamtable.config import StreamsConfig
    from streamtable.errors import StreamsError
    from streamtable.runtime import task_output
    from streamtable.runtime.kafka_streams import is_transient

    spec = task_output.output_spec(
        StreamsConfig.from_mapping(
            {
                "application.id": "a",
                "bootstrap.servers": "x:1",
                "processing.guarantee": "exactly_once_v2",
            }
        ),
        "q.sink",
    )
    spec = dataclasses.replace(spec, timeout_ms=300)
    monkeypatch.setattr(task_output, "_STUCK_MARGIN_S", 0.1)
    release = threading.Event()
    calls: list[str] = []

    class StuckProducer:
        def flush(self, timeout):
            return 0

        def send_offsets_to_transaction(self, offsets, group, timeout):
            calls.append("send_offsets")
            release.wait(30)  # blocks past its timeout, as librdkafka does

        def commit_transaction(self, timeout):
            calls.append("commit")

        def abort_transaction(self, timeout):
            calls.append("abort")

    class MarkerConsumer:
        def consumer_group_metadata(self):
            return object()

    out = task_output.TaskOutput(spec, task_output.TaskCoordinates(3, 7, "query-1"))
    out._open, out._tid = True, "a-q.sink-3"
    out._producer, out._consumer = StuckProducer(), MarkerConsumer()
    try:
        with pytest.raises(StreamsError) as stuck:
            out.close()
        assert calls == ["send_offsets"]  # neither committed nor aborted from a second thread
    finally:
        release.set()
    # the abandoned call returns: its thread ends without going on to commit
    for thread in threading.enumerate():
        if thread.name == "streamtable-txn-commit":
            thread.join(10)
    assert calls == ["send_offsets"]
    assert "task 3 batch 7 timed out (_TIMED_OUT)" in str(stuck.value)
    # given up after the call's own timeout plus the margin, not the pair's two timeouts
    assert "no answer within 0.4 s" in str(stuck.value), stuck.value
    assert is_transient(stuck.value)
    assert "a-q.sink-3" not in task_output._txn_producers  # never used again


def test_a_failure_surfaces_only_after_the_uncaught_exception_handler_has_returned():
    import threading

    from streamtable.errors import StreamsError

    app = KafkaStreams(topology(), {"application.id": "a", "bootstrap.servers": "x:1"})
    entered, release, order = threading.Event(), threading.Event(), []

    def handler(exc):
        entered.set()
        release.wait(30)
        order.append(("handler returned", str(exc)))

    app.set_uncaught_exception_handler(handler)
    failing = threading.Thread(target=app._fail, args=(RuntimeError("boom"),))
    failing.start()
    assert entered.wait(30)

    def report():
        try:
            app._raise_if_failed()
        except StreamsError as e:
            order.append(("raised", str(e)))

    reporter = threading.Thread(target=report)
    reporter.start()
    reporter.join(0.5)  # it must not raise while the handler runs
    assert reporter.is_alive() and order == []
    release.set()
    failing.join(30)
    reporter.join(30)
    assert [step for step, _ in order] == ["handler returned", "raised"]
    assert "boom" in order[1][1]


@pytest.mark.parametrize(
    ("cause", "transient"),
    [("_FENCED", True), ("CLUSTER_AUTHORIZATION_FAILED", False)],
)
def test_a_producer_found_fatal_by_produce_is_named_by_its_cause_and_forgotten(
    monkeypatch, cause, transient
):
    """``produce`` of a producer that failed fatally raises only ``_FATAL``; the error names
    what the next ``poll`` raises. Fenced, the batch is re-run; another fatal error stops the
    application. Either way the kept producer is forgotten, so a re-run starts a new one.
    """
    from confluent_kafka import KafkaError, KafkaException

    from streamtable.config import StreamsConfig
    from streamtable.errors import StreamsError
    from streamtable.runtime import task_output
    from streamtable.runtime.query_errors import is_transient

    spec = task_output.output_spec(
        StreamsConfig.from_mapping({"application.id": "a", "bootstrap.servers": "x:1"}), "q.sink"
    )
    code = getattr(KafkaError, cause)

    class FatalProducer:
        def produce(self, topic, **kwargs):
            raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message"))

        def poll(self, timeout):
            raise KafkaException(KafkaError(code, f"the {cause} that made it fatal", fatal=True))

    producer = FatalProducer()
    monkeypatch.setitem(task_output._plain_producers, (("kept", "1"),), producer)
    monkeypatch.setattr(task_output.TaskOutput, "_plain_producer", lambda self: producer)
    out = task_output.TaskOutput(spec, task_output.TaskCoordinates(0, 1, "q"))
    with pytest.raises(StreamsError) as failed:
        out.produce("t", b"k", b"v")
    assert f"the {cause} that made it fatal" in str(failed.value)
    assert "'q.sink'" in str(failed.value)
    assert is_transient(failed.value) is transient
    assert producer not in task_output._plain_producers.values()


def test_a_task_output_that_cannot_open_its_transaction_lets_its_producer_go():
    # no broker answers: init_transactions times out. The error outlives the task (Spark
    # reports it); the producer made for it must not stay reachable from its frames, where it
    # would go on reconnecting for as long as the process runs.
    from _support import kafka_client_threads, producers_held_by, wait_until
    from streamtable.errors import StreamsError
    from streamtable.runtime.task_output import (
        OutputSpec,
        TaskCoordinates,
        TaskOutput,
        close_cached_clients,
    )

    before = kafka_client_threads()

    spec = OutputSpec(
        "no-broker",
        "q.sink",
        {"bootstrap.servers": "127.0.0.1:1", "log_level": 0},
        guarantee="exactly_once_v2",
        timeout_ms=500,
    )
    output = TaskOutput(spec, TaskCoordinates(0, 0, "q"))
    try:
        with pytest.raises(StreamsError, match="init_transactions of .* failed") as failed:
            output.produce("out", b"k", b"v")
        assert producers_held_by(failed.value) == []
        # nor from the retried call's frame (a lambda's frame keeps the lambda and its
        # closure): only the task's marker consumer, cached for its next batch, is left
        wait_until(
            lambda: len(kafka_client_threads() - before) <= 1,
            30,
            lambda: f"{len(kafka_client_threads() - before)} of its Kafka clients alive",
        )
    finally:
        close_cached_clients()  # the task's marker consumer, kept for its next batch


def test_a_failing_bookkeeping_step_is_logged_and_the_monitor_still_detects_a_failed_query(
    caplog,
):
    """The monitor thread's bookkeeping (progress ledger, group offsets, replica reports) can
    raise on a report it does not expect; it logs that once and goes on with its other steps,
    so a query that fails afterwards still fails the application (the thread used to end,
    silently).
    """
    import logging
    import threading

    app = KafkaStreams(topology(), {"application.id": "a", "bootstrap.servers": "x:1"})

    class BadLedger:
        def update(self, queries):
            raise KeyError("sources")

    failed = threading.Event()

    class Query:
        ticks = 0

        def exception(self):
            Query.ticks += 1
            return RuntimeError("query died") if Query.ticks >= 3 else None

        def stop(self):
            pass

    class GroupOffsets:
        updates = 0

        def update(self, queries):
            GroupOffsets.updates += 1

        def close(self):
            pass

    app._ledger = BadLedger()
    app._group_offsets = GroupOffsets()  # a later step: still run at every tick
    app._queries = [Query()]
    app.set_uncaught_exception_handler(lambda exc: failed.set())
    app._state = State.RUNNING
    with caplog.at_level(logging.WARNING, logger="streamtable"):
        monitor = threading.Thread(target=app._watch)
        monitor.start()
        assert failed.wait(30)
        monitor.join(30)
    assert not monitor.is_alive()
    assert app.state is State.ERROR and "query died" in str(app._error)
    assert GroupOffsets.updates >= 2
    warnings = [r.getMessage() for r in caplog.records if "bookkeeping" in r.getMessage()]
    assert warnings == [
        "[a] the monitor's bookkeeping failed, retrying at the next tick: KeyError: 'sources'"
    ]


def test_a_producer_kept_after_a_replayed_batch_is_probed_before_it_writes_the_next(
    monkeypatch,
):
    """A replayed batch (its marker says committed) keeps the producer it initialized for the
    task's next batch; by then another worker may have taken the id over, so the next batch
    probes it first, as it does every producer kept from an earlier batch.
    """
    from confluent_kafka import TopicPartition

    from streamtable.runtime import task_output

    markers: dict = {"app-eos-q.sink-0": (6, "qid")}  # batch 5 committed: a replay

    class MarkerConsumer:
        def __init__(self, group):
            self.group = group

        def committed(self, partitions, timeout=None):
            offset, metadata = markers.get(self.group, (-1001, None))
            return [TopicPartition(partitions[0].topic, 0, offset, metadata)]

        def consumer_group_metadata(self):
            return self.group

    class Producer:
        def begin_transaction(self):
            pass

        def produce(self, topic, **kw):
            pass

        def flush(self, *args):
            return 0

        def poll(self, *args):
            return 0

        def send_offsets_to_transaction(self, offsets, group, timeout):
            pass

        def commit_transaction(self, timeout):
            pass

        def abort_transaction(self, timeout):
            pass

        def __len__(self):
            return 0

    probes: list = []
    begin = task_output.TaskOutput._begin
    monkeypatch.setattr(task_output, "_marker_consumer", lambda spec, group: MarkerConsumer(group))
    monkeypatch.setattr(task_output, "initialized_producer", lambda conf, tid, timeout: Producer())
    monkeypatch.setattr(
        task_output.TaskOutput,
        "_begin",
        lambda self, producer, probe: probes.append(probe) or begin(self, producer, probe=probe),
    )
    monkeypatch.setattr(task_output, "_txn_producers", {})
    monkeypatch.setattr(task_output, "_initialized_here", set())
    spec = task_output.OutputSpec("app", "q.sink", guarantee="exactly_once_v2")
    replay = task_output.TaskOutput(spec, task_output.TaskCoordinates(0, 5, "qid"))
    assert replay.replayed and probes == []
    replay.close()
    out = task_output.TaskOutput(spec, task_output.TaskCoordinates(0, 6, "qid"))
    out.produce("out", b"k", b"v")
    out.close()
    assert probes == [True]


@pytest.mark.parametrize("when", ["produce", "delivery"])
@pytest.mark.parametrize(
    ("code", "skipped"),
    [("MSG_SIZE_TOO_LARGE", True), ("TOPIC_AUTHORIZATION_FAILED", False), ("UNKNOWN", False)],
)
def test_continue_skips_a_rejected_record_but_never_an_authorization_error(
    monkeypatch, when, code, skipped
):
    # RecordCollectorImpl.recordSendError: authorization/authentication, invalid-topic and
    # unknown-server errors never reach the production exception handler (isFatalException);
    # a record too large goes to it, and CONTINUE drops it
    from confluent_kafka import KafkaError, KafkaException

    from streamtable.runtime import task_output

    error = KafkaError(getattr(KafkaError, code))

    class Message:
        def topic(self):
            return "out"

        def partition(self):
            return 0

    class Producer:
        def __init__(self):
            self.report = lambda: None

        def produce(self, topic, key, value, on_delivery, **kwargs):
            if when == "produce":
                raise KafkaException(error)
            self.report = lambda: on_delivery(error, Message())

        def poll(self, timeout):
            return 0

        def flush(self, timeout):
            self.report()
            return 0

    monkeypatch.setattr(task_output.TaskOutput, "_plain_producer", lambda self: Producer())
    spec = task_output.OutputSpec("app", "q.sink", production_handler="continue")
    out = task_output.TaskOutput(spec, task_output.TaskCoordinates(0, 0, "q"))
    if skipped:
        out.produce("out", b"k", b"v")
        out.close()
        assert out.rejected == 1
        return
    with pytest.raises(
        StreamsError, match=r"No production exception handler skips this error \(an authorization"
    ) as failed:
        out.produce("out", b"k", b"v")
        out.close()
    assert KafkaError(getattr(KafkaError, code)).str() in str(failed.value)


def test_a_delivery_timeout_is_not_a_transient_error_of_the_query():
    # the delivery error's text feeds query_errors.is_transient: a record that timed out under
    # production.exception.handler=fail stops the app, it does not re-run the batch
    from confluent_kafka import KafkaError

    from streamtable.runtime import task_output
    from streamtable.runtime.query_errors import is_transient

    out = task_output.TaskOutput(
        task_output.OutputSpec("app", "q.sink"), task_output.TaskCoordinates(0, 0, "q")
    )

    class Message:
        def topic(self):
            return "out"

        def partition(self):
            return 0

    out._delivered(KafkaError(KafkaError._MSG_TIMED_OUT), Message())
    with pytest.raises(StreamsError) as failed:
        out._take_errors(allow_continue=True)
    assert not is_transient(str(failed.value))


def test_close_after_a_failure_keeps_the_error_state():
    # KafkaStreams.State.ERROR is terminal: close() releases the resources and leaves it, so
    # that whatever watches the state (a supervisor, `streamtable run`) still sees the failure
    app = KafkaStreams(topology(), {"application.id": "a", "bootstrap.servers": "x:1"})
    app._fail(RuntimeError("boom"))
    assert app.state.value == "ERROR"
    assert app.close() is True
    assert app.state.value == "ERROR"
    assert app.close() is True  # again: nothing left to do


class _SlowQuery:
    """Stands in for a Spark StreamingQuery whose stop() returns after ``stop_s``."""

    def __init__(self, stop_s: float) -> None:
        import threading

        self.stop_s, self._stopped = stop_s, threading.Event()
        self.isActive, self.status, self.name = True, {"isTriggerActive": False}, "q"

    def stop(self):
        self._stopped.wait(self.stop_s)  # a batch slow to react to the interrupt
        self.isActive = False

    def awaitTermination(self, timeout):
        return not self.isActive


@pytest.mark.parametrize(("stop_s", "within"), [(0.0, True), (1.0, False)])
def test_close_says_whether_the_queries_stopped_within_the_timeout(stop_s, within):
    # KafkaStreams.close(Duration) returns false when the client did not stop in time
    from datetime import timedelta

    from streamtable.runtime.kafka_streams import State

    app = KafkaStreams(topology(), {"application.id": "a", "bootstrap.servers": "x:1"})
    app._state = State.RUNNING
    app._queries = [_SlowQuery(stop_s)]
    assert app.close(timeout=timedelta(milliseconds=200)) is within
    assert app.state.value == "NOT_RUNNING"
