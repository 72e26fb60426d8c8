#!/usr/bin/env python
"""Throughput of one job on a Spark standalone cluster with 1 worker, then with 2 workers.

One embedded broker; the input topic (``--records`` **synthetic** records ``(k<i % keys>,
i)``, ``--partitions`` partitions) is produced once. For each worker count a fresh
:class:`~streamtable.platform.SparkStandaloneCluster` (``--cores-per-worker`` cores each) is
started and the crash harness's job (:func:`streamtable.testing._crash_app.crash_topology`:
echo every record through a Python function, keep a running sum per key; exactly_once_v2) runs
on it in a process of its own, with an application id and checkpoint of its own.

Then, unless ``--no-resume``, the 1-worker application is resumed from its checkpoint on the
2-worker cluster (no reset) over another ``--records`` records: it processes only those, and
its per-key sums come out right, so the extra executors served the same state partitions.

``processing_s`` is measured inside the job's process: from ``KafkaStreams.start()`` (after the
Spark session exists, every executor has registered and has Python workers with streamtable
imported) until ``await_caught_up`` returns. Cluster and session start-up are reported apart
(``cluster_start_s``, ``session_s``). Prints ONE JSON object on stdout; logs go to stderr.

    python bench/cluster_scaling.py [--records 100000] [--keys 1000] [--partitions 4]
        [--shuffle-partitions 4] [--max-offsets-per-trigger 25000] [--cores-per-worker 1]
        [--no-resume]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import json_only_stdout, print_result  # noqa: E402

log = logging.getLogger("bench.cluster_scaling")


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    """Run in the job's process: start Spark on the cluster, warm it, run until caught up."""
    from datetime import timedelta

    from streamtable import KafkaStreams
    from streamtable.config import StreamsConfig
    from streamtable.runtime.spark import get_spark
    from streamtable.testing._crash_app import crash_topology

    t0 = time.monotonic()
    cfg = StreamsConfig.from_mapping(spec["config"])
    spark = get_spark(
        cfg.spark_conf,
        log_to=cfg.spark_log_target,
        class_data_sharing=cfg.class_data_sharing,
    )
    sc = spark.sparkContext
    deadline = time.monotonic() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() - 1 < spec["workers"]:  # minus driver
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {spec['workers']} executors registered in 120 s")
        time.sleep(0.1)
    slots = spec["workers"] * spec["cores_per_worker"]
    sc.parallelize(range(slots), slots).foreach(lambda _: __import__("streamtable.runtime.spark"))
    session_s = time.monotonic() - t0
    app = KafkaStreams(crash_topology(spec["source"], spec["echo"], spec["sums"]), spec["config"])
    t1 = time.monotonic()
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=20))
        processing_s = time.monotonic() - t1
        metrics = app.metrics()
    finally:
        app.close()
    return {
        "session_s": round(session_s, 2),
        "processing_s": round(processing_s, 2),
        "processed_records": metrics.get("processed-records"),
    }


def _run_job(spec: dict[str, Any], log_path: Path) -> dict[str, Any]:
    with open(log_path, "ab") as out:
        proc = subprocess.run(
            [sys.executable, __file__, "--job", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=out,
            check=False,
        )
    lines = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the job failed (exit {proc.returncode}); see {log_path}")
    return dict(json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=25_000)
    ap.add_argument("--cores-per-worker", type=int, default=1)
    ap.add_argument("--memory-per-worker", default="2g")
    ap.add_argument("--no-resume", action="store_true", help="skip the resume on 2 workers")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        print(json.dumps(_job(json.loads(args.job))), flush=True)
        return 0
    real_stdout = json_only_stdout()

    from streamtable.broker import EmbeddedKafka
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records
    from streamtable.platform import SparkStandaloneCluster
    from streamtable.testing.crash import CrashReport, verify_outputs

    def produce(bs: str, topic: str, start: int) -> None:
        produce_records(
            bs,
            topic,
            [
                (f"k{i % args.keys}".encode(), struct.pack(">q", i), 1_000_000 + i)
                for i in range(start, start + args.records)
            ],
        )

    result: dict[str, Any] = {
        "benchmark": "cluster_scaling",
        "input": "synthetic",
        "records": args.records,
        "keys": args.keys,
        "partitions": args.partitions,
        "shuffle_partitions": args.shuffle_partitions,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "cores_per_worker": args.cores_per_worker,
        "cpu_count": os.cpu_count(),
        "load_avg_at_start": os.getloadavg()[0],
        "runs": [],
    }
    run = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, EmbeddedKafka() as kafka:
        bs = kafka.bootstrap_servers
        source = f"scale-in-{run}"
        ensure_topics(bs, {source: args.partitions})
        produce(bs, source, 0)
        apps: dict[int, dict[str, Any]] = {}
        for workers in (1, 2):
            app_id = f"scale-{workers}w-{run}"
            echo, sums = f"{app_id}-echo", f"{app_id}-sums"
            ensure_topics(bs, {echo: args.partitions, sums: args.partitions})
            t0 = time.monotonic()
            with SparkStandaloneCluster(
                workers,
                cores_per_worker=args.cores_per_worker,
                memory_per_worker=args.memory_per_worker,
                directory=Path(tmp) / f"cluster-{workers}w",
            ) as cluster:
                cluster_start_s = time.monotonic() - t0
                spec = {
                    "source": source,
                    "echo": echo,
                    "sums": sums,
                    "workers": workers,
                    "cores_per_worker": args.cores_per_worker,
                    "config": {
                        "application.id": app_id,
                        "bootstrap.servers": bs,
                        "state.dir": str(Path(tmp) / app_id),
                        "processing.guarantee": "exactly_once_v2",
                        "streamtable.shuffle.partitions": args.shuffle_partitions,
                        "streamtable.max.offsets.per.trigger": args.max_offsets_per_trigger,
                        "spark.master": cluster.master_url,
                        "spark.app.name": app_id,
                    },
                }
                apps[workers] = spec
                log.info("running the job on %d worker(s)", workers)
                job = _run_job(spec, Path(tmp) / f"{app_id}.log")
            run_result = {
                "workers": workers,
                "cluster_start_s": round(cluster_start_s, 2),
                **job,
                "records_per_s": round(args.records / job["processing_s"]),
            }
            result["runs"].append(run_result)
            log.info("%s", run_result)
        one, two = result["runs"]
        result["speedup_2_over_1"] = round(one["processing_s"] / two["processing_s"], 2)
        if not args.no_resume:
            produce(bs, source, args.records)
            spec = {**apps[1], "workers": 2}
            with SparkStandaloneCluster(
                2,
                cores_per_worker=args.cores_per_worker,
                memory_per_worker=args.memory_per_worker,
                directory=Path(tmp) / "cluster-resume",
            ) as cluster:
                spec["config"] = {**spec["config"], "spark.master": cluster.master_url}
                log.info("resuming the 1-worker application on 2 workers")
                job = _run_job(spec, Path(tmp) / "resume.log")
            report = verify_outputs(
                CrashReport(0, "exactly_once_v2", 2 * args.records),
                bs,
                source,
                spec["echo"],
                spec["sums"],
            )
            result["resume_on_2_workers"] = {
                **job,
                "records_per_s": round(args.records / job["processing_s"]),
                "new_records": args.records,
                # as many as the first run processed for the same number of records: only the
                # new ones, nothing processed again
                "processed_only_new": job["processed_records"] == one["processed_records"],
                "echo_missing": report.echo_missing,
                "echo_duplicates": report.echo_duplicates,
                "sums_errors": report.sums_errors[:3],
                "exactly_once": report.exactly_once,
            }
    result["load_avg_at_end"] = os.getloadavg()[0]
    print_result(result, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
