"""``TopologyTestDriver``: run a topology's compiled Spark plan on in-memory topics (no broker).

The mechanism (see ``docs/testing.md``):

- Input topics are record logs in a temporary folder (:mod:`.driver_topics`), read by a
  streaming Python data source that the compiler takes instead of Spark's Kafka source
  (:attr:`CompileContext.source_factory`). Everything downstream of the source is the plan
  :func:`~streamtable.compiler.plan.compile_topology` builds for production.
- Every query's sink is a ``foreachBatch`` that collects the rows the Kafka sink would write
  (``topic, key, value, ts``) into in-memory output topics, in processing order. Outputs that
  production writes from Python tasks (late records, dead letters) go to a capture folder
  instead of Kafka (:attr:`OutputSpec.capture_dir`) and are read back after each record.
- ``pipe_input`` appends one record and then runs every query until it has processed everything
  available (``StreamingQuery.processAllAvailable``). One record per micro-batch gives Kafka's
  per-record semantics: no coalescing of updates across piped records.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from streamtable._millis import duration_ms
from streamtable.compiler.lower.sink import ORDER_COLUMNS
from streamtable.compiler.paged.processor_api import encode_tick
from streamtable.config import StreamsConfig
from streamtable.errors import StreamsError, TopologyError
from streamtable.runtime.captured_output import read_captured
from streamtable.runtime.file_sink import file_sink_writer
from streamtable.runtime.progress import executed
from streamtable.serde import Serde
from streamtable.testing import driver_stores
from streamtable.testing.driver_topics import (
    FORMAT,
    DriverTopicSource,
    TestInputTopic,
    TestOutputTopic,
    TestRecord,
    append_records,
    to_millis,
)
from streamtable.topology.topology import Topology

__all__ = ["TopologyTestDriver", "TestInputTopic", "TestOutputTopic", "TestRecord"]

_POLLING_DELAY = "spark.sql.streaming.pollingDelay"

#: The driver's in-memory topic carrying its mocked wall clock to Processor API operators.
WALL_CLOCK_TOPIC = "__streamtable-wall-clock"

# -- the driver -----------------------------------------------------------------------------

_registered: set[int] = set()
_lock = threading.Lock()


_CAUSE = re.compile(r"^streamtable\.errors\.\w+: (.*)$", re.MULTILINE)


def _cause(e: BaseException) -> str:
    """The streamtable message inside a failed query's Java and Python traces, if any."""
    found = _CAUSE.findall(str(e))
    return found[-1] if found else str(e)


class _Capture:
    """``foreachBatch`` function of one query: appends the sink rows to the output queues,
    or, for a repartition topic between sub-topologies, to that in-memory topic (read by the
    queries downstream, as Kafka's driver keeps repartition topics in memory).
    """

    def __init__(self, outputs: dict[str, deque], root: str, internal: frozenset[str]) -> None:
        self.outputs = outputs
        self.root = root
        self.internal = internal

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("topic", "key", "value", "ts", *ORDER_COLUMNS).collect()
        # processing order within the micro-batch (Spark returns the rows of a shuffled
        # stage in partition and key order); the sort is stable for rows without coordinates
        rows.sort(key=lambda r: tuple(-1 if r[c] is None else r[c] for c in ORDER_COLUMNS))
        internal: dict[str, list[tuple[bytes | None, bytes | None, int]]] = {}
        for row in rows:
            record = (row["key"], row["value"], row["ts"])
            if row["topic"] in self.internal:
                internal.setdefault(row["topic"], []).append(record)
            else:
                self.outputs[row["topic"]].append((*record, ()))
        for topic, records in internal.items():
            append_records(self.root, topic, records)


class TopologyTestDriver:
    """Runs ``topology`` through its compiled Spark plan on in-memory topics.

    Parameters
    ----------
    topology : Topology
    config : Mapping, optional
        As for :class:`~streamtable.KafkaStreams`; ``application.id`` and ``bootstrap.servers``
        default to dummies (no broker is contacted), ``state.dir`` to a temporary folder deleted
        on :meth:`close`, ``streamtable.shuffle.partitions`` to 1.
    initial_wall_clock_time : int or datetime, optional
        The driver's wall-clock time in ms (default: now).
    """

    __test__ = False

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, object] | None = None,
        initial_wall_clock_time: int | datetime | None = None,
    ) -> None:
        self._tmp = tempfile.mkdtemp(prefix="streamtable-ttd-")
        settings: dict[str, object] = {
            "application.id": f"topology-test-driver-{uuid.uuid4().hex[:8]}",
            "bootstrap.servers": "dummy:1234",
            "state.dir": os.path.join(self._tmp, "state"),
            "streamtable.shuffle.partitions": 1,
        }
        settings.update(config or {})
        self.config = StreamsConfig.from_mapping(settings)
        self.topology = topology
        self.wall_clock_ms = to_millis(initial_wall_clock_time, int(time.time() * 1000))
        self._root = os.path.join(self._tmp, "topics")
        outputs = list(topology.sink_topics)
        if self.config.dead_letter_queue_topic:
            outputs.append(self.config.dead_letter_queue_topic)
        self._outputs: dict[str, deque] = {t: deque() for t in outputs}
        self._capture_dir = os.path.join(self._tmp, "captured")
        self._captured: set[str] = set()
        self._queries: list[Any] = []
        self._plans: list[Any] = []
        self._stores: dict[str, Any] = {}
        self._store_cache = driver_stores.StoreCache()
        self._closed = False
        #: the error of a failed query: the driver refuses further input after it
        self._failure: str | None = None
        self._clock_readers = 0
        self._started = False
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        self._started = True

    # -- lifecycle -----------------------------------------------------------------------

    def _start(self) -> None:
        from streamtable.compiler.frame import CompileContext
        from streamtable.compiler.plan import compile_topology
        from streamtable.runtime.spark import get_spark

        cfg = self.config
        spark = get_spark(
            cfg.spark_conf,
            log_to=cfg.spark_log_target,
            class_data_sharing=cfg.class_data_sharing,
        )
        with _lock:
            if id(spark) not in _registered:
                spark.dataSource.register(DriverTopicSource)
                _registered.add(id(spark))
        self._spark = spark
        spark.conf.set("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        partitions = {t: 1 for t in (*self.topology.source_topics, *self.topology.sink_topics)}
        ctx = CompileContext(
            spark,
            cfg,
            self.topology.graph,
            topic_partitions=partitions,
            source_factory=self._source,
            order_columns=True,
            capture_dir=self._capture_dir,
            wall_clock_source=self._wall_clock_source,
        )
        self._plans = compile_topology(self.topology, ctx)
        self._internal_topics = frozenset(ctx.internal_topics)
        self._stores = dict(ctx.stores)
        # an idle query polls its sources every pollingDelay (10 ms by default, a round trip
        # to the Python data source each time): poll less often while the test is idle
        previous = spark.conf.get(_POLLING_DELAY, None)
        spark.conf.set(_POLLING_DELAY, "50ms")
        try:
            for plan in self._plans:
                self._queries.append(self._start_query(plan))
        finally:
            if previous is None:
                spark.conf.unset(_POLLING_DELAY)
            else:
                spark.conf.set(_POLLING_DELAY, previous)
        if self._clock_readers:
            # processors are initialized now, at the initial wall-clock time (Kafka's driver
            # initializes its tasks in the constructor)
            self._tick()

    def _wall_clock_source(self) -> Any:
        """The streaming DataFrame of the mocked wall clock's ticks (Processor API operators)."""
        self._clock_readers += 1
        append_records(self._root, WALL_CLOCK_TOPIC, [])
        return self._read_topics((WALL_CLOCK_TOPIC,))

    def _tick(self) -> None:
        """Tell the processors the wall clock's time and run the queries."""
        append_records(self._root, WALL_CLOCK_TOPIC, [(None, encode_tick(self.wall_clock_ms), 0)])
        self._run()

    def _source(self, node: Any) -> Any:
        for t in node.topics:
            append_records(self._root, t, [])  # the topic exists (end = 0)
        return self._read_topics(node.topics)

    def _read_topics(self, topics: tuple[str, ...]) -> Any:
        from pyspark.sql import functions as F

        df = (
            self._spark.readStream.format(FORMAT)
            .option("path", self._root)
            .option("topics", ",".join(topics))
            .load()
        )
        return df.select(
            "key",
            "value",
            F.timestamp_millis("ts").alias("timestamp"),
            "partition",
            "offset",
            "topic",
        )

    def _start_query(self, plan: Any) -> Any:
        cfg = self.config
        writer = (
            plan.df.writeStream.queryName(
                f"{cfg.application_id}-{plan.name}-{uuid.uuid4().hex[:4]}"
            )
            .outputMode(plan.output_mode)
            .option("checkpointLocation", str(Path(cfg.checkpoint_dir) / plan.name))
        )
        if plan.sink == "kafka":
            writer = writer.foreachBatch(_Capture(self._outputs, self._root, self._internal_topics))
        elif plan.sink == "files":  # the driver writes the files for real
            writer = file_sink_writer(writer, plan.file_sink)
        else:
            writer = writer.format("noop")
        from streamtable.runtime.spark import query_start_conf

        encoding = {"spark.sql.streaming.stateStore.encodingFormat": plan.state_encoding}
        with query_start_conf(self._spark, encoding):
            return writer.start()

    def close(self) -> None:
        """Stop the queries and delete the driver's topics and state: also the application's
        folder under a ``state.dir`` given in the config (``state.dir/application.id``), as
        Kafka's driver cleans its state directory, so that a new driver with the same config
        starts afresh.
        """
        if self._closed:
            return
        self._closed = True
        for q in self._queries:
            try:
                q.stop()
            except Exception:  # pragma: no cover - best effort
                pass
        if self._started:  # a driver that failed to start used no folder of the config's
            self._clean_state()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _clean_state(self) -> None:
        """Delete ``state.dir/application.id``, unless a running application holds its lock
        (then say so and leave it).
        """
        from streamtable.runtime.state_lock import StateDirLock

        folder = Path(self.config.checkpoint_dir)
        if not folder.exists():
            return
        if StateDirLock(folder).is_locked():
            warnings.warn(
                f"TopologyTestDriver.close() left {str(folder)!r}: a running application "
                "holds its lock. Give the driver a state.dir or application.id of its own.",
                stacklevel=3,
            )
            return
        shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics --------------------------------------------------------------------------

    def create_input_topic(
        self,
        name: str,
        key_serde: Serde,
        value_serde: Serde,
        start_timestamp: int | datetime | None = None,
        auto_advance: timedelta = timedelta(0),
    ) -> TestInputTopic:
        """A :class:`TestInputTopic` for source topic ``name``.

        Raises
        ------
        TopologyError
            If the topology does not read ``name`` (the message lists the topics it reads).
        """
        if name not in self.topology.source_topics:
            raise TopologyError(
                f"The topology does not read topic {name!r}; its input topics are "
                f"{sorted(self.topology.source_topics)} (Kafka Streams' TopologyTestDriver "
                "refuses to pipe into it too: 'Unknown topic')."
            )
        start = None if start_timestamp is None else to_millis(start_timestamp, 0)
        return TestInputTopic(self, name, key_serde, value_serde, start, auto_advance)

    def create_output_topic(
        self, name: str, key_serde: Serde, value_serde: Serde
    ) -> TestOutputTopic:
        """A :class:`TestOutputTopic` for sink topic ``name``.

        Raises
        ------
        TopologyError
            If the topology does not write ``name`` (the message lists the topics it writes).
        """
        if name not in self._outputs:
            raise TopologyError(
                f"The topology does not write topic {name!r}; its output topics are "
                f"{sorted(self._outputs)} (reading it from Kafka Streams' TopologyTestDriver "
                "fails too: 'Uninitialized topic')."
            )
        return TestOutputTopic(self, name, key_serde, value_serde)

    # -- processing ----------------------------------------------------------------------

    def _pipe(self, topic: str, records: list[tuple[bytes | None, bytes | None, int]]) -> None:
        self._check_open()
        self._check_not_failed()
        append_records(self._root, topic, records)
        self._run()

    def _check_open(self) -> None:
        """Refuse work after :meth:`close` (its topics and state are deleted)."""
        if self._closed:
            raise StreamsError("The TopologyTestDriver is closed.")

    def _check_not_failed(self) -> None:
        """Refuse work after a failure: the failed Spark query stays stopped, so later input
        would not be processed (Kafka's driver goes on with the next record).
        """
        if self._failure is not None:
            raise StreamsError(
                f"The TopologyTestDriver stopped at an earlier failure ({self._failure}); "
                "unlike Kafka's driver it cannot go on with the next record, as the failed "
                "Spark query stays stopped. Create a new TopologyTestDriver for the records "
                "after it."
            )

    def _run(self) -> None:
        """Run every query until it has processed all piped input, then read captured outputs.

        Records written to a topic the topology also reads go back into it and are processed
        too, until none is left, as Kafka's driver re-enqueues output to a source topic
        (``captureOutputsAndReEnqueueInternalResults``); they stay readable as output.
        """
        sources = set(self.topology.source_topics)
        while True:
            written = {t: len(q) for t, q in self._outputs.items() if t in sources}
            for q in self._queries:
                try:
                    q.processAllAvailable()
                except Exception as e:
                    self._failure = f"{_cause(e)} (query {q.name!r} failed)"
                    raise StreamsError(self._failure) from e
            for topic, key, value, ts, headers in read_captured(self._capture_dir, self._captured):
                self._outputs.setdefault(topic, deque()).append((key, value, ts, tuple(headers)))
            fed_back = {
                t: list(q)[written.get(t, 0) :]
                for t, q in self._outputs.items()
                if t in sources and len(q) > written.get(t, 0)
            }
            if not fed_back:
                return
            for topic, records in fed_back.items():
                append_records(self._root, topic, [r[:3] for r in records])

    def advance_wall_clock_time(self, advance: timedelta) -> None:
        """Advance the driver's mocked wall-clock time (Kafka's ``advanceWallClockTime``).

        Fires the processors' due wall-clock punctuations (``KStream.process``), as Kafka's
        driver does; ``context.current_system_time_ms()`` returns this clock. It does not
        change the timestamps of records piped without one (an input topic stamps them from
        the clock at its creation, as Kafka's ``TestInputTopic``), nor move stream time:
        windows close and ``Suppressed`` buffers (``until_window_closes`` and
        ``until_time_limit``) emit only when a piped record's timestamp moves stream time, as
        in Kafka Streams, whose suppression is driven by stream time alone.

        Parameters
        ----------
        advance : timedelta
            How far to move the clock; must not be negative.

        Raises
        ------
        ValueError
            If ``advance`` is negative.
        StreamsError
            If the driver is closed.
        """
        if advance < timedelta(0):
            raise ValueError(
                f"advance_wall_clock_time needs a non-negative timedelta; got {advance}."
            )
        self._check_open()
        self._check_not_failed()
        self.wall_clock_ms += duration_ms(advance)
        if self._clock_readers:
            self._tick()

    # -- state stores ----------------------------------------------------------------------

    def get_key_value_store(self, name: str) -> Any:
        """A read-only view of key-value store ``name`` as of the last piped record.

        Reads the state the last micro-batch committed, from the query's checkpoint (Spark's
        ``statestore`` data source); see :mod:`.driver_stores`.

        Raises
        ------
        TopologyError
            If the topology has no store ``name`` (the message lists its stores), or it is
            not a key-value store.
        """
        return driver_stores.open_store(self, name, "key_value")

    def get_window_store(self, name: str) -> Any:
        """A read-only view of window store ``name`` (``fetch(key, from, to)``, ``all()``).

        Raises
        ------
        TopologyError
            If the topology has no store ``name`` (the message lists its stores), or it is
            not a window store.
        """
        return driver_stores.open_store(self, name, "window")

    def get_session_store(self, name: str) -> Any:
        """A read-only view of session store ``name`` (``fetch(key)``, ``all()``).

        Raises
        ------
        TopologyError
            If the topology has no store ``name`` (the message lists its stores), or it is
            not a session store.
        """
        return driver_stores.open_store(self, name, "session")

    def batches_run(self) -> list[int]:
        """Number of micro-batches each query ran (for tests of the per-record semantics).

        An idle progress report (no new data for ``noDataProgressEventInterval``) carries
        the next batch's id (see :func:`streamtable.runtime.progress.executed`): that batch
        has not run.
        """
        counts = []
        for q in self._queries:
            last = q.lastProgress
            if last is None:
                counts.append(0)
            else:
                counts.append(int(last.batchId) + (1 if executed(last) else 0))
        return counts
