"""Producing to and reading from topics in integration tests (confluent-kafka)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from streamtable.demo._harness import ensure_topics, read_topic
from streamtable.demo.flights_data import produce_records

__all__ = [
    "SPARK_LINE",
    "end_position",
    "ensure_topics",
    "read_topic",
    "produce_records",
    "produce_values",
    "frame_batch",
    "change_batch",
]


def frame_batch(rows: list[tuple[Any, ...]]) -> Any:
    """An Arrow batch in frame columns from ``(key, value, ts[, partition, offset])`` rows."""
    import pyarrow as pa

    n = len(rows)
    get = lambda i, default: [r[i] if len(r) > i else default(j) for j, r in enumerate(rows)]  # noqa: E731
    return pa.RecordBatch.from_arrays(
        [
            pa.array(get(0, None), pa.binary()),
            pa.array(get(1, None), pa.binary()),
            pa.array(get(2, None), pa.int64()),
            pa.array(get(3, lambda j: 0), pa.int32()),
            pa.array(get(4, lambda j: j), pa.int64()),
            pa.array([0] * n, pa.int64()),
            pa.array(["in"] * n, pa.string()),
        ],
        names=["key", "value", "ts", "partition", "offset", "seq", "topic"],
    )


def change_batch(changes: list[tuple[Any, Any, Any]], topic: str = "t") -> Any:
    """An Arrow batch of a table's changes (frame columns plus ``old``) from ``(key, new,
    old)`` objects, pickled; ``ts`` and ``offset`` count from 0.
    """
    import pyarrow as pa

    from streamtable.compiler.codecs import PickleCodec
    from streamtable.compiler.paged.records import frame_schema

    codec, n = PickleCodec(), len(changes)
    return pa.RecordBatch.from_pydict(
        {
            "key": codec.encode_many([k for k, _, _ in changes]),
            "value": codec.encode_many([new for _, new, _ in changes]),
            "ts": list(range(n)),
            "partition": [0] * n,
            "offset": list(range(n)),
            "seq": [0] * n,
            "topic": [topic] * n,
            "old": codec.encode_many([old for _, _, old in changes]),
        },
        schema=frame_schema(("old", pa.binary())),
    )


def produce_values(
    bootstrap: str, topic: str, pairs: list[tuple[Any, Any]], *, ts: int | None = None
) -> None:
    """Produce (key str|None, value bytes|str|None) pairs, in order."""
    records = []
    for i, (k, v) in enumerate(pairs):
        kb = None if k is None else k.encode()
        vb = v.encode() if isinstance(v, str) else v
        records.append((kb, vb, None if ts is None else ts + i))
    produce_records(bootstrap, topic, records)


def end_position(bootstrap_servers: str, topic: str, partitions: int) -> Any:
    """The IQv2 ``Position`` of the last record of each non-empty partition of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    from streamtable import Position

    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "tests-end-position"})
    try:
        pos = Position.empty()
        for p in range(partitions):
            _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0:
                pos = pos.with_component(topic, p, high - 1)
        return pos
    finally:
        c.close()


def wait_until(condition: Any, timeout_s: float, what: Any, interval_s: float = 0.2) -> Any:
    """Poll ``condition()`` until it returns a truthy value and return that value; fail the
    test after ``timeout_s`` seconds with ``what`` (a string, or a callable giving one)."""
    import threading
    import time

    import pytest

    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s: {what() if callable(what) else what}")
        threading.Event().wait(interval_s)


#: ceiling for three KRaft nodes to format and start on a loaded 2-core machine (three
#: format-tool JVMs, then three brokers, beside the session's Spark and broker)
THREE_BROKERS_START = timedelta(minutes=3)

#: A line of Spark's log (log4j layout of streamtable's log4j2.properties), PySpark's Python
#: worker chatter, or a librdkafka log line: none belongs on a user's console (issue 19).
SPARK_LINE = re.compile(
    r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) |Python worker|^%\d\|\d+",
    re.M,
)


def kafka_client_threads() -> set[int]:
    """The thread ids of the librdkafka clients (producers, consumers, admin clients) this
    process holds.

    Each client runs one native thread named ``rdk:main`` (Linux thread names), from its
    creation until it is destroyed, which confluent-kafka does when its last reference goes.
    The clients made after a point are those whose thread ids were not there before.
    """
    import os

    found = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == "rdk:main":
                    found.add(int(tid))
        except OSError:  # the thread ended meanwhile
            pass
    return found


def kafka_clients_alive() -> int:
    """How many librdkafka clients this process holds (see :func:`kafka_client_threads`)."""
    return len(kafka_client_threads())


def producers_held_by(error: BaseException) -> list:
    """The Kafka producers the frames of ``error``'s tracebacks (its causes' too) reference,
    as locals or through the closures of functions in their locals.
    """
    from confluent_kafka import Producer

    found, errors, seen = [], [error], set()
    while errors:
        e = errors.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        errors += [e.__cause__, e.__context__]
        tb = e.__traceback__
        while tb is not None:
            for value in tb.tb_frame.f_locals.values():
                cells = getattr(value, "__closure__", None) or ()
                for held in [value, *(c.cell_contents for c in cells if _filled(c))]:
                    if isinstance(held, Producer):
                        found.append(held)
            tb = tb.tb_next
    return found


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True
