"""pytest plugin: Spark, Kafka and TopologyTestDriver fixtures for testing streamtable apps.

Loaded automatically when streamtable is installed (entry point ``pytest11``). Fixtures:

``spark_session`` (session scope)
    The process's local Spark session (``local[2]``, UI off, 2 shuffle partitions), started once
    per test session and shared by every driver and application.
``embedded_kafka`` (function scope)
    An :class:`EmbeddedKafkaTopics` handle on one real KRaft broker started once per test
    session: ``bootstrap_servers``, ``topic(name)`` (a topic unique to the test, created),
    ``produce`` / ``read`` and ``app_config()`` (a config with a unique ``application.id`` and
    state folder).
``topology_driver`` (function scope)
    A factory ``topology_driver(topology, config=None, initial_wall_clock_time=None)`` returning
    a :class:`~streamtable.testing.TopologyTestDriver` that is closed after the test.
``postgres`` (session scope)
    An :class:`~streamtable.platform.EmbeddedPostgres` (logical WAL, loopback, trust auth),
    started the first time a test asks for it.  Tests share it: use tables, slots and topic
    prefixes of their own.
``kafka_connect`` (session scope)
    A :class:`~streamtable.platform.KafkaConnect` worker (Debezium's PostgreSQL connector on
    its classpath) writing to the session's embedded broker, started the first time a test
    asks for it.  Tests share it: use connector names of their own, and delete them.
``spark_cluster`` (session scope)
    A :class:`~streamtable.platform.SparkStandaloneCluster`: Spark's own Master and two Workers
    (1 core, 2 GiB each) on 127.0.0.1, started the first time a test asks for it.  Apps reach
    it with ``"spark.master": spark_cluster.master_url`` and must run in a process of their own
    (a process has one Spark session, and the test session's is local).  A test that kills a
    worker restarts it (``restart_worker``) before it ends.

Example (a test module of yours)::

    from streamtable import Serdes, StreamsBuilder
    from streamtable.testing import assert_stream_equal

    def test_upper(topology_driver):
        b = StreamsBuilder()
        b.stream("in", key_serde=Serdes.string(), value_serde=Serdes.string()).map_values(
            str.upper
        ).to("out", key_serde=Serdes.string(), value_serde=Serdes.string())
        driver = topology_driver(b.build())
        inp = driver.create_input_topic("in", Serdes.string(), Serdes.string())
        out = driver.create_output_topic("out", Serdes.string(), Serdes.string())
        inp.pipe_input("k", "a")
        assert_stream_equal(out, [("k", "A")])
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

__all__ = ["EmbeddedKafkaTopics"]


@pytest.fixture(scope="session")
def spark_session() -> Any:
    """The process's local Spark session, shared by the whole test session."""
    from streamtable.runtime.spark import get_spark

    return get_spark({"spark.sql.shuffle.partitions": "2"})


@pytest.fixture(scope="session")
def _streamtable_broker() -> Iterator[Any]:
    """One real single-node KRaft broker for the whole test session."""
    from streamtable.broker import EmbeddedKafka

    with EmbeddedKafka() as kafka:
        yield kafka


class EmbeddedKafkaTopics:
    """One test's view of the session's embedded broker; topic names are unique to the test.

    Parameters
    ----------
    broker : EmbeddedKafka
        The running broker.
    test_name : str
        Prefix of the topic names and application ids.
    state_root : Path
        Folder for the state of applications made with :meth:`app_config`.
    """

    def __init__(self, broker: Any, test_name: str, state_root: Path) -> None:
        self.broker = broker
        self._prefix = re.sub(r"[^A-Za-z0-9._-]", "_", test_name)[:60]
        self._suffix = uuid.uuid4().hex[:6]
        self._state_root = state_root

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the broker."""
        return str(self.broker.bootstrap_servers)

    def topic(self, name: str, partitions: int = 1) -> str:
        """Create topic ``name`` for this test and return its unique name.

        Topics keep records forever (``retention.ms=-1``), so records with old timestamps
        are not deleted by retention.
        """
        from streamtable.demo._harness import ensure_topics

        unique = f"{self._prefix}-{name}-{self._suffix}"
        ensure_topics(self.bootstrap_servers, {unique: partitions})
        return unique

    def produce(
        self, topic: str, records: list[tuple[bytes | None, bytes | None, int | None]]
    ) -> None:
        """Write ``(key, value, timestamp ms or None)`` byte records, in order, and flush."""
        from streamtable.demo.flights_data import produce_records

        produce_records(self.bootstrap_servers, topic, records)

    def read(
        self, topic: str, timeout: timedelta = timedelta(seconds=60)
    ) -> list[tuple[bytes | None, bytes | None, int]]:
        """Every record of ``topic`` up to its current end: ``(key, value, timestamp ms)``."""
        from streamtable.demo._harness import read_topic

        return read_topic(self.bootstrap_servers, topic, timeout=timeout)

    def app_config(self, **extra: Any) -> dict[str, Any]:
        """A config for a :class:`~streamtable.KafkaStreams` app of this test.

        A unique ``application.id``, this broker, a state folder of the test's own,
        ``streamtable.shuffle.partitions=2`` and ``commit.interval.ms=200``; ``extra`` keys
        (e.g. ``**{"processing.guarantee": "exactly_once_v2"}``) override them.
        """
        app_id = f"{self._prefix[:40]}-{uuid.uuid4().hex[:6]}"
        return {
            "application.id": app_id,
            "bootstrap.servers": self.bootstrap_servers,
            "state.dir": str(self._state_root / app_id),
            "streamtable.shuffle.partitions": 2,
            "commit.interval.ms": 200,
            **extra,
        }


@pytest.fixture
def embedded_kafka(
    _streamtable_broker: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> EmbeddedKafkaTopics:
    """The session's embedded broker, with topic names unique to this test."""
    return EmbeddedKafkaTopics(_streamtable_broker, request.node.name, tmp_path)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """One real PostgreSQL server (logical WAL) for the whole test session, started lazily."""
    from streamtable.platform import EmbeddedPostgres

    with EmbeddedPostgres() as pg:
        yield pg


@pytest.fixture(scope="session")
def kafka_connect(_streamtable_broker: Any) -> Iterator[Any]:
    """One Kafka Connect worker on the session's broker for the whole test session, started
    lazily.
    """
    from streamtable.platform import KafkaConnect

    with KafkaConnect(_streamtable_broker.bootstrap_servers) as connect:
        yield connect


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Spark standalone cluster (2 workers x 1 core, 2g) for the whole test session,
    started lazily; its logs stay in the session's temporary folder.
    """
    from streamtable.platform import SparkStandaloneCluster

    folder = tmp_path_factory.mktemp("spark-cluster")
    with SparkStandaloneCluster(
        workers=2, cores_per_worker=1, memory_per_worker="2g", directory=folder
    ) as cluster:
        yield cluster


@pytest.fixture
def topology_driver(spark_session: Any) -> Iterator[Callable[..., Any]]:
    """A factory of :class:`~streamtable.testing.TopologyTestDriver` closed after the test."""
    from streamtable.testing.driver import TopologyTestDriver

    drivers: list[Any] = []

    def make(topology: Any, config: Any = None, initial_wall_clock_time: Any = None) -> Any:
        driver = TopologyTestDriver(topology, config, initial_wall_clock_time)
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.close()
