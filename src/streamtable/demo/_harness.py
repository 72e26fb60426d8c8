"""Shared plumbing of the demos: a broker (embedded or given), topics, reading output."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamtable.errors import StreamtableError


@contextlib.contextmanager
def kafka_cluster(bootstrap_servers: str | None) -> Iterator[str]:
    """Yield ``bootstrap_servers``; start an embedded broker (stopped afterwards) when None.

    Spark is stopped before the embedded broker: its Python workers keep Kafka clients between
    micro-batches (the exactly-once writer's, the changelog writers'), which would otherwise
    log the broker's disappearance on the console.
    """
    if bootstrap_servers:
        yield bootstrap_servers
        return
    from streamtable.broker import EmbeddedKafka

    with EmbeddedKafka() as kafka:
        try:
            yield kafka.bootstrap_servers
        finally:
            _stop_spark()


def _stop_spark() -> None:
    """Stop the process's Spark context, if one runs (its Python workers exit with it), and
    the Kafka clients this process cached for foreachBatch writers.
    """
    from pyspark import SparkContext

    from streamtable.runtime.task_output import close_cached_clients

    sc = SparkContext._active_spark_context
    if sc is not None:
        sc.stop()
    close_cached_clients()


def ensure_topics(
    bootstrap_servers: str, topics: dict[str, int], *, recreate: bool = False
) -> None:
    """Create the ``{topic: partitions}`` that do not exist (delete them first if ``recreate``).

    Topics are created with ``retention.ms=-1``: demo data carries historical timestamps.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    existing = set(admin.list_topics(timeout=30).topics)
    if recreate:
        doomed = [t for t in topics if t in existing]
        if doomed:
            for fut in admin.delete_topics(doomed, operation_timeout=30).values():
                fut.result()
            _wait(
                lambda: not set(doomed) & set(admin.list_topics(timeout=30).topics),
                "topic deletion",
            )
            existing -= set(doomed)
    # Record timestamps of replayed data (e.g. flights of 2013) are years old: with the default
    # time-based retention (7 days, judged by record timestamps) the broker would delete them
    # right after they are written.
    new = [
        NewTopic(t, num_partitions=n, replication_factor=1, config={"retention.ms": "-1"})
        for t, n in topics.items()
        if t not in existing
    ]
    if new:
        for fut in admin.create_topics(new, operation_timeout=30).values():
            fut.result()
    _wait(
        lambda: all(
            t in (md := admin.list_topics(timeout=30).topics) and len(md[t].partitions) == n
            for t, n in topics.items()
        ),
        "topic creation",
    )


def _wait(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise StreamtableError(f"Timed out waiting for {what}.")
        time.sleep(0.1)


def read_topic(
    bootstrap_servers: str, topic: str, *, timeout: timedelta = timedelta(seconds=60)
) -> list[tuple[bytes | None, bytes | None, int]]:
    """Every record of ``topic`` from the beginning to its current end: ``(key, value, ts)``."""
    import time
    import uuid

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"streamtable-reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=30)
        parts = list(md.topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in parts
        }
        remaining = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[bytes | None, bytes | None, int]] = []
        deadline = time.monotonic() + timeout.total_seconds()
        while remaining:
            if time.monotonic() > deadline:
                raise StreamtableError(
                    f"Timed out reading {topic}: partitions {sorted(remaining)} unfinished."
                )
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                if msg.error():
                    continue
                out.append((msg.key(), msg.value(), msg.timestamp()[1]))
                if msg.offset() + 1 >= ends[msg.partition()]:
                    remaining.discard(msg.partition())
            if remaining:  # transactional topics end with commit markers no message reaches
                for tp in consumer.position([TopicPartition(topic, p) for p in remaining]):
                    if tp.offset >= ends[tp.partition]:
                        remaining.discard(tp.partition)
        return out
    finally:
        consumer.close()


def run_until_caught_up(app: Any, timeout: timedelta = timedelta(minutes=10)) -> tuple[float, dict]:
    """Start ``app``, wait until it has processed its input, close it.

    Returns the seconds from ``start()`` to caught up, and the app's metrics then.
    """
    import time

    t0 = time.monotonic()
    app.start()
    try:
        app.await_caught_up(timeout=timeout)
        return time.monotonic() - t0, app.metrics()
    finally:
        app.close()


def demo_config(
    app_id: str, bootstrap_servers: str, state_dir: str | None, **extra: Any
) -> dict[str, Any]:
    """A config for a demo application with a fresh state folder unless one is given."""
    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap_servers,
        "state.dir": state_dir or tempfile.mkdtemp(prefix="streamtable-demo-"),
        **extra,
    }


def topic_size(bootstrap_servers: str, topic: str) -> int:
    """The sum of ``topic``'s end offsets (0 while the topic does not exist)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "streamtable-topic-size"})
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        )
    finally:
        c.close()
