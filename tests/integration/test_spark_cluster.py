"""The same app on a real Spark standalone cluster (Spark's Master and two Workers, started by
:class:`~streamtable.platform.SparkStandaloneCluster`) against a real broker.

A process has one Spark session and the test session's is local, so the apps on the cluster
run as processes of their own (the crash harness's app, :mod:`streamtable.testing._crash_app`).
"""

from __future__ import annotations

import re
import socket
import struct
import uuid
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from _support import (
    ensure_topics,
    produce_records,
    read_topic,
    wait_until,
)
from streamtable import KafkaStreams
from streamtable.platform import SparkClusterError, SparkStandaloneCluster
from streamtable.platform.spark_cluster import cluster_marker
from streamtable.testing._crash_app import chain_topology
from streamtable.testing.crash import CrashReport, _App, _wait_for_output, verify_outputs

pytestmark = pytest.mark.integration

#: An executor's log line for a task attempt it starts: partition.attempt, stage, TID.
_RUNNING = re.compile(r"Running task (\d+)\.(\d+) in stage (\d+\.\d+) \(TID (\d+)\)")
_ENDED = re.compile(r"(?:Finished task|Exception in task|[Kk]illed task) .*\(TID (\d+)\)")


def _jvms_of(directory: Path) -> list[int]:
    """Processes whose command line carries the cluster folder's mark (its JVMs)."""
    mark = cluster_marker(directory)
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if mark in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _app_config(bootstrap: str, app_id: str, state_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": str(state_dir),
        "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": 100,
        "streamtable.shuffle.partitions": 2,
        **extra,
    }


def _longs_by_key(bootstrap: str, topic: str) -> dict[bytes, list[tuple[int, int]]]:
    """Each key's ``(value, timestamp)`` records of ``topic`` in offset order (read_committed)."""
    out: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for k, v, ts in read_topic(bootstrap, topic):
        assert k is not None and v is not None
        out[k].append((struct.unpack(">q", v)[0], ts))
    return dict(out)


def _executor_logs_of(cluster: Any, app_name: str) -> dict[int, list[Path]]:
    """The stderr logs of the executors each worker ran for the (finished) app ``app_name``."""
    state = cluster.status()
    assert state is not None, "the master does not answer"
    apps = [a["id"] for a in state["completedapps"] + state["activeapps"] if a["name"] == app_name]
    assert len(apps) == 1, f"the master lists {len(apps)} applications named {app_name!r}"
    assert cluster.directory is not None
    return {
        i: sorted((cluster.directory / f"work-{i}" / apps[0]).glob("*/stderr"))
        for i in range(cluster.workers)
    }


def _tasks_in_flight(log: Path) -> set[tuple[str, int, str]]:
    """``(partition, attempt, stage)`` of the task attempts an executor's log shows started and
    not yet ended."""
    text = log.read_text(errors="replace")
    ended = set(_ENDED.findall(text))
    return {(p, int(a), stage) for p, a, stage, tid in _RUNNING.findall(text) if tid not in ended}


def _attempts(logs: list[Path]) -> set[tuple[str, int, str]]:
    """``(partition, attempt, stage)`` of every task attempt started in ``logs``."""
    return {
        (p, int(a), stage)
        for log in logs
        for p, a, stage, _ in _RUNNING.findall(log.read_text(errors="replace"))
    }


def test_cluster_run_gives_the_output_of_local_mode(spark_cluster, kafka_broker, spark, tmp_path):
    """Two sub-topologies (stream-table join, re-key, repartition topic, aggregation) plus an
    echo and a per-key sum, run once on ``spark://`` with two workers (in a process of its own)
    and once in local mode (in this process), on the same input: the same read_committed output.
    """
    bs = kafka_broker.bootstrap_servers
    run = uuid.uuid4().hex[:6]
    records, keys = 2000, 40
    source, groups = f"cl-in-{run}", f"cl-groups-{run}"
    outputs = {
        mode: {name: f"cl-{name}-{mode}-{run}" for name in ("echo", "sums", "group-sums")}
        for mode in ("local", "cluster")
    }
    ensure_topics(
        bs,
        {t: 2 for t in [source, groups, *outputs["local"].values(), *outputs["cluster"].values()]},
    )
    produce_records(bs, groups, [(f"k{j}".encode(), f"g{j % 7}".encode(), 1) for j in range(keys)])
    produce_records(
        bs,
        source,
        [(f"k{i % keys}".encode(), struct.pack(">q", i), 1_000_000 + i) for i in range(records)],
    )
    cluster_id = f"cl-cluster-{run}"
    cluster_config = _app_config(
        bs,
        cluster_id,
        tmp_path / "cluster",
        **{"spark.master": spark_cluster.master_url, "spark.app.name": cluster_id},
    )
    out = outputs["cluster"]
    cluster_app = _App(
        {
            "source": source,
            "echo": out["echo"],
            "sums": out["sums"],
            "groups": groups,
            "group_sums": out["group-sums"],
            "config": cluster_config,
            "exit_when_caught_up": True,
            "timeout_s": 240,
        },
        tmp_path / "cluster-app.log",
    )
    try:
        out = outputs["local"]
        local = KafkaStreams(
            chain_topology(source, out["echo"], out["sums"], groups, out["group-sums"]),
            _app_config(bs, f"cl-local-{run}", tmp_path / "local"),
        )
        local.start()
        try:
            local.await_caught_up(timeout=timedelta(minutes=4))
        finally:
            local.close()
        code = cluster_app.wait(timeout=300)
    except BaseException:
        cluster_app.kill()
        raise
    assert code == 0, f"the app on the cluster failed:\n{cluster_app.tail(40)}"

    # it ran on the cluster: both workers' executors ran tasks of it
    logs = _executor_logs_of(spark_cluster, cluster_id)
    for worker, files in logs.items():
        assert _attempts(files), f"worker {worker} ran no task of the app: {files}"

    local_out, cluster_out = outputs["local"], outputs["cluster"]
    # every record echoed once, each key's records in the same order with the same timestamps
    echo = _longs_by_key(bs, cluster_out["echo"])
    assert sum(len(v) for v in echo.values()) == records
    assert echo == _longs_by_key(bs, local_out["echo"])
    # the input was there at start, so both ran it as one micro-batch: one total per key
    sums = _longs_by_key(bs, cluster_out["sums"])
    assert len(sums) == keys
    assert sums == _longs_by_key(bs, local_out["sums"])
    # the second sub-topology's updates depend on how its input was cut into micro-batches;
    # its table (each group's last sum) does not
    finals = {
        mode: {k: v[-1][0] for k, v in _longs_by_key(bs, outputs[mode]["group-sums"]).items()}
        for mode in ("local", "cluster")
    }
    assert sum(finals["cluster"].values()) == sum(i + 1 for i in range(records))
    assert finals["cluster"] == finals["local"]


def _kill_a_worker_mid_run(
    cluster: Any,
    bootstrap: str,
    tmp_path: Path,
    create_topics: Any,
    at_kill: Any,
) -> CrashReport:
    """Run the crash app on ``cluster`` (four micro-batches, exactly_once_v2), SIGKILL worker 1
    while its executor runs a task of the app (and call ``at_kill(echo_topic)`` at the same
    moment), restart the worker, let the app catch up and verify its output.

    Returns the verifier's report; checks the app's exit, that the driver lost the executor
    and that each task the killed executor was running ran again, as a later attempt.
    """
    run = uuid.uuid4().hex[:6]
    records = 1000
    source, echo, sums = (f"wk-{n}-{run}" for n in ("in", "echo", "sums"))
    create_topics([source, echo, sums])
    produce_records(
        bootstrap,
        source,
        [(f"k{i % 30}".encode(), struct.pack(">q", i), 1_000_000 + i) for i in range(records)],
    )
    app_id = f"wk-{run}"
    config = _app_config(
        bootstrap,
        app_id,
        tmp_path / "state",
        **{
            "spark.master": cluster.master_url,
            "spark.app.name": app_id,
            "streamtable.max.offsets.per.trigger": 250,  # four micro-batches
        },
    )
    spec = {"source": source, "echo": echo, "sums": sums, "config": config}
    app = _App({**spec, "exit_when_caught_up": True, "timeout_s": 300}, tmp_path / "app.log")
    victim = 1
    try:
        _wait_for_output(bootstrap, echo, 0, app, timeout=240)

        def tasks_running_on_victim() -> set[tuple[str, int, str]]:
            logs = cluster.executor_logs(victim)
            return _tasks_in_flight(logs[-1]) if logs else set()

        wait_until(tasks_running_on_victim, 120, f"no task of the app ran on worker {victim}")
        killed = cluster.kill_worker(victim)
        at_kill(echo)
        lost = _tasks_in_flight(cluster.executor_logs(victim)[-1])
        assert len(killed) >= 2  # the Worker JVM and its executor JVM (and Python workers)
        cluster.restart_worker(victim)
        code = app.wait(timeout=400)
    except BaseException:
        app.kill()
        raise
    finally:
        if cluster.worker_pids[victim] is None:
            cluster.restart_worker(victim)  # the next test gets two workers
    assert code == 0, f"the app did not carry on after the worker died:\n{app.tail(40)}"
    driver_log = (tmp_path / "state" / "logs" / "spark.log").read_text(errors="replace")
    assert "Lost executor" in driver_log
    # the tasks that died with the executor ran again, as later attempts, on another executor
    assert lost, "the killed executor ran no task at the moment of the kill"
    rerun = _attempts([log for i in range(cluster.workers) for log in cluster.executor_logs(i)])
    for partition, attempt, stage in lost:
        assert any(
            (partition, later, stage) in rerun for later in range(attempt + 1, attempt + 4)
        ), f"task {partition}.{attempt} of stage {stage} was not run again"
    report = verify_outputs(
        CrashReport(0, "exactly_once_v2", records), bootstrap, source, echo, sums
    )
    assert report.echo_records == records, report.to_json()
    return report


def test_worker_and_broker_leader_killed_together(spark_cluster, three_brokers, tmp_path):
    """A worker dies while one of its executor's tasks runs (SIGKILL of the Worker JVM, its
    executor JVM and their Python workers) and, at the same moment, the leader of the echo
    topic's partition 0 (three brokers, replication 3, min.insync.replicas 2): the driver
    re-runs the lost tasks on the other worker, the app carries on with the remaining brokers
    and catches up, and under exactly_once_v2 the read_committed output has every record once
    and every per-key sum right.
    """
    kafka = three_brokers
    bs = kafka.bootstrap_servers
    isr = {"min.insync.replicas": "2", "retention.ms": "-1"}
    victims: list[int] = []

    def create(topics: list[str]) -> None:
        for topic in topics:
            kafka.create_topic(topic, 2, replication_factor=3, config=isr)

    def kill_leader(echo: str) -> None:
        victims.append(kafka.leader_of(echo, 0))
        kafka.kill_broker(victims[0])

    report = _kill_a_worker_mid_run(spark_cluster, bs, tmp_path, create, kill_leader)
    assert victims and victims[0] >= 0
    assert report.echo_missing == 0 and report.echo_duplicates == 0, report.to_json()
    assert report.sums_errors == [] and report.sums_duplicates == 0, report.to_json()


def test_a_worker_that_cannot_start_is_named_with_its_log(tmp_path):
    """The worker's work folder cannot be created (a file is in its place): start() fails
    with the worker's exit, its log file and the log's error line, and stops the master.
    """
    (tmp_path / "work-0").write_text("in the way")
    cluster = SparkStandaloneCluster(workers=1, directory=tmp_path)
    with pytest.raises(SparkClusterError) as failure:
        cluster.start()
    message = str(failure.value)
    assert re.search(
        r"Spark worker 0 exited with code \d+ during startup \(master spark://127\.0\.0\.1:\d+\); "
        rf"read {re.escape(str(tmp_path / 'worker-0.log'))}",
        message,
    ), message
    assert f"Failed to create directory {tmp_path / 'work-0'}" in message
    assert _jvms_of(tmp_path) == [], "start() left JVMs of the failed cluster running"


def test_a_master_port_in_use_is_refused(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cluster = SparkStandaloneCluster(workers=1, directory=tmp_path, master_port=port)
        with pytest.raises(SparkClusterError, match=f"master_port {port} on 127.0.0.1 is in use"):
            cluster.start()
    assert not (tmp_path / "master.log").exists()
