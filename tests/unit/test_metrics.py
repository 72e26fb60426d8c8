"""Kafka Streams' metrics computed from Spark query progress, and their Prometheus exposition.

Progress reports are built with PySpark's own ``StreamingQueryProgress.fromJson`` (no JVM), in
the shape Spark 4.3 reports for a Kafka source and a streaming aggregation.
"""

from __future__ import annotations

import json
import math
import socket
import urllib.request
import uuid

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql.streaming.listener import StreamingQueryProgress

from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError, StreamsError
from streamtable.observability.prometheus import MetricsCollector, MetricsServer
from streamtable.runtime.metrics import Metric, application_metrics
from streamtable.runtime.progress import ProgressLedger, parse_timestamp

BASE = {"application.id": "a", "bootstrap.servers": "localhost:9092"}
QUERY_ID = str(uuid.uuid4())
T0 = "2026-01-01T00:00:00.000Z"
T0_MS = parse_timestamp(T0)
assert T0_MS is not None


def progress(
    batch_id: int,
    *,
    seconds: float = 0.0,
    rows: int = 0,
    durations: dict[str, int] | None = None,
    end: dict[str, int] | None = None,
    latest: dict[str, int] | None = None,
    state_rows: int | None = None,
    dropped: dict[str, int] | None = None,
    name: str = "app-KSTREAM-SINK-0000000003",
    qid: str = QUERY_ID,
) -> StreamingQueryProgress:
    """A progress report of a query reading topic ``in``; ``durations=None`` is an idle report."""
    ms = T0_MS + int(seconds * 1000)
    stamp = f"2026-01-01T00:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"
    state = []
    if state_rows is not None:
        state = [
            {
                "operatorName": "stateStoreSave",
                "numRowsTotal": state_rows,
                "numRowsUpdated": 1,
                "allUpdatesTimeMs": 1,
                "numRowsRemoved": 0,
                "allRemovalsTimeMs": 0,
                "commitTimeMs": 3,
                "memoryUsedBytes": 8544,
                "numRowsDroppedByWatermark": 0,
                "numShufflePartitions": 4,
                "numStateStoreInstances": 4,
                "customMetrics": {"rocksdbSstFileSize": 1024, "rocksdbGetCount": 14},
            }
        ]
    end_offsets = {"in": {str(p): o for p, o in (end or {}).items()}}
    latest_offsets = {"in": {str(p): o for p, o in (latest or end or {}).items()}}
    return StreamingQueryProgress.fromJson(
        {
            "id": qid,
            "runId": str(uuid.uuid4()),
            "name": name,
            "timestamp": stamp,
            "batchId": batch_id,
            "batchDuration": 100,
            "numInputRows": rows,
            "inputRowsPerSecond": 0.0,
            "processedRowsPerSecond": 0.0,
            "durationMs": durations
            if durations is not None
            else {"latestOffset": 2, "triggerExecution": 2},
            "stateOperators": state,
            "sources": [
                {
                    "description": "KafkaV2[Subscribe[in]]",
                    "startOffset": None,
                    "endOffset": end_offsets,
                    "latestOffset": latest_offsets,
                    "numInputRows": rows,
                    "inputRowsPerSecond": 0.0,
                    "processedRowsPerSecond": 0.0,
                    "metrics": {},
                }
            ],
            "sink": {"description": "kafka", "numOutputRows": rows},
            "observedMetrics": {"streamtable_dropped_1": dropped or {"null_key": 0}},
        }
    )


class FakeQuery:
    def __init__(self, reports: list[StreamingQueryProgress]) -> None:
        self.recentProgress = reports


def batch(addbatch: int, wal: int = 5, commit: int = 7) -> dict[str, int]:
    return {"addBatch": addbatch, "walCommit": wal, "commitOffsets": commit, "triggerExecution": 99}


def by_name(metrics: list[Metric], name: str, **tags: str) -> list[Metric]:
    return [
        m for m in metrics if m.name == name and all(m.tags.get(k) == v for k, v in tags.items())
    ]


def value(metrics: list[Metric], name: str, **tags: str) -> float:
    (m,) = by_name(metrics, name, **tags)
    return m.value


# -- the ledger ---------------------------------------------------------------------------------


def test_each_batch_is_counted_once_and_idle_reports_are_not_batches():
    ledger = ProgressLedger()
    # Spark 4.3 gives an idle report the id of the batch that comes next
    reports = [
        progress(0),  # idle before the first batch
        progress(0, seconds=1, rows=40, durations=batch(200), end={0: 40}),
        progress(1, seconds=11),  # idle after batch 0
        progress(1, seconds=12, rows=10, durations=batch(50), end={0: 50}),
    ]
    q = FakeQuery([])
    for n in (1, 2, 3, 4, 4):  # Spark's list grows; the ledger reads each state of it
        q.recentProgress = reports[:n]
        ledger.update([q])
    (fig,) = ledger.snapshot()
    assert (fig.input_rows, fig.batches) == (50, 2)
    assert [b.batch_id for b in fig.recent] == [0, 1]
    assert fig.reached == {("in", 0): 50}
    assert ledger.totals() == (50, {})


def test_a_restarted_query_continues_its_batch_ids():
    ledger = ProgressLedger()
    first = FakeQuery([progress(0, rows=3, durations=batch(10), end={0: 3})])
    ledger.update([first])
    # the restart is a new StreamingQuery object with the same id; its list starts afresh
    again = FakeQuery([progress(1), progress(1, seconds=2, rows=4, durations=batch(10))])
    ledger.update([again])
    assert ledger.totals() == (7, {})


def test_dropped_records_are_summed_by_reason():
    ledger = ProgressLedger()
    ledger.update(
        [
            FakeQuery(
                [
                    progress(0, rows=5, durations=batch(1), dropped={"null_key": 2, "late": 0}),
                    progress(1, rows=5, durations=batch(1), dropped={"null_key": 1, "late": 3}),
                ]
            )
        ]
    )
    assert ledger.totals() == (10, {"null_key": 3, "late": 3})


# -- Kafka Streams' metrics -----------------------------------------------------------------------


@pytest.fixture
def figures():
    ledger = ProgressLedger()
    ledger.update(
        [
            FakeQuery(
                [
                    # 100 records in 400 ms: 4 ms per record; commit 5 + 7 ms
                    progress(0, seconds=0, rows=100, durations=batch(400), end={0: 60, 1: 40}),
                    # 10 records in 50 ms: 5 ms per record; commit 20 + 10 ms
                    progress(
                        1,
                        seconds=40,
                        rows=10,
                        durations=batch(50, wal=20, commit=10),
                        end={0: 65, 1: 45},
                        latest={0: 70, 1: 45},
                        state_rows=7,
                        dropped={"null_key": 2, "late": 1},
                    ),
                    # a no-data batch (advances the watermark): a commit, no processing sample
                    progress(
                        2,
                        seconds=50,
                        durations=batch(30, wal=1, commit=1),
                        end={0: 65, 1: 45},
                        latest={0: 70, 1: 45},
                        state_rows=7,
                    ),
                ]
            )
        ]
    )
    return ledger.snapshot()


def test_thread_metrics(figures):
    now = T0_MS + 60_000  # the window holds batches 1 and 2 (started at 40 s and 50 s)
    m = application_metrics(figures, now_ms=now)
    q = {"query": "app-KSTREAM-SINK-0000000003"}
    assert value(m, "process-total", **q) == 110
    assert value(m, "process-rate", **q) == pytest.approx(10 / 30)
    assert value(m, "process-latency-avg", **q) == pytest.approx((4.0 + 5.0) / 2)
    assert value(m, "process-latency-max", **q) == pytest.approx(5.0)
    assert value(m, "process-records-avg", **q) == pytest.approx(55.0)
    assert value(m, "process-records-max", **q) == 100
    assert value(m, "commit-total", **q) == 3
    assert value(m, "commit-rate", **q) == pytest.approx(2 / 30)
    assert value(m, "commit-latency-avg", **q) == pytest.approx((12 + 30 + 2) / 3)
    assert value(m, "commit-latency-max", **q) == 30
    assert {x.group for x in by_name(m, "process-rate")} == {"stream-thread-metrics"}


def test_rates_are_zero_once_the_window_is_empty(figures):
    m = application_metrics(figures, now_ms=T0_MS + 3_600_000)
    assert value(m, "process-rate") == 0.0
    assert value(m, "dropped-records-rate", reason="late") == 0.0


def test_averages_and_maxima_forget_batches_after_60_s_as_kafka_s_samples(figures):
    # Kafka's Avg/Max drop a sample 2 x 30 s after its last event (SampledStat): batch 0
    # (ended at 0.099 s) leaves at 60.099 s, batches 1 and 2 (ended at 40.099 s and
    # 50.099 s) at 100.099 s and 110.099 s
    def at(seconds):
        return application_metrics(figures, now_ms=T0_MS + int(seconds * 1000))

    assert value(at(60), "process-latency-max") == pytest.approx(5.0)
    assert value(at(60), "process-records-max") == 100
    assert value(at(61), "process-latency-avg") == pytest.approx(5.0)  # batch 1 only
    assert value(at(61), "process-records-max") == 10
    assert value(at(61), "commit-latency-max") == 30
    assert value(at(105), "commit-latency-avg") == 2  # batch 2: a commit, no processing
    assert math.isnan(value(at(105), "process-latency-max"))
    for name in ("process-latency-avg", "process-records-max", "commit-latency-max"):
        assert math.isnan(value(at(3_600), name)), name
    assert value(at(3_600), "process-total") == 110  # totals stay


def test_records_lag_per_partition_and_max(figures):
    m = application_metrics(figures, now_ms=T0_MS + 60_000)
    assert value(m, "records-lag", topic="in", partition="0") == 5
    assert value(m, "records-lag", topic="in", partition="1") == 0
    assert value(m, "records-lag-max") == 5
    assert {x.group for x in by_name(m, "records-lag")} == {"consumer-fetch-manager-metrics"}


def test_state_store_metrics(figures):
    m = application_metrics(figures, now_ms=T0_MS + 60_000)
    store = {"state-id": "stateStoreSave-0"}
    assert value(m, "estimate-num-keys", **store) == 7
    assert value(m, "memory-used-bytes", **store) == 8544
    assert value(m, "total-sst-files-size", **store) == 1024
    assert {x.group for x in by_name(m, "estimate-num-keys")} == {"stream-state-metrics"}


def test_dropped_records_by_reason_with_sink_rejections(figures):
    name = "app-KSTREAM-SINK-0000000003"
    m = application_metrics(figures, sink_rejected={name: 4, "app-other": 1}, now_ms=T0_MS + 60_000)
    assert value(m, "dropped-records-total", reason="null_key", query=name) == 2
    assert value(m, "dropped-records-total", reason="late", query=name) == 1
    assert value(m, "dropped-records-total", reason="production", query=name) == 4
    assert value(m, "dropped-records-total", reason="production", query="app-other") == 1
    assert value(m, "dropped-records-rate", reason="null_key") == pytest.approx(2 / 30)
    assert {x.group for x in by_name(m, "dropped-records-total")} == {"stream-task-metrics"}


def test_streamtable_metrics(figures):
    name = "app-KSTREAM-SINK-0000000003"
    m = application_metrics(figures, replayed=12, now_ms=T0_MS)
    assert value(m, "replayed-records-total") == 12
    assert by_name(m, "dead-letter-records-total") == []  # no dead-letter topic
    assert by_name(m, "aborted-batches-total") == []  # no exactly-once sink
    m = application_metrics(
        figures, aborted_batches={name: 2}, dead_letter_topic="dlq", now_ms=T0_MS
    )
    assert value(m, "aborted-batches-total", query=name) == 2
    # the dead-letter topic gets the records the handlers skipped: none by those reasons here
    assert value(m, "dead-letter-records-total", topic="dlq") == 0


def test_averages_without_samples_are_nan_as_in_kafka():
    ledger = ProgressLedger()
    ledger.update([FakeQuery([progress(-1)])])
    ledger.update([FakeQuery([progress(0, durations=batch(5))])])
    m = application_metrics(ledger.snapshot(), now_ms=T0_MS + 1_000)
    assert math.isnan(value(m, "process-latency-avg"))
    assert value(m, "commit-latency-avg") == 12
    assert by_name(m, "records-lag-max") == []  # no Kafka offsets reported


def test_metrics_are_json_serializable(figures):
    m = application_metrics(figures, now_ms=T0_MS)
    first = json.loads(json.dumps(m))[0]
    assert first[:2] == ["process-total", "stream-thread-metrics"]
    assert all(x.is_counter == x.name.endswith("-total") for x in m)


# -- aborted exactly-once batches ---------------------------------------------------------------


class Frame:
    """A micro-batch DataFrame whose write job gives ``rows`` or raises ``error``."""

    def __init__(self, rows=(), error=None):
        self.rows, self.error = list(rows), error

    def mapInArrow(self, fn, ddl):
        return self

    def collect(self):
        if self.error is not None:
            raise self.error
        return self.rows


@pytest.mark.parametrize(("guarantee", "aborted"), [("exactly_once_v2", 1), ("at_least_once", 0)])
def test_the_sink_counts_failed_exactly_once_batches(guarantee, aborted):
    from streamtable.runtime.kafka_sink import ForeachBatchSink
    from streamtable.runtime.task_output import output_spec

    cfg = StreamsConfig.from_mapping({**BASE, "processing.guarantee": guarantee})
    sink = ForeachBatchSink(output_spec(cfg, "KSTREAM-SINK-0000000003.sink"), query="a-q")
    sink(Frame([{"written": 2, "rejected": 1}, {"written": 3, "rejected": 0}]), 0)
    with pytest.raises(RuntimeError, match="task failed"):
        sink(Frame(error=RuntimeError("task failed")), 1)
    assert (sink.query, sink.written, sink.rejected, sink.aborted) == ("a-q", 5, 1, aborted)


# -- Prometheus ---------------------------------------------------------------------------------


def exposition(metrics: list[Metric], app: str = "wc") -> str:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(MetricsCollector(lambda: metrics, app))
    return generate_latest(registry).decode()


def test_exposition_names_types_and_labels(figures):
    text = exposition(application_metrics(figures, replayed=3, now_ms=T0_MS + 60_000))
    q = 'application_id="wc",query="app-KSTREAM-SINK-0000000003"'
    lines = text.splitlines()
    assert "# TYPE kafka_streams_stream_thread_metrics_process_total counter" in lines
    assert f"kafka_streams_stream_thread_metrics_process_total{{{q}}} 110.0" in lines
    assert "# TYPE kafka_streams_stream_thread_metrics_process_rate gauge" in lines
    assert f"kafka_streams_stream_thread_metrics_commit_latency_max{{{q}}} 30.0" in lines
    # labels are written in name order
    assert (
        'kafka_consumer_consumer_fetch_manager_metrics_records_lag{application_id="wc",'
        'partition="0",query="app-KSTREAM-SINK-0000000003",topic="in"} 5.0' in lines
    )
    assert (
        f'kafka_streams_stream_task_metrics_dropped_records_total{{{q},reason="late"}} 1.0' in lines
    )
    assert (
        f'kafka_streams_stream_state_metrics_estimate_num_keys{{{q},state_id="stateStoreSave-0"}}'
        " 7.0" in lines
    )
    assert 'streamtable_replayed_records_total{application_id="wc"} 3.0' in lines
    # the text parses as Prometheus' format, with one family per metric name
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["kafka_streams_stream_thread_metrics_process"].type == "counter"
    assert families["kafka_streams_stream_task_metrics_dropped_records"].type == "counter"
    assert len(families["kafka_streams_stream_task_metrics_dropped_records"].samples) == 2


def test_nan_is_exposed_as_nan():
    ledger = ProgressLedger()
    ledger.update([FakeQuery([progress(0, durations=batch(5))])])
    text = exposition(application_metrics(ledger.snapshot(), now_ms=T0_MS))
    assert any(
        line.startswith("kafka_streams_stream_thread_metrics_process_latency_avg{")
        and line.endswith(" NaN")
        for line in text.splitlines()
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_serves_fresh_metrics_until_stopped():
    calls = []

    def source() -> list[Metric]:
        calls.append(1)
        return [Metric("process-total", "stream-thread-metrics", {"query": "q"}, len(calls), "")]

    address = f"127.0.0.1:{free_port()}"
    server = MetricsServer(address, MetricsCollector(source, "app"))
    server.start()
    try:
        for expected in (1.0, 2.0):
            with urllib.request.urlopen(server.url, timeout=10) as r:
                text = r.read().decode()
            assert (
                f'kafka_streams_stream_thread_metrics_process_total{{application_id="app",'
                f'query="q"}} {expected}' in text.splitlines()
            )
        busy = MetricsServer(address, MetricsCollector(list, "other"))
        with pytest.raises(
            StreamsError,
            match=rf"Cannot serve Prometheus metrics on '{address}' \(config "
            r"'streamtable.metrics.address'\): .*in use",
        ):
            busy.start()
    finally:
        server.stop()
        server.stop()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=5)
    # the address is free again
    again = MetricsServer(address, MetricsCollector(list, "app"))
    again.start()
    again.stop()


# -- the config key -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "address"),
    [
        (9400, "127.0.0.1:9400"),
        ("9400", "127.0.0.1:9400"),
        (":9400", "127.0.0.1:9400"),
        ("0.0.0.0:9400", "0.0.0.0:9400"),
        ("[::1]:9400", "[::1]:9400"),
        (None, None),
    ],
)
def test_metrics_address(given, address):
    cfg = StreamsConfig.from_mapping({**BASE, "streamtable.metrics.address": given})
    assert cfg.metrics_address == address
    assert cfg.to_mapping()["streamtable.metrics.address"] == address


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ("host", r"'streamtable.metrics.address' expects 'host:port' or a port .*got 'host'"),
        (70000, r"'streamtable.metrics.address' .*port in 1-65535, got '127.0.0.1:70000'"),
        (True, r"'streamtable.metrics.address' expects a str, got bool True"),
    ],
)
def test_metrics_address_errors(given, match):
    with pytest.raises(ConfigError, match=match):
        StreamsConfig.from_mapping({**BASE, "streamtable.metrics.address": given})


def test_a_batch_counts_in_the_rates_from_its_end_however_long_it_ran():
    # Kafka Streams records a rate when the records are processed; a micro-batch's figures
    # come at its end: a 40 s batch (longer than the 30 s window) counts after it, not never
    ledger = ProgressLedger()
    long_batch = {
        "addBatch": 39_000,
        "walCommit": 5,
        "commitOffsets": 5,
        "triggerExecution": 40_000,
    }
    ledger.update([FakeQuery([progress(0, seconds=0, rows=3_000, durations=long_batch)])])
    during = application_metrics(ledger.snapshot(), now_ms=T0_MS + 20_000)
    after = application_metrics(ledger.snapshot(), now_ms=T0_MS + 45_000)
    assert value(during, "process-rate") == 0.0  # not known before the batch ends
    assert value(after, "process-rate") == pytest.approx(3_000 / 30)
    assert value(after, "commit-rate") == pytest.approx(1 / 30)
