"""A broker dies under an exactly-once application: it carries on, nothing lost or duplicated."""

from __future__ import annotations

import struct
import time
import uuid
from datetime import timedelta

from _support import produce_records
from streamtable import KafkaStreams
from streamtable.runtime.progress import parse_timestamp
from streamtable.testing._crash_app import crash_topology
from streamtable.testing.crash import CrashReport, verify_outputs


def _first_committed_record(bootstrap: str, topic: str, timeout_s: float) -> bool:
    """Block until a read_committed consumer receives a record of ``topic`` (or time is up)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bf-probe-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(max(0.1, deadline - time.monotonic()))  # blocks until a record
            if msg is not None and msg.error() is None:
                return True
        return False
    finally:
        consumer.close()


def test_output_leader_killed_mid_run(spark, three_brokers, tmp_path):
    records = 2000  # ten micro-batches: the kill lands after the first
    kafka = three_brokers
    bs = kafka.bootstrap_servers
    run = uuid.uuid4().hex[:6]
    source, echo, sums = (f"bf-{n}-{run}" for n in ("in", "echo", "sums"))
    # record timestamps are from 1970: keep them from time-based retention
    isr = {"min.insync.replicas": "2", "retention.ms": "-1"}
    for topic in (source, echo, sums):
        kafka.create_topic(topic, 2, replication_factor=3, config=isr)
    produce_records(
        bs,
        source,
        [(f"k{i % 30}".encode(), struct.pack(">q", i), 1_000 + i) for i in range(records)],
    )
    app = KafkaStreams(
        crash_topology(source, echo, sums),
        {
            "application.id": f"bf-{run}",
            "bootstrap.servers": bs,
            "state.dir": str(tmp_path / "state"),
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 100,
            "streamtable.shuffle.partitions": 2,
            "streamtable.max.offsets.per.trigger": 200,
        },
    )
    app.start()
    try:
        assert _first_committed_record(bs, echo, timeout_s=180), "no output within 180 s"
        victim = kafka.leader_of(echo, 0)
        killed_at_ms = time.time() * 1000
        kafka.kill_broker(victim)
        app.await_caught_up(timeout=timedelta(minutes=5))
        assert app.state.value == "RUNNING"
        assert kafka.leader_of(echo, 0) != victim
        # the broker died mid-run: micro-batches planned after the kill still had input
        after_kill = [
            p.numInputRows
            for q in app.queries
            for p in q.recentProgress
            if p.numInputRows > 0 and (parse_timestamp(p.timestamp) or 0) > killed_at_ms
        ]
        assert after_kill, "the app had read all its input before the broker was killed"
    finally:
        app.close()
    report = verify_outputs(CrashReport(0, "exactly_once_v2", records), bs, source, echo, sums)
    assert report.echo_records == records, report.to_json()
    assert report.exactly_once, report.to_json()
