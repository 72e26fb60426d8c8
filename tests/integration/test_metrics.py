"""KafkaStreams.metrics() and the Prometheus endpoint of a running count application."""

import socket
import urllib.error
import urllib.request
from datetime import timedelta

import pytest

from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import StreamsError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def only(metrics, name, **tags):
    found = [m for m in metrics if m.name == name and all(m.tags[k] == v for k, v in tags.items())]
    assert len(found) == 1, (name, tags, found)
    return found[0].value


def test_metrics_of_a_count_and_their_prometheus_endpoint(
    kafka_broker, spark, topic_name, app_config
):
    from _support import ensure_topics, produce_values

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    keys = [f"k{i % 7}" for i in range(60)]
    # a record with neither key nor value is dropped once, for its null key (as Kafka Streams'
    # dropped-records counts it), not once per reason
    nulls = [(None, "no key")] * 3 + [("k1", None), (None, None)]
    produce_values(bs, src, [(k, "v") for k in keys] + nulls)

    b = StreamsBuilder()
    (
        b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.string())
        .group_by_key()
        .count(name="Counts")
        .to_stream()
        .to(out, value_serde=Serdes.long())
    )
    address = f"127.0.0.1:{free_port()}"
    config = app_config(
        **{"processing.guarantee": "exactly_once_v2", "streamtable.metrics.address": address}
    )
    app = KafkaStreams(b.build(), config)
    app.start()
    try:
        # a second application cannot take the same address; it starts nothing
        other = KafkaStreams(b.build(), app_config(**{"streamtable.metrics.address": address}))
        with pytest.raises(
            StreamsError,
            match=rf"Cannot serve Prometheus metrics on '{address}' \(config "
            r"'streamtable.metrics.address'\)",
        ):
            other.start()
        assert other.queries == [] and other.state.value == "CREATED"

        app.await_caught_up(timeout=timedelta(minutes=3))
        (query,) = app.queries
        q = {"query": query.name}
        result = app.metrics()
        m = result["metrics"]
        assert result["processed-records"] == 65
        assert only(m, "process-total", **q) == 65  # every record read, the null keys too
        assert only(m, "dropped-records-total", reason="null_key", **q) == 4
        assert only(m, "dropped-records-total", reason="null_value", **q) == 1
        assert only(m, "commit-total", **q) >= 1
        assert only(m, "process-latency-avg", **q) > 0  # ms per record of the batches
        assert only(m, "process-latency-max", **q) >= only(m, "process-latency-avg", **q)
        assert only(m, "commit-latency-max", **q) >= only(m, "commit-latency-avg", **q) >= 0
        # caught up: nothing left in either partition
        assert only(m, "records-lag", topic=src, partition="0", **q) == 0
        assert only(m, "records-lag", topic=src, partition="1", **q) == 0
        assert only(m, "records-lag-max", **q) == 0
        # the count's store holds one row per distinct key
        (store,) = [x for x in m if x.name == "estimate-num-keys"]
        assert store.value == len(set(keys)) == 7
        assert store.group == "stream-state-metrics"
        assert only(m, "aborted-batches-total", **q) == 0  # the exactly-once sink's query
        assert only(m, "replayed-records-total") == 0

        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as response:
            assert response.status == 200
            lines = response.read().decode().splitlines()
        labels = f'application_id="{config["application.id"]}",query="{query.name}"'
        assert f"kafka_streams_stream_thread_metrics_process_total{{{labels}}} 65.0" in lines
        assert (
            f'kafka_streams_stream_task_metrics_dropped_records_total{{{labels},reason="null_key"}}'
            " 4.0" in lines
        )
        for partition in ("0", "1"):
            assert (
                "kafka_consumer_consumer_fetch_manager_metrics_records_lag"
                f'{{application_id="{config["application.id"]}",partition="{partition}",'
                f'query="{query.name}",topic="{src}"}} 0.0' in lines
            )
        state_id = store.tags["state-id"]
        assert (
            f'kafka_streams_stream_state_metrics_estimate_num_keys{{{labels},state_id="{state_id}"}}'
            " 7.0" in lines
        )
        assert "# TYPE kafka_streams_stream_thread_metrics_process_total counter" in lines
    finally:
        app.close()
    # close() stops the endpoint
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{address}/metrics", timeout=5)


def test_unseen_progress_reads_what_recent_progress_reads(spark):
    """The ledger's reader of new progress reports (it fetches only the newest reports over
    Py4J) returns the reports PySpark's ``recentProgress`` converts, after the newest one
    read."""
    from _support import wait_until
    from streamtable.runtime.progress import unseen_progress

    q = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 10)
        .load()
        .writeStream.format("noop")
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(q.recentProgress) >= 4, 60, "4 progress reports")
    finally:
        q.stop()
    every = q.recentProgress  # a stopped query keeps its reports
    qid = str(q.id)

    def mark(p):
        return (p.batchId, p.timestamp)

    assert unseen_progress(q, {}) == every
    assert unseen_progress(q, {"another-query": mark(every[-1])}) == every
    assert unseen_progress(q, {qid: mark(every[1])}) == every[2:]
    assert unseen_progress(q, {qid: mark(every[-1])}) == []


def test_the_batch_after_an_idle_report_is_counted(spark, tmp_path):
    """Spark 4.3 gives an idle report (a trigger without new data) the id of the batch that
    comes next; the ledger reads one, and still counts that batch when it runs."""
    from _support import wait_until
    from streamtable.runtime.progress import ProgressLedger, executed
    from streamtable.runtime.spark import query_start_conf

    folder = tmp_path / "in"
    folder.mkdir()
    with query_start_conf(spark, {"spark.sql.streaming.noDataProgressEventInterval": "100ms"}):
        q = (
            spark.readStream.text(str(folder))
            .writeStream.format("noop")
            .trigger(processingTime="100 milliseconds")
            .start()
        )
    ledger = ProgressLedger()
    try:
        idle = wait_until(lambda: q.recentProgress, 60, "an idle progress report")
        assert not executed(idle[0]) and idle[0].batchId == 0
        ledger.update([q])
        (folder / "a.txt").write_text("x\ny\n")
        wait_until(lambda: any(executed(p) for p in q.recentProgress), 60, "batch 0")
        ledger.update([q])
    finally:
        q.stop()
    (figures,) = ledger.snapshot()
    assert (figures.batches, figures.input_rows) == (1, 2)


def test_records_lag_counts_records_written_since_the_last_micro_batch(
    kafka_broker, spark, topic_name, app_config
):
    """Kafka's records-lag is the partition's end now minus the consumer's position: records
    written after the last micro-batch count at once, not from the next batch's planning."""
    from _support import ensure_topics, produce_records, wait_until

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    produce_records(bs, src, [(b"k", b"v", 1_000)] * 3, partitions=2)

    b = StreamsBuilder()
    b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.string()).to(out)
    # one micro-batch at the start, the next one ten minutes later
    app = KafkaStreams(b.build(), app_config(**{"commit.interval.ms": 600_000}))
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
        (query,) = app.queries
        q = {"query": query.name}

        def lag(partition):
            return only(
                app.metrics()["metrics"], "records-lag", topic=src, partition=partition, **q
            )

        assert lag("0") == lag("1") == 0
        produce_records(bs, src, [(b"x", b"v", 2_000)] * 7, partitions=2)  # all to one partition
        wait_until(
            lambda: sorted([lag("0"), lag("1")]) == [0, 7],
            60,
            lambda: f"records-lag of {src}: {lag('0')}, {lag('1')} (want 7 and 0)",
        )
        assert only(app.metrics()["metrics"], "records-lag-max", **q) == 7
    finally:
        app.close()
