"""``TopologyTestDriver``: run a topology's compiled Spark plan on in-memory topics (no broker).

PROTOTYPE (issue 6). The mechanism:

- Input topics are append-only record logs in a temporary folder (one file per record plus an
  ``end`` counter per topic). A streaming Python data source (:class:`DriverTopicSource`,
  format ``streamtable-driver``) reads them with the Kafka source's columns (``key, value,
  timestamp, partition, offset, topic``); the compiler takes it instead of Spark's Kafka source
  through :attr:`CompileContext.source_factory`. Everything downstream of the source is the plan
  :func:`~streamtable.compiler.plan.compile_topology` builds for production.
- Every query's sink is a ``foreachBatch`` that collects the rows the Kafka sink would write
  (``topic, key, value, ts``) into in-memory output topics, in micro-batch order.
- ``pipe_input`` appends one record and then runs every query until it has processed everything
  available (``StreamingQuery.processAllAvailable``). One record per micro-batch gives Kafka's
  per-record semantics: no coalescing of updates across piped records.

The data source reads on the driver side (``SimpleDataSourceStreamReader``); it runs in a Python
process Spark starts, not in this one, hence the files instead of a Python queue.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from streamtable.compiler.lower.sink import ORDER_COLUMNS
from streamtable.config import StreamsConfig
from streamtable.errors import StreamsError, TopologyError
from streamtable.serde import Serde
from streamtable.topology.topology import Topology

__all__ = ["TopologyTestDriver", "TestInputTopic", "TestOutputTopic", "TestRecord"]

FORMAT = "streamtable-driver"
_POLLING_DELAY = "spark.sql.streaming.pollingDelay"
_HEADER = struct.Struct(">qii")  # timestamp ms, key length, value length (-1: null)
_SCHEMA = "key binary, value binary, ts bigint, partition int, offset bigint, topic string"


# -- in-memory (folder-backed) input topics -------------------------------------------------


def _topic_dir(root: str, topic: str) -> Path:
    return Path(root) / topic.encode().hex()  # any topic name is a safe folder name


def _end(root: str, topic: str) -> int:
    try:
        return int((_topic_dir(root, topic) / "end").read_text())
    except FileNotFoundError:
        return 0


def _append(
    root: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None, int]]
) -> int:
    """Append records to a topic log; returns the new end offset (written after the records)."""
    folder = _topic_dir(root, topic)
    folder.mkdir(parents=True, exist_ok=True)
    end = _end(root, topic)
    for key, value, ts in records:
        head = _HEADER.pack(
            ts, -1 if key is None else len(key), -1 if value is None else len(value)
        )
        (folder / f"{end:012d}").write_bytes(head + (key or b"") + (value or b""))
        end += 1
    tmp = folder / "end.tmp"
    tmp.write_text(str(end))
    os.replace(tmp, folder / "end")
    return end


def _load(root: str, topic: str, offset: int) -> tuple[Any, ...]:
    data = (_topic_dir(root, topic) / f"{offset:012d}").read_bytes()
    ts, kl, vl = _HEADER.unpack_from(data)
    pos = _HEADER.size
    key = None if kl < 0 else data[pos : pos + kl]
    pos += max(kl, 0)
    value = None if vl < 0 else data[pos : pos + vl]
    return (key, value, ts, 0, offset, topic)


try:  # the data source classes need pyspark; the module imports without it for type checks
    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
except ImportError:  # pragma: no cover
    DataSource = object  # type: ignore[assignment,misc]
    SimpleDataSourceStreamReader = object  # type: ignore[assignment,misc]


class _TopicReader(SimpleDataSourceStreamReader):  # type: ignore[misc]
    def __init__(self, root: str, topics: list[str]) -> None:
        self.root = root
        self.topics = topics

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        return {t: 0 for t in self.topics}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        end = {t: _end(self.root, t) for t in self.topics}
        return self.readBetweenOffsets(start, end), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:  # noqa: N802
        rows = [
            _load(self.root, t, off)
            for t in self.topics
            for off in range(int(start.get(t, 0)), int(end[t]))
        ]
        return iter(rows)


class DriverTopicSource(DataSource):  # type: ignore[misc]
    """Streaming source over the driver's input topics (options ``path``, ``topics``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return _SCHEMA

    def simpleStreamReader(self, schema: Any) -> _TopicReader:  # noqa: N802 - Spark's name
        return _TopicReader(self.options["path"], self.options["topics"].split(","))


# -- records and topics ---------------------------------------------------------------------


@dataclass(frozen=True)
class TestRecord:
    """A record read from (or piped into) a test topic (Kafka's ``TestRecord``)."""

    key: Any
    value: Any
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


def _millis(ts: int | datetime | None, default: int) -> int:
    if ts is None:
        return default
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        return int(ts.timestamp() * 1000)
    return int(ts)


class TestInputTopic:
    """Pipes records into one input topic of a :class:`TopologyTestDriver`."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        driver: TopologyTestDriver,
        name: str,
        key_serde: Serde,
        value_serde: Serde,
        start_timestamp: int | None = None,
        auto_advance: timedelta = timedelta(0),
    ) -> None:
        self._driver = driver
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._next_ts = start_timestamp
        self._advance = int(auto_advance.total_seconds() * 1000)

    def _timestamp(self, ts: int | datetime | None) -> int:
        if ts is not None:
            return _millis(ts, 0)
        if self._next_ts is not None:
            t = self._next_ts
            self._next_ts += self._advance
            return t
        return self._driver.wall_clock_ms

    def pipe_input(
        self,
        key: Any = None,
        value: Any = None,
        timestamp: int | datetime | None = None,
        headers: Any = None,
    ) -> None:
        """Process one record completely before returning (Kafka's ``pipeInput``)."""
        if headers:
            raise NotImplementedError("headers are not supported by the prototype driver")
        self._driver._pipe(
            self.name,
            [
                (
                    self.key_serde.serialize(key),
                    self.value_serde.serialize(value),
                    self._timestamp(timestamp),
                )
            ],
        )

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        """Pipe each value with a null key, one at a time."""
        for v in values:
            self.pipe_input(None, v)

    def pipe_key_value_list(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Pipe each ``(key, value)``, one at a time."""
        for k, v in pairs:
            self.pipe_input(k, v)

    def pipe_record_list(self, records: Iterable[TestRecord]) -> None:
        """Pipe each :class:`TestRecord`, one at a time."""
        for r in records:
            self.pipe_input(r.key, r.value, r.timestamp, r.headers)


class TestOutputTopic:
    """Reads the records the topology wrote to one output topic, in order."""

    __test__ = False

    def __init__(
        self, driver: TopologyTestDriver, name: str, key_serde: Serde, value_serde: Serde
    ) -> None:
        self._queue = driver._outputs[name]
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde

    def read_record(self) -> TestRecord:
        """The next record; raises ``StreamsError`` (Kafka: NoSuchElementException) if none."""
        if not self._queue:
            raise StreamsError(f"Output topic {self.name!r} is empty.")
        key, value, ts = self._queue.popleft()
        return TestRecord(self.key_serde.deserialize(key), self.value_serde.deserialize(value), ts)

    def read_value(self) -> Any:
        """The next record's value."""
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        """The next record's ``(key, value)``."""
        r = self.read_record()
        return r.key, r.value

    def read_records_to_list(self) -> list[TestRecord]:
        """All remaining records."""
        out = []
        while self._queue:
            out.append(self.read_record())
        return out

    def read_values_to_list(self) -> list[Any]:
        """All remaining values."""
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        """All remaining ``(key, value)`` pairs."""
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Last value per key; a null value removes the key (Kafka's ``readKeyValuesToMap``)."""
        out: dict[Any, Any] = {}
        for k, v in self.read_key_values_to_list():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def is_empty(self) -> bool:
        """Whether every record written so far has been read."""
        return not self._queue

    def get_queue_size(self) -> int:
        """How many records are left to read."""
        return len(self._queue)


# -- the driver -----------------------------------------------------------------------------

_registered: set[int] = set()
_lock = threading.Lock()


class _Capture:
    """``foreachBatch`` function of one query: appends the sink rows to the output queues."""

    def __init__(self, outputs: dict[str, deque]) -> None:
        self.outputs = outputs

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("topic", "key", "value", "ts", *ORDER_COLUMNS).collect()
        # processing order within the micro-batch (Spark returns the rows of a shuffled
        # stage in partition and key order); the sort is stable for rows without coordinates
        rows.sort(key=lambda r: tuple(-1 if r[c] is None else r[c] for c in ORDER_COLUMNS))
        for row in rows:
            self.outputs[row["topic"]].append((row["key"], row["value"], row["ts"]))


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
        *,
        _trigger: str = "continuous",
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
        self.wall_clock_ms = _millis(initial_wall_clock_time, int(time.time() * 1000))
        self._root = os.path.join(self._tmp, "topics")
        self._outputs: dict[str, deque] = {t: deque() for t in topology.sink_topics}
        self._trigger = _trigger
        self._queries: list[Any] = []
        self._plans: list[Any] = []
        self._stores: dict[str, Any] = {}
        self._closed = False
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- lifecycle -----------------------------------------------------------------------

    def _start(self) -> None:
        from streamtable.compiler.frame import CompileContext
        from streamtable.compiler.plan import compile_topology
        from streamtable.runtime.spark import get_spark

        cfg = self.config
        spark = get_spark(cfg.spark_conf)
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
        )
        self._plans = compile_topology(self.topology, ctx)
        self._stores = dict(ctx.stores)
        if self._trigger == "continuous":
            # an idle query polls its sources every pollingDelay (10 ms by default, a round trip
            # to the Python data source each time): poll less often while the test is idle
            previous = spark.conf.get(_POLLING_DELAY, None)
            spark.conf.set(_POLLING_DELAY, os.environ.get("STREAMTABLE_TTD_POLL", "50ms"))
            try:
                for plan in self._plans:
                    self._queries.append(self._start_query(plan))
            finally:
                if previous is None:
                    spark.conf.unset(_POLLING_DELAY)
                else:
                    spark.conf.set(_POLLING_DELAY, previous)

    def _source(self, node: Any) -> Any:
        from pyspark.sql import functions as F

        for t in node.topics:
            _append(self._root, t, [])  # the topic exists (end = 0)
        df = (
            self._spark.readStream.format(FORMAT)
            .option("path", self._root)
            .option("topics", ",".join(node.topics))
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
        self._spark.conf.set("spark.sql.streaming.stateStore.encodingFormat", plan.state_encoding)
        writer = (
            plan.df.writeStream.queryName(
                f"{cfg.application_id}-{plan.name}-{uuid.uuid4().hex[:4]}"
            )
            .outputMode(plan.output_mode)
            .option("checkpointLocation", str(Path(cfg.checkpoint_dir) / plan.name))
        )
        if self._trigger == "available_now":
            writer = writer.trigger(availableNow=True)
        if plan.sink == "kafka":
            writer = writer.foreachBatch(_Capture(self._outputs))
        else:
            writer = writer.format("noop")
        return writer.start()

    def close(self) -> None:
        """Stop the queries and delete the driver's state and topics."""
        if self._closed:
            return
        self._closed = True
        for q in self._queries:
            try:
                q.stop()
            except Exception:  # pragma: no cover - best effort
                pass
        shutil.rmtree(self._tmp, ignore_errors=True)

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
                f"{sorted(self.topology.source_topics)}."
            )
        start = None if start_timestamp is None else _millis(start_timestamp, 0)
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
                f"{sorted(self._outputs)}."
            )
        return TestOutputTopic(self, name, key_serde, value_serde)

    # -- processing ----------------------------------------------------------------------

    def _pipe(self, topic: str, records: list[tuple[bytes | None, bytes | None, int]]) -> None:
        if self._closed:
            raise StreamsError("The TopologyTestDriver is closed.")
        _append(self._root, topic, records)
        self._run()

    def _run(self) -> None:
        """Run every query until it has processed all piped input."""
        if self._trigger == "continuous":
            for q in self._queries:
                try:
                    q.processAllAvailable()
                except Exception as e:
                    raise StreamsError(f"Query {q.name} failed: {e}") from e
        else:
            for plan in self._plans:
                q = self._start_query(plan)
                q.awaitTermination()
                if q.exception() is not None:
                    raise StreamsError(f"Query {q.name} failed: {q.exception()}")

    def advance_wall_clock_time(self, advance: timedelta) -> None:
        """Advance the driver's wall clock (prototype: no punctuation or suppression yet)."""
        self.wall_clock_ms += int(advance.total_seconds() * 1000)

    # -- state stores ----------------------------------------------------------------------

    def get_key_value_store(self, name: str) -> KeyValueStoreView:
        """A read-only view of key-value store ``name`` as of the last piped record.

        Reads the state the last micro-batch committed, through Spark's ``statestore`` data
        source over the query's checkpoint (about a second per read).

        Raises
        ------
        TopologyError
            If the topology has no store ``name`` (the message lists its stores), or the store
            cannot be read by this version of the driver yet.
        """
        loc = self._stores.get(name)
        if loc is None:
            stores = sorted(self.topology.store_names)
            if name in stores:
                raise TopologyError(
                    f"Store {name!r} cannot be read by the TopologyTestDriver yet (only count "
                    f"stores can); the topology's stores are {stores}."
                )
            raise TopologyError(
                f"The topology has no state store {name!r}; its stores are {stores}."
            )
        return KeyValueStoreView(self, name, loc)

    def batches_run(self) -> list[int]:
        """Number of micro-batches each query ran (for tests of the per-record semantics)."""
        return [(q.lastProgress or {}).get("batchId", -1) + 1 for q in self._queries]


class KeyValueStoreView:
    """Read-only key-value store contents (Kafka's ``ReadOnlyKeyValueStore``), read on demand."""

    def __init__(self, driver: TopologyTestDriver, name: str, loc: Any) -> None:
        self._driver = driver
        self.name = name
        self._loc = loc

    def _read(self) -> dict[Any, Any]:
        chk = str(Path(self._driver.config.checkpoint_dir) / self._loc.query)
        if not (Path(chk) / "commits").exists() or not any((Path(chk) / "commits").iterdir()):
            return {}  # nothing processed yet
        rows = self._driver._spark.read.format("statestore").load(chk).collect()
        keys = self._loc.key_codec.decode_many([r["key"]["key"] for r in rows])
        return {k: r["value"]["count"] for k, r in zip(keys, rows, strict=True)}

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        return self._read().get(key)

    def all(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)``, sorted by key."""
        return sorted(self._read().items(), key=lambda kv: repr(kv[0]))

    def approximate_num_entries(self) -> int:
        """The number of keys."""
        return len(self._read())
