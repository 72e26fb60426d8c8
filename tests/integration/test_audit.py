"""The data-loss audit on a real broker and Spark: no faults, a deleted segment, acks=0 losses.

Producers count what they got acknowledged (``produce_records(audit_topic=)``), the
application's audit queries count what its sources read (``streamtable.audit.topic``), and
``audit_report`` compares the counts per partition and minute of event time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from _support import ensure_topics, produce_records, wait_until
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.platform import AuditReport, audit_report, create_audit_topic
from streamtable.platform.audit import WINDOW_MS
from streamtable.platform.audit_compare import read_audit_records
from streamtable.serde.murmur2 import default_partition

S = Serdes.string()
JAN1 = 1_356_998_400_000  # 2013-01-01T00:00:00Z
MINUTES = 5
N = 600  # records, spread evenly over MINUTES minutes of event time


def _records(n: int = N, minutes: int = MINUTES) -> list[tuple[bytes, bytes, int]]:
    step = minutes * WINDOW_MS // n
    return [(f"k{i % 37}".encode(), f"v{i}".encode(), JAN1 + i * step) for i in range(n)]


def _upper(source: str, sink: str) -> Any:
    b = StreamsBuilder()
    b.stream(source, key_serde=S, value_serde=S).map_values(str.upper).to(
        sink, key_serde=S, value_serde=S
    )
    return b.build()


def _audited_run(
    topology: Any,
    config: dict,
    audit: str,
    done: Callable[[AuditReport], bool],
    timeout_s: float = 90.0,
) -> AuditReport:
    """Run the application until caught up, then poll audit_report until ``done(report)``
    (failing with the last report at the deadline); close the application.
    """
    with KafkaStreams(topology, config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
        return _await_report(config["bootstrap.servers"], audit, done, timeout_s)


def _await_report(
    bootstrap: str,
    audit: str,
    done: Callable[[AuditReport], bool],
    timeout_s: float,
    files: dict[str, str] | None = None,
) -> AuditReport:
    reports: list[AuditReport] = []

    def reflected() -> bool:
        reports.append(audit_report(bootstrap, audit, files=files))
        return done(reports[-1])

    wait_until(
        reflected,
        timeout_s,
        lambda: (
            f"the audit topic {audit!r} did not reflect the run: {reports[-1].summary()}; "
            f"totals {reports[-1].totals()}"
        ),
        interval_s=0.5,
    )
    return reports[-1]


def _consumed(report: AuditReport, topic: str, reporter: str) -> int:
    return report.totals().get(topic, {}).get(f"consumed:{reporter}", 0)


def test_no_faults_no_difference(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    source, sink, audit = topic_name("in"), topic_name("out"), topic_name("audit")
    ensure_topics(bs, {source: 3, sink: 1})
    assert create_audit_topic(bs, audit) is True
    assert create_audit_topic(bs, audit) is False  # exists
    assert produce_records(bs, source, _records(), audit_topic=audit, reporter="gen") == N
    config = app_config(**{"streamtable.audit.topic": audit})
    app_id = config["application.id"]
    report = _audited_run(
        _upper(source, sink), config, audit, lambda r: _consumed(r, source, app_id) >= N
    )
    assert report.ok, report.table()
    assert report.totals()[source] == {"produced": N, f"consumed:{app_id}": N}
    # every minute of event time of every partition holding records is compared
    assert {w.window_start for w in report.windows} == {
        JAN1 + m * WINDOW_MS for m in range(MINUTES)
    }
    assert report.unconsumed_topics == [sink]  # the app's output: produced, nobody audited reads
    records, malformed = read_audit_records(bs, audit)
    assert malformed == 0
    last = {r.key(): r for r in records}.values()
    produced_by_app = sum(
        r.count for r in last if r.topic == sink and r.role == "produced" and r.reporter == app_id
    )
    assert produced_by_app == N


def test_deleted_segment_is_named_with_its_window_and_count(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    source, sink, audit = topic_name("in"), topic_name("out"), topic_name("audit")
    ensure_topics(bs, {source: 2, sink: 1})
    create_audit_topic(bs, audit)
    records = _records()
    produce_records(bs, source, records, partitions=2, audit_topic=audit, reporter="gen")
    # the first minute of partition 0 is deleted before the application reads the topic
    in_p0 = [ts for k, _, ts in records if default_partition(k, 2) == 0]
    lost = sum(1 for ts in in_p0 if ts < JAN1 + WINDOW_MS)
    assert 0 < lost < len(in_p0)
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.delete_records([TopicPartition(source, 0, lost)]).values():
        fut.result(30)

    config = app_config(**{"streamtable.audit.topic": audit})
    app_id = config["application.id"]
    report = _audited_run(
        _upper(source, sink), config, audit, lambda r: _consumed(r, source, app_id) >= N - lost
    )
    assert [(w.topic, w.partition, w.window_start, w.missing) for w in report.differences] == [
        (source, 0, JAN1, lost)
    ], report.table()
    (w,) = report.differences
    assert (w.produced, w.consumed) == (lost, {app_id: 0})
    assert report.missing == lost
    assert f"1 differ ({lost} records missing)" in report.summary()


def test_records_lost_by_an_acks_0_producer_are_named(kafka_broker, spark, topic_name, app_config):
    """acks=0: the producer's delivery report succeeds once a batch is sent; records the
    broker then refuses (larger than the topic's max.message.bytes) are lost silently. The
    producer's audit counts them as produced, the application never reads them.
    """
    bs = kafka_broker.bootstrap_servers
    source, sink, audit = topic_name("in"), topic_name("out"), topic_name("audit")
    admin = AdminClient({"bootstrap.servers": bs})
    topic = NewTopic(source, 1, 1, config={"retention.ms": "-1", "max.message.bytes": "2000"})
    admin.create_topics([topic])[source].result(30)
    ensure_topics(bs, {source: 1, sink: 1})
    create_audit_topic(bs, audit)
    fire_and_forget = {
        "acks": 0,
        "enable.idempotence": False,
        "compression.type": "none",
        "linger.ms": 0,
    }
    small = [(b"k", b"small", JAN1 + i) for i in range(10)]
    big = [(b"k", os.urandom(5000), JAN1 + WINDOW_MS + i) for i in range(3)]
    after = [(b"k", b"small", JAN1 + 2 * WINDOW_MS + i) for i in range(10)]
    for phase in (small, big, after):  # one producer each: the big records batch alone
        delivered = produce_records(
            bs, source, phase, audit_topic=audit, reporter="fire", producer_config=fire_and_forget
        )
        assert delivered == len(phase)  # acks=0: "delivered" means sent

    config = app_config(**{"streamtable.audit.topic": audit})
    app_id = config["application.id"]
    report = _audited_run(
        _upper(source, sink), config, audit, lambda r: _consumed(r, source, app_id) >= 20
    )
    assert [(w.partition, w.window_start, w.produced, w.missing) for w in report.differences] == [
        (0, JAN1 + WINDOW_MS, 3, 3)
    ], report.table()
    assert _consumed(report, source, app_id) == 20


def test_after_an_unwritable_sink_path_is_cleared_the_audit_shows_no_difference(
    kafka_broker, spark, topic_name, app_config, tmp_path
):
    """Fault, then fix: the file sink's folder cannot be created (a file is in the way), the
    application refuses to start naming it; once the file is removed the same application
    (same id) runs and every produced record is consumed and in the files, window by window.
    """
    from streamtable.errors import StreamsError

    bs = kafka_broker.bootstrap_servers
    source, audit = topic_name("in"), topic_name("audit")
    ensure_topics(bs, {source: 3})
    create_audit_topic(bs, audit)
    produce_records(bs, source, _records(), audit_topic=audit, reporter="gen")
    blocker = tmp_path / "archive"
    blocker.write_text("a file where the archive folder should be")
    out = blocker / "events"
    b = StreamsBuilder()
    b.stream(source, key_serde=S, value_serde=S).to_files(out)
    topology = b.build()
    config = app_config(**{"streamtable.audit.topic": audit})
    app_id = config["application.id"]

    with KafkaStreams(topology, config) as app:
        with pytest.raises(StreamsError, match=r"cannot create its output directory .*archive"):
            app.start()
    blocker.unlink()  # the fault is cleared

    with KafkaStreams(topology, config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
        report = _await_report(
            bs,
            audit,
            lambda r: _consumed(r, source, app_id) >= N,
            90,
            files={str(out): source},
        )
    assert report.ok, report.table()
    assert report.totals()[source] == {"produced": N, f"consumed:{app_id}": N, "sunk": N}
