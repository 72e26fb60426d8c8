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
        except BaseException:
            # e.g. SIGTERM or Ctrl-C in the middle of a call into Spark's JVM, which can leave
            # its py4j connection unusable: the error being raised is the one to report
            with contextlib.suppress(Exception):
                _stop_spark()
            raise
        _stop_spark()


def _stop_spark() -> None:
    """Stop the process's Spark context, if one runs (its Python workers exit with it), and
    the Kafka clients this process cached for foreachBatch writers.
    """
    from pyspark import SparkContext

    from streamtable.runtime.task_output import close_cached_clients

    sc = SparkContext._active_spark_context
    try:
        if sc is not None:
            sc.stop()
    finally:
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


class BacklogProgress:
    """Report, every ``every_s`` seconds, how much of a backlog an application has processed.

    The figure is the sum of the offsets the application's consumer group (its
    ``application.id``) has committed on ``topic``: records every query reading the topic has
    processed, as ``kafka-consumer-groups.sh`` shows them. Use as a context manager around the
    wait for the backlog; lines go to ``echo``.

    Parameters
    ----------
    bootstrap_servers : str
        The cluster.
    group : str
        The application's ``application.id``.
    topic : str
        The backlog's topic.
    total : int
        Records in the backlog (the denominator of the percentage).
    echo : callable
        ``echo(line)``, e.g. ``click.echo``.
    every_s : float
        Seconds between lines.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        topic: str,
        total: int,
        echo: Any,
        every_s: float = 15.0,
    ) -> None:
        import threading

        self._config = {"bootstrap.servers": bootstrap_servers, "group.id": group}
        self._topic, self._total, self._echo, self._every = topic, total, echo, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backlog-progress", daemon=True)

    def __enter__(self) -> BacklogProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def committed(self, consumer: Any) -> int:
        """The group's committed offsets on the topic, summed (0 before its first commit)."""
        meta = consumer.list_topics(self._topic, timeout=10).topics.get(self._topic)
        if meta is None or meta.error is not None:
            return 0
        parts = [TopicPartition(self._topic, p) for p in meta.partitions]
        return sum(max(tp.offset, 0) for tp in consumer.committed(parts, timeout=10))

    def _run(self) -> None:
        import time

        consumer = Consumer(self._config)  # never subscribes: reads the group's offsets only
        try:
            t0, last = time.monotonic(), 0
            while not self._stop.wait(self._every):
                try:
                    done = self.committed(consumer)
                except Exception:  # noqa: BLE001 - a progress line is never worth failing for
                    continue
                if done == last:
                    continue
                last = done
                rate = done / (time.monotonic() - t0)
                self._echo(
                    f"  backlog: {done:,} of {self._total:,} events "
                    f"({100 * done / max(self._total, 1):.0f} %), {rate:,.0f} events/s"
                )
        finally:
            consumer.close()
