"""Shared fixtures: one Spark session and one Kafka broker per test session (from streamtable's
pytest plugin, ``streamtable.testing.pytest_plugin``).

Tests under ``tests/integration`` are marked ``integration`` automatically; the rest are ``unit``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests ``integration`` or ``unit``; run the tests on the shared three-broker cluster
    last, one after another.

    The cluster (:func:`_three_broker_cluster`) starts at its first test and stops at the end
    of the session. Idle, its three brokers take about 0.14 of a core of the 2 (KRaft
    heartbeats and metadata no-op records; 0.04 for the session's one broker): started at
    ``test_broker.py``, they would slow every test after it.
    """
    for item in items:
        path = str(item.fspath)
        if "/tests/integration/" in path:
            item.add_marker(pytest.mark.integration)
        elif "/tests/unit/" in path or "/src/" in path:
            item.add_marker(pytest.mark.unit)
    items.sort(key=lambda i: "three_brokers" in getattr(i, "fixturenames", ()))  # stable


@pytest.fixture(scope="session")
def kafka_broker(_streamtable_broker: Any) -> Any:
    """The plugin's session broker (``streamtable.testing.pytest_plugin``), as an EmbeddedKafka.

    Before it stops, the Kafka clients the tests' task outputs cached in this process are
    closed: left connected, they would log the broker's shutdown at the end of the run.
    """
    yield _streamtable_broker
    from streamtable.runtime.task_output import close_cached_clients

    close_cached_clients()


@pytest.fixture(scope="session")
def _three_broker_cluster() -> Any:
    """One three-broker EmbeddedKafka for the session, started by the first test that needs it
    (each start and stop of three brokers costs ~25 s of the suite)."""
    from _support import THREE_BROKERS_START
    from streamtable.broker import EmbeddedKafka

    with EmbeddedKafka(brokers=3, startup_timeout=THREE_BROKERS_START) as kafka:
        yield kafka


def _all_brokers_running(kafka: Any) -> None:
    """Start again every broker of ``kafka`` that is not running, once the cluster has fenced
    it: a SIGKILLed broker stays in the metadata for ``broker.session.timeout.ms``, and
    ``restart_broker`` returns when every node id is in the metadata."""
    from datetime import timedelta

    from _support import wait_until

    admin = kafka.admin()
    for node in kafka.node_ids:
        if not kafka.is_alive(node):
            wait_until(
                lambda n=node: n not in admin.list_topics(timeout=10).brokers,
                60,
                f"the cluster to fence the dead broker {node}",
            )
            kafka.restart_broker(node, timeout=timedelta(minutes=2))


@pytest.fixture
def three_brokers(_three_broker_cluster: Any) -> Any:
    """The session's three-broker cluster, all three brokers running; a broker the test
    killed or stopped is started again after it (same ports and data), so the next test gets
    three. Tests give their topics names of their own (``topic_name`` or a uuid).
    """
    kafka = _three_broker_cluster
    _all_brokers_running(kafka)  # also after a test whose restart failed
    yield kafka
    _all_brokers_running(kafka)


@pytest.fixture(scope="session")
def spark(spark_session: Any) -> Any:
    """The plugin's session Spark (local[2], UI off, 2 shuffle partitions)."""
    return spark_session


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Topic names unique to this test: ``topic_name("in")`` → ``test_x-in-1a2b3c``."""
    suffix = uuid.uuid4().hex[:6]
    base = request.node.name.replace("[", "_").replace("]", "")[:60]

    def make(name: str) -> str:
        return f"{base}-{name}-{suffix}"

    return make


@pytest.fixture
def app_config(
    kafka_broker: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Callable[..., dict]:
    """A config for an application of this test, with its own state folder."""

    def make(**extra: Any) -> dict:
        return {
            "application.id": f"t-{request.node.name[:40]}-{uuid.uuid4().hex[:6]}".replace(
                "[", "_"
            ).replace("]", "_"),
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "state.dir": str(tmp_path / "state"),
            "streamtable.shuffle.partitions": 2,
            "commit.interval.ms": 200,
            **extra,
        }

    return make
