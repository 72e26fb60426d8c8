#!/usr/bin/env python
"""The cost of exactly-once: ``exactly_once_v2`` vs ``at_least_once`` on the same topology.

The topology is the crash harness's (``streamtable.testing._crash_app.crash_topology``): every
input record (String key, Long value) is echoed through a Python ``map_values`` to an echo topic,
and a per-key running sum (``reduce`` with a Python fold: ``transformWithState`` over paged
RocksDB state) is written to a sums topic. streamtable runs it as two Spark queries, each
reading the input. Four sections (``--sections``):

- ``throughput``: the same pre-produced input (synthetic, seeded) processed from a fresh
  ``application.id`` and state folder under each guarantee, alternating which goes first;
  records/s from ``start()`` to caught up, and the steady-state rate of the query progress
  (micro-batches after the first, ``--max-offsets-per-trigger`` records each).
- ``latency``: the application running and caught up, records produced at a fixed rate with the
  produce time (ms) as value; a ``read_committed`` consumer of the echo topic takes
  latency = receive wall time - value; p50/p95/p99/max per guarantee.
- ``recovery``: ``exactly_once_v2`` on input with ``--recovery-keys`` distinct keys (one record
  each: the running-sum state holds that many keys), run as its own process group until caught
  up, ``SIGKILL``ed, a few records for existing keys produced, restarted from its checkpoint; the
  time from the kill (and from the restart) to the first new committed record on each output
  topic, and where the restart's time went. A control run with ``--recovery-control-keys`` keys
  shows what the state size adds.
- ``task_cost``: the exactly-once writer (``TaskOutput``) outside Spark: what one task's
  transaction costs per micro-batch (producer start, ``init_transactions``, marker read, commit)
  against producing the same records with the plain producer ``at_least_once`` uses.

Prints ONE JSON object on stdout; logs go to stderr. Never asserts timings: the targets are
printed next to the figures. See bench/README.md.

    python bench/eos.py [--quick] [--sections throughput,latency,recovery,task_cost]
        [--records N] [--keys N] [--commit-interval-ms MS] [--max-offsets-per-trigger N]
        [--repeat N] [--rate N] [--latency-seconds S] [--recovery-keys N] ...
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench_run  # noqa: E402  (bench/run.py: shared helpers)

log = logging.getLogger("bench.eos")

TARGETS = {
    "eos_over_alos_throughput_min": 0.7,  # issue 5
    "recovery_s_max": 30.0,  # issue 5: kill -> first new output, 1M keys of state
}
GUARANTEES = ("at_least_once", "exactly_once_v2")
SECTIONS = ("throughput", "latency", "recovery", "task_cost")
SEED = 42
BASE_TS = 1_700_000_000_000
CATCH_UP_TIMEOUT_S = bench_run.CATCH_UP_TIMEOUT_S
EVENT = "BENCH-EVENT "  # prefix of the child's event lines in its log


# --------------------------------------------------------------------------- helpers


def _pct(xs: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``xs``, nearest-rank."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _other_processes(limit: int = 8) -> list[str]:
    """The busiest processes outside this process tree (what else shares the machine)."""
    table = bench_run._proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    ours, todo = {os.getpid()}, [os.getpid()]
    while todo:
        for c in children.get(todo.pop(), []):
            ours.add(c)
            todo.append(c)
    try:
        out = subprocess.run(
            ["ps", "-eo", "pid=,pcpu=,etimes=,args=", "--sort=-pcpu"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or int(parts[0]) in ours or float(parts[1]) < 1.0:
            continue
        rows.append(f"{parts[1]}% cpu, {parts[2]} s: {parts[3][:120]}")
        if len(rows) >= limit:
            break
    return rows


def _keys(n: int, prefix: str) -> list[bytes]:
    return [f"{prefix}{i:07d}".encode() for i in range(n)]


def _random_input(records: int, keys: int) -> Iterator[tuple[bytes, bytes, int]]:
    """``records`` records over ``keys`` random keys (seeded); value = index, timestamps rising."""
    import numpy as np

    names = _keys(keys, "k")
    idx = np.random.default_rng(SEED).integers(0, keys, records)
    for i, k in enumerate(idx.tolist()):
        yield names[k], struct.pack(">q", i), BASE_TS + i


def _count_committed(bs: str, topic: str, timeout_s: float = 300.0) -> int:
    """How many records a ``read_committed`` consumer reads from ``topic`` (without keeping them)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"eos-bench-count-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        parts = list(c.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        n, deadline = 0, time.monotonic() + timeout_s
        remaining = {p for p, e in ends.items() if e > 0}
        while remaining and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=0.5):
                if not m.error():
                    n += 1
            for tp in c.position([TopicPartition(topic, p) for p in remaining]):
                if tp.offset >= ends[tp.partition]:
                    remaining.discard(tp.partition)
        return n
    finally:
        c.close()


def _app_config(args: argparse.Namespace, app_id: str, bs: str, state_dir: str, guarantee: str):
    cfg: dict[str, Any] = {
        "application.id": app_id,
        "bootstrap.servers": bs,
        "state.dir": state_dir,
        "processing.guarantee": guarantee,
        "commit.interval.ms": args.commit_interval_ms,
        "streamtable.shuffle.partitions": args.shuffle_partitions,
    }
    if args.max_offsets_per_trigger:
        cfg["streamtable.max.offsets.per.trigger"] = args.max_offsets_per_trigger
    cfg.update(args.config)
    return cfg


def _roles(app: Any, echo: str) -> dict[str, str]:
    """``{query name: "echo" | "sums"}`` of a started crash-topology app (by its sink topics)."""
    from streamtable.topology.nodes import SinkNode

    sinks = {n.name: n.topic for n in app.topology.graph.nodes if isinstance(n, SinkNode)}
    out = {}
    for q in app.queries:
        node = next((name for name in sinks if q.name.endswith(name)), None)
        out[q.name] = "echo" if node is not None and sinks[node] == echo else "sums"
    return out


def _iso_ms(ts: str) -> float:
    """Spark's progress timestamp (``2025-01-01T00:00:00.123Z``) as epoch seconds."""
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


# --------------------------------------------------------------------------- throughput


def _query_figures(progresses: list[Any], t_start_wall: float) -> dict[str, Any]:
    """Per query: batches, startup, and the steady-state rate (data batches after the first)."""
    data = [p for p in progresses if (p.numInputRows or 0) > 0]
    steady = data[1:]
    rows = sum(int(p.numInputRows) for p in steady)
    ms = sum(int((p.durationMs or {}).get("triggerExecution", 0)) for p in steady)
    first = data[0] if data else None
    out: dict[str, Any] = {
        "data_batches": len(data),
        "rows": sum(int(p.numInputRows) for p in data),
        "first_batch_rows": int(first.numInputRows) if first else 0,
        "first_batch_ms": int((first.durationMs or {}).get("triggerExecution", 0)) if first else 0,
        "start_to_first_batch_s": round(_iso_ms(first.timestamp) - t_start_wall, 3)
        if first
        else None,
        "steady_batches": len(steady),
        "steady_rows_per_s": round(rows / (ms / 1000)) if ms else None,
        "steady_batch_ms_median": statistics.median(
            int(p.durationMs.get("triggerExecution", 0)) for p in steady
        )
        if steady
        else None,
        "batch_phases_ms": bench_run._batch_summary(progresses)["duration_ms"],
    }
    return out


def _run_throughput(
    args: argparse.Namespace, bs: str, tmp: Path, source: str, n: int, guarantee: str, tag: str
) -> dict[str, Any]:
    from streamtable import KafkaStreams
    from streamtable.demo._harness import ensure_topics
    from streamtable.testing._crash_app import crash_topology

    app_id = f"eos-bench-{tag}-{guarantee}-{uuid.uuid4().hex[:6]}"
    echo, sums = f"{app_id}-echo", f"{app_id}-sums"
    ensure_topics(bs, {echo: args.partitions, sums: args.partitions})
    state_dir = tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp)
    app = KafkaStreams(
        crash_topology(source, echo, sums), _app_config(args, app_id, bs, state_dir, guarantee)
    )
    t_wall = time.time()
    t0 = time.monotonic()
    app.start()
    try:
        t_started = time.monotonic()
        app.await_caught_up(timeout=timedelta(seconds=CATCH_UP_TIMEOUT_S))
        t_done = time.monotonic()
        roles = _roles(app, echo)
        queries = {roles[q.name]: list(q.recentProgress) for q in app.queries}
        metrics = app.metrics()
    finally:
        app.close()
    secs = t_done - t0
    per_query = {name: _query_figures(ps, t_wall) for name, ps in queries.items()}
    steady = [q["steady_rows_per_s"] for q in per_query.values()]
    out = {
        "guarantee": guarantee,
        "processing_s": round(secs, 3),
        "start_call_s": round(t_started - t0, 3),
        "records_per_s": round(n / secs),
        # the queries run side by side on the same cores: the app is as fast as the slower one
        "steady_records_per_s": min(steady) if steady and None not in steady else None,
        "queries": per_query,
        "processed_records": metrics.get("processed-records"),
        "dropped_records": metrics.get("dropped-records"),
    }
    if args.verify:
        out["echo_records"] = _count_committed(bs, echo)
        out["sums_records"] = _count_committed(bs, sums)
        out["echo_exact"] = out["echo_records"] == n
    for t in (echo, sums):  # keep the broker's disk small
        _delete_topic(bs, t)
    return out


def _delete_topic(bs: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bs})  # referenced until the futures are done
    try:
        for f in admin.delete_topics([topic], operation_timeout=30).values():
            f.result(60)
    except Exception as e:  # best effort
        log.warning("could not delete %s: %s", topic, e)


def bench_throughput(args: argparse.Namespace, bs: str, tmp: Path) -> dict[str, Any]:
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records

    # warm-up (discarded): JIT, Python workers, the Kafka producer pools of both sinks
    warm = "eos-bench-warmup-in"
    ensure_topics(bs, {warm: args.partitions}, recreate=True)
    produce_records(bs, warm, _random_input(args.warmup_records, min(args.keys, 10_000)))
    t0 = time.monotonic()
    for g in GUARANTEES:
        _run_throughput(args, bs, tmp, warm, args.warmup_records, g, "warm")
    warm_s = round(time.monotonic() - t0, 1)
    _delete_topic(bs, warm)

    source = "eos-bench-in"
    ensure_topics(bs, {source: args.partitions}, recreate=True)
    t0 = time.monotonic()
    produce_records(bs, source, _random_input(args.records, args.keys), timeout_s=600)
    produce_s = round(time.monotonic() - t0, 1)
    log.info("produced %d records over %d keys in %.1f s", args.records, args.keys, produce_s)
    runs: dict[str, list[dict]] = {g: [] for g in GUARANTEES}
    for i in range(args.repeat):
        order = GUARANTEES if i % 2 == 0 else tuple(reversed(GUARANTEES))
        for g in order:
            r = _run_throughput(args, bs, tmp, source, args.records, g, f"run{i}")
            r["order"] = order.index(g)
            r["loadavg_after"] = _load()
            runs[g].append(r)
            log.info(
                "throughput %s run %d: %.1f s, %d records/s, steady %s records/s",
                g,
                i,
                r["processing_s"],
                r["records_per_s"],
                r["steady_records_per_s"],
            )
    _delete_topic(bs, source)

    def med(g: str, k: str) -> float | None:
        xs = [r[k] for r in runs[g] if r.get(k) is not None]
        return statistics.median(xs) if xs else None

    alos, eos = med("at_least_once", "records_per_s"), med("exactly_once_v2", "records_per_s")
    alos_s = med("at_least_once", "steady_records_per_s")
    eos_s = med("exactly_once_v2", "steady_records_per_s")
    ratio = round(eos / alos, 3) if alos and eos else None
    ratio_steady = round(eos_s / alos_s, 3) if alos_s and eos_s else None
    return {
        "input": {
            "records": args.records,
            "keys": args.keys,
            "partitions": args.partitions,
            "synthetic": f"keys drawn uniformly (numpy seed {SEED}), value = index (Long)",
            "produce_s": produce_s,
        },
        "warmup_discarded": {"records": args.warmup_records, "s": warm_s},
        "records_per_s": {"at_least_once": alos, "exactly_once_v2": eos},
        "steady_records_per_s": {"at_least_once": alos_s, "exactly_once_v2": eos_s},
        "ratio_eos_over_alos": ratio,
        "ratio_eos_over_alos_steady": ratio_steady,
        "meets_target": None if ratio is None else ratio >= TARGETS["eos_over_alos_throughput_min"],
        "meets_target_steady": None
        if ratio_steady is None
        else ratio_steady >= TARGETS["eos_over_alos_throughput_min"],
        "runs": runs,
    }


# --------------------------------------------------------------------------- latency


class _Collector(threading.Thread):
    """A ``read_committed`` consumer of ``topic`` from its beginning: latency of every record
    whose Long value (the produce time in ms) is at least ``since_ms``."""

    def __init__(self, bs: str, topic: str, since_ms: int, poll_s: float = 0.05) -> None:
        super().__init__(name="eos-bench-collector", daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        self.since_ms = since_ms
        # consume() returns when 1000 records are there or after poll_s: each record's receive
        # time is late by up to poll_s below 1000 records per poll_s
        self.poll_s = poll_s
        self.latencies_ms: list[float] = []
        self.values: dict[int, int] = {}
        self.stop_event = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"eos-bench-latency-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        parts = self._consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, 0) for p in parts])

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                msgs = self._consumer.consume(num_messages=1000, timeout=self.poll_s)
                now_ms = time.time() * 1000
                for m in msgs:
                    if m.error() or m.value() is None:
                        continue
                    self._take(m, now_ms)
        finally:
            self._consumer.close()

    def _take(self, m: Any, now_ms: float) -> None:
        """One output record, received at ``now_ms``."""
        v = struct.unpack(">q", m.value())[0]
        if v >= self.since_ms:
            self.latencies_ms.append(now_ms - v)
            self.values[v] = self.values.get(v, 0) + 1

    @property
    def received(self) -> int:
        return len(self.latencies_ms)


def _produce_at_rate(
    bs: str,
    topic: str,
    keys: list[bytes],
    rate: float,
    seconds: float,
    encode: Callable[[int], bytes] = lambda ms: struct.pack(">q", ms),
    key_for: Callable[[int], bytes] | None = None,
    on_produce: Callable[[bytes, int], None] | None = None,
) -> tuple[int, float]:
    """Produce ``rate`` records/s for ``seconds``, value = ``encode(produce time ms)`` (by
    default a Long), key = ``key_for(i)`` of the i-th record (default: one of ``keys`` at
    random), each then passed to ``on_produce(key, produce time ms)``; returns (count,
    seconds).
    """
    import random

    from confluent_kafka import Producer

    rng = random.Random(SEED)
    p = Producer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 5,
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    sent = 0
    t0 = time.monotonic()
    while (elapsed := time.monotonic() - t0) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            now_ms = int(time.time() * 1000)
            while True:
                try:
                    key = rng.choice(keys) if key_for is None else key_for(sent)
                    p.produce(topic, encode(now_ms), key, timestamp=now_ms)
                    if on_produce is not None:
                        on_produce(key, now_ms)
                    break
                except BufferError:
                    p.poll(0.01)
            sent += 1
        p.poll(0)
        time.sleep(0.002)  # the fixed offered rate, not a wait for a condition
    took = time.monotonic() - t0
    if p.flush(60):
        raise RuntimeError("latency producer: records not delivered within 60 s")
    return sent, took


def _run_latency(
    args: argparse.Namespace, bs: str, tmp: Path, guarantee: str, tag: str
) -> dict[str, Any]:
    from streamtable import KafkaStreams
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records
    from streamtable.testing._crash_app import crash_topology

    app_id = f"eos-bench-lat-{tag}-{guarantee}-{uuid.uuid4().hex[:6]}"
    source, echo, sums = f"{app_id}-in", f"{app_id}-echo", f"{app_id}-sums"
    ensure_topics(bs, {source: args.partitions, echo: args.partitions, sums: args.partitions})
    keys = _keys(args.keys, "k")
    # a little input before the start, so that "caught up" means every query ran a batch
    produce_records(bs, source, ((k, struct.pack(">q", 0), BASE_TS) for k in keys[:1000]))
    state_dir = tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp)
    app = KafkaStreams(
        crash_topology(source, echo, sums), _app_config(args, app_id, bs, state_dir, guarantee)
    )
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(seconds=CATCH_UP_TIMEOUT_S))
        since_ms = int(time.time() * 1000)
        collector = _Collector(bs, echo, since_ms)
        collector.start()
        sent, took = _produce_at_rate(bs, source, keys, args.rate, args.latency_seconds)
        deadline = time.monotonic() + args.drain_timeout_s
        while collector.received < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        drained = collector.received >= sent
        collector.stop_event.set()
        collector.join(30)
        roles = _roles(app, echo)
        progresses = {roles[q.name]: list(q.recentProgress) for q in app.queries}
    finally:
        app.close()
    lat = collector.latencies_ms
    batch_ms = {
        name: statistics.median(
            int(p.durationMs.get("triggerExecution", 0))
            for p in ps
            if (p.numInputRows or 0) > 0 and _iso_ms(p.timestamp) * 1000 >= since_ms
        )
        if any((p.numInputRows or 0) > 0 for p in ps)
        else None
        for name, ps in progresses.items()
    }
    for t in (source, echo, sums):
        _delete_topic(bs, t)
    return {
        "guarantee": guarantee,
        "produced": sent,
        "offered_rate_per_s": round(sent / took),
        "received": collector.received,
        "distinct_received": len(collector.values),
        "all_received": drained,
        "latency_ms": {
            "p50": round(_pct(lat, 0.50)),
            "p95": round(_pct(lat, 0.95)),
            "p99": round(_pct(lat, 0.99)),
            "max": round(max(lat)) if lat else None,
            "min": round(min(lat)) if lat else None,
            "mean": round(statistics.fmean(lat)) if lat else None,
        },
        "batch_ms_median_during": batch_ms,
        "loadavg_after": _load(),
    }


def bench_latency(args: argparse.Namespace, bs: str, tmp: Path) -> dict[str, Any]:
    runs: dict[str, list[dict]] = {g: [] for g in GUARANTEES}
    for i in range(args.repeat):
        order = GUARANTEES if i % 2 == 0 else tuple(reversed(GUARANTEES))
        for g in order:
            r = _run_latency(args, bs, tmp, g, f"run{i}")
            runs[g].append(r)
            log.info("latency %s run %d: %s", g, i, r["latency_ms"])

    def med(g: str, k: str) -> float | None:
        xs = [r["latency_ms"][k] for r in runs[g] if r["latency_ms"][k] is not None]
        return statistics.median(xs) if xs else None

    return {
        "rate_per_s": args.rate,
        "seconds": args.latency_seconds,
        "definition": "read_committed consumer's receive wall time - produce wall time (the "
        "record's Long value, echoed unchanged), same clock; echo topic only",
        "p99_ms": {g: med(g, "p99") for g in GUARANTEES},
        "p50_ms": {g: med(g, "p50") for g in GUARANTEES},
        "runs": runs,
    }


# --------------------------------------------------------------------------- recovery


def _emit(name: str, **fields: Any) -> None:
    print(EVENT + json.dumps({"event": name, "t": time.time(), **fields}), flush=True)


def _progress_event(query: str, p: Any) -> dict[str, Any]:
    ops = []
    for op in json.loads(p.json).get("stateOperators") or []:
        custom = op.get("customMetrics") or {}
        ops.append(
            {
                "name": op.get("operatorName"),
                "numRowsTotal": op.get("numRowsTotal"),
                "numRowsUpdated": op.get("numRowsUpdated"),
                "commitTimeMs": op.get("commitTimeMs"),
                "allUpdatesTimeMs": op.get("allUpdatesTimeMs"),
                "memoryUsedBytes": op.get("memoryUsedBytes"),
                "customMetrics": {
                    k: v
                    for k, v in custom.items()
                    if v and any(s in k for s in ("Load", "load", "Copied", "Snapshot", "Commit"))
                },
            }
        )
    return {
        "query": query,
        "batchId": int(p.batchId),
        "start": _iso_ms(p.timestamp),
        "numInputRows": int(p.numInputRows or 0),
        "durationMs": dict(p.durationMs or {}),
        "stateOperators": ops,
    }


def child_main(spec: dict[str, Any]) -> int:
    """The recovery app (``--child SPEC``): crash topology plus events on stdout, until killed."""
    _emit("PROCESS")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    from streamtable import KafkaStreams
    from streamtable.runtime.kafka_admin import KafkaAdmin
    from streamtable.runtime.progress import caught_up
    from streamtable.testing._crash_app import crash_topology

    app = KafkaStreams(crash_topology(spec["source"], spec["echo"], spec["sums"]), spec["config"])
    _emit("IMPORTED")
    # start() creates the Spark session, while it checks topics and fences producers
    app.start()
    _emit("STARTED")
    roles = _roles(app, spec["echo"])
    # the whole input is produced before the start: caught up = these offsets processed
    targets = (
        KafkaAdmin(spec["config"]["bootstrap.servers"]).end_offsets([spec["source"]])
        if spec.get("await_caught_up")
        else None
    )
    seen: set[tuple[str, int]] = set()
    while True:
        for q in app.queries:
            name = roles[q.name]
            for p in q.recentProgress:
                if (name, int(p.batchId)) not in seen:
                    seen.add((name, int(p.batchId)))
                    if (p.numInputRows or 0) > 0 or int(p.batchId) == 0:
                        _emit("PROGRESS", **_progress_event(name, p))
        if targets is not None and all(caught_up(q, targets) for q in app.queries):
            targets = None
            _emit("CAUGHT_UP", metrics=app.metrics())
        for q in app.queries:
            if q.exception() is not None:
                _emit("FAILED", error=str(q.exception())[:2000])
                return 1
        time.sleep(0.2)


class _ChildApp:
    """The recovery app as its own process group (as ``streamtable.testing.crash._App``)."""

    def __init__(self, spec: dict[str, Any], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in kill()
        self._offset = log_path.stat().st_size
        self.started = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        from streamtable import _watchdog

        _watchdog.guard(self.proc.pid)  # a killed benchmark does not leave the app running

    def events(self) -> list[dict[str, Any]]:
        """This run's events so far."""
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            text = f.read().decode(errors="replace")
        out = []
        for line in text.splitlines():
            if line.startswith(EVENT):
                try:
                    out.append(json.loads(line[len(EVENT) :]))
                except ValueError:
                    pass  # a line being written
        return out

    def wait_event(self, name: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for e in self.events():
                if e["event"] == name:
                    return e
                if e["event"] == "FAILED":
                    raise RuntimeError(f"recovery app failed: {e['error']}")
            if self.proc.poll() is not None:
                raise RuntimeError(f"recovery app exited ({self.proc.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {name} within {timeout_s} s:\n{self.tail()}")
            time.sleep(0.1)

    def kill(self) -> float:
        """SIGKILL the app's process tree; the wall time of the kill."""
        from streamtable import _watchdog
        from streamtable.testing.crash import kill_process_tree

        t = time.time()
        kill_process_tree(self.proc)
        _watchdog.release(self.proc.pid)
        self._log.close()
        return t

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


class _FirstOutputs(threading.Thread):
    """``read_committed`` consumer of the output topics from their current end: when each topic's
    first new record arrives, and every new record."""

    def __init__(self, bs: str, topics: list[str]) -> None:
        super().__init__(name="eos-bench-first-output", daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        self.first: dict[str, float] = {}
        self.records: dict[str, list[tuple[bytes, int, float]]] = {t: [] for t in topics}
        self.stop_event = threading.Event()
        self._c = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"eos-bench-recovery-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        assign = []
        for t in topics:
            for p in self._c.list_topics(t, timeout=30).topics[t].partitions:
                end = self._c.get_watermark_offsets(TopicPartition(t, p), timeout=30)[1]
                assign.append(TopicPartition(t, p, end))
        self._c.assign(assign)

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                msgs = self._c.consume(num_messages=1000, timeout=0.05)
                now = time.time()
                for m in msgs:
                    if m.error():
                        continue
                    self.first.setdefault(m.topic(), now)
                    v = struct.unpack(">q", m.value())[0]
                    self.records[m.topic()].append((m.key(), v, now))
        finally:
            self._c.close()


def _dir_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return round(total / 1e6, 1)


def _recovery(args: argparse.Namespace, bs: str, tmp: Path, keys: int, tag: str) -> dict:
    """One kill-and-restart with ``keys`` keys of state; see the module docstring."""
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records

    app_id = f"eos-bench-rec-{tag}-{uuid.uuid4().hex[:6]}"
    source, echo, sums = f"{app_id}-in", f"{app_id}-echo", f"{app_id}-sums"
    ensure_topics(bs, {source: args.partitions, echo: args.partitions, sums: args.partitions})
    names = _keys(keys, "r")
    # one record per key: key i has value i, so its running sum is i
    t0 = time.monotonic()
    produce_records(
        bs,
        source,
        ((k, struct.pack(">q", i), BASE_TS + i) for i, k in enumerate(names)),
        timeout_s=600,
    )
    produce_s = round(time.monotonic() - t0, 1)
    state_dir = tmp / f"{app_id}-state"
    spec = {
        "source": source,
        "echo": echo,
        "sums": sums,
        "config": _app_config(args, app_id, bs, str(state_dir), "exactly_once_v2"),
        "await_caught_up": True,
    }
    log_path = tmp / f"{app_id}.log"
    first = _ChildApp(spec, log_path)
    try:
        caught = first.wait_event("CAUGHT_UP", CATCH_UP_TIMEOUT_S)
        first_events = first.events()
    except BaseException:
        first.kill()
        raise
    started = next(e for e in first_events if e["event"] == "STARTED")
    watcher = _FirstOutputs(bs, [echo, sums])
    watcher.start()
    t_kill = first.kill()
    t_dead = time.time()
    state_mb = _dir_mb(state_dir)
    # new records for existing keys, spread over the key space: value 10^9 + j
    k_new = min(args.recovery_new_records, keys)
    new_keys = [(j * (keys // k_new), 1_000_000_000 + j) for j in range(k_new)]
    produce_records(
        bs,
        source,
        [(names[i], struct.pack(">q", v), int(time.time() * 1000)) for i, v in new_keys],
    )
    t_produced = time.time()
    second = _ChildApp({**spec, "await_caught_up": False}, log_path)
    t_restart = second.started
    try:
        deadline = time.monotonic() + args.recovery_timeout_s
        while time.monotonic() < deadline and not (
            len(watcher.records[echo]) >= k_new and len(watcher.records[sums]) >= k_new
        ):
            if second.proc.poll() is not None:
                raise RuntimeError(f"restarted app exited:\n{second.tail()}")
            time.sleep(0.05)
        # the progress of both queries' first batch is posted just after their commits
        events, deadline = second.events(), time.monotonic() + 60
        while time.monotonic() < deadline:
            events = second.events()
            done = {e["query"] for e in events if e["event"] == "PROGRESS" and e["numInputRows"]}
            if {"echo", "sums"} <= done:
                break
            time.sleep(0.1)
    finally:
        second.kill()
        watcher.stop_event.set()
        watcher.join(30)
    ev = {e["event"]: e["t"] for e in events if e["event"] != "PROGRESS"}
    progress = [e for e in events if e["event"] == "PROGRESS"]
    first_batches = {}
    for q in ("echo", "sums"):
        qs = [e for e in progress if e["query"] == q]
        data = [e for e in qs if e["numInputRows"] > 0]
        if data:
            b = data[0]
            first_batches[q] = {
                "batchId": b["batchId"],
                "start_after_restart_s": round(b["start"] - t_restart, 2),
                "rows": b["numInputRows"],
                "durationMs": b["durationMs"],
                "stateOperators": b["stateOperators"],
            }
    expected_sums = {names[i]: i + v for i, v in new_keys}
    got_sums = {k: v for k, v, _ in watcher.records[sums]}
    f_echo, f_sums = watcher.first.get(echo), watcher.first.get(sums)

    def rel(t: float | None, since: float) -> float | None:
        return None if t is None else round(t - since, 2)

    out = {
        "keys_of_state": keys,
        "input_produce_s": produce_s,
        "initial_catch_up_s": round(caught["t"] - started["t"], 1),
        "initial_start_s": round(started["t"] - first.started, 1),
        "state_dir_mb_at_kill": state_mb,
        "kill_to_first_output_s": {"echo": rel(f_echo, t_kill), "sums": rel(f_sums, t_kill)},
        "restart_to_first_output_s": {
            "echo": rel(f_echo, t_restart),
            "sums": rel(f_sums, t_restart),
        },
        "timeline_s": {
            "kill_to_group_gone": rel(t_dead, t_kill),
            "kill_to_new_input_acked": rel(t_produced, t_kill),
            "kill_to_restart": rel(t_restart, t_kill),
            "restart_to_python_up": rel(ev.get("PROCESS"), t_restart),
            "restart_to_imported": rel(ev.get("IMPORTED"), t_restart),
            "restart_to_queries_started": rel(ev.get("STARTED"), t_restart),
        },
        "first_batches_after_restart": first_batches,
        "new_records": k_new,
        "new_echo_received": len(watcher.records[echo]),
        "new_sums_received": len(watcher.records[sums]),
        "sums_correct": got_sums == expected_sums,
        "loadavg_after": _load(),
    }
    for t in (source, echo, sums):
        _delete_topic(bs, t)
    shutil.rmtree(state_dir, ignore_errors=True)
    return out


def bench_recovery(args: argparse.Namespace, bs: str, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {
        "guarantee": "exactly_once_v2",
        "definition": "SIGKILL of the app's process group (idle, caught up) -> a few new records "
        "for existing keys produced -> restart from the checkpoint -> first new record seen by "
        "a read_committed consumer of the echo (stateless) and sums (1 state read per key) "
        "topics",
    }
    main = _recovery(args, bs, tmp, args.recovery_keys, "main")
    out["main"] = main
    log.info("recovery (%d keys): %s", args.recovery_keys, main["kill_to_first_output_s"])
    if args.recovery_control_keys:
        ctl = _recovery(args, bs, tmp, args.recovery_control_keys, "control")
        out["control"] = ctl
        log.info(
            "recovery (%d keys): %s", args.recovery_control_keys, ctl["kill_to_first_output_s"]
        )
    worst = max(v for v in main["kill_to_first_output_s"].values() if v is not None)
    out["kill_to_first_output_s"] = worst
    out["meets_target"] = worst <= TARGETS["recovery_s_max"] and all(
        v is not None for v in main["kill_to_first_output_s"].values()
    )
    return out


# --------------------------------------------------------------------------- task cost


class _PhaseTimer:
    """Times ``TaskOutput``'s Kafka calls by wrapping two module functions (profiling only)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    def __enter__(self) -> _PhaseTimer:
        from streamtable.runtime import task_output as mod

        self._mod = mod
        self._retries, self._commit = mod._with_retries, mod.TaskOutput._commit_with_marker
        timer = self

        def with_retries(what: str, timeout_s: float, call: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return timer._retries(what, timeout_s, call)
            finally:
                timer.add(what.split(" ")[0], t0)

        def commit(out: Any, timeout_s: float) -> None:
            t0 = time.perf_counter()
            try:
                timer._commit(out, timeout_s)
            finally:
                timer.add("commit", t0)

        mod._with_retries = with_retries
        mod.TaskOutput._commit_with_marker = commit
        return self

    def __exit__(self, *exc: object) -> None:
        self._mod._with_retries = self._retries
        self._mod.TaskOutput._commit_with_marker = self._commit

    def add(self, phase: str, t0: float) -> None:
        self.ms[phase] = self.ms.get(phase, 0.0) + (time.perf_counter() - t0) * 1000


def _task_batches(
    spec: Any, topic: str, n: int, batches: int, pause_s: float
) -> dict[str, list[float]]:
    """``batches`` + 1 micro-batches of one task partition writing ``n`` records (the first is a
    warm-up); the phases of each, in ms."""
    from streamtable.runtime.task_output import TaskCoordinates, TaskOutput

    keys = _keys(10_000, "t")
    value = struct.pack(">q", 1)
    phases: dict[str, list[float]] = {}
    for b in range(batches + 1):
        if b and pause_s:
            time.sleep(pause_s)  # the gap between a task's batches at a rate below capacity
        with _PhaseTimer() as timer:
            t0 = time.perf_counter()
            w = TaskOutput(spec, TaskCoordinates(0, b, f"bench-query-{spec.stage}"))
            w._ensure_open()  # producer (+ init_transactions, marker read, begin_transaction)
            t1 = time.perf_counter()
            for i in range(n):
                w.produce(topic, keys[i % len(keys)], value, timestamp=BASE_TS + i)
            t2 = time.perf_counter()
            w.close()  # flush (+ send_offsets_to_transaction and commit)
            t3 = time.perf_counter()
        if not b:
            continue
        ms = {
            "open": (t1 - t0) * 1000,
            "init_transactions": timer.ms.get("init_transactions", 0.0),
            "marker_read": timer.ms.get("reading", 0.0),
            "produce_loop": (t2 - t1) * 1000,
            "close": (t3 - t2) * 1000,
            "commit": timer.ms.get("commit", 0.0),
            "total": (t3 - t0) * 1000,
        }
        for k, v in ms.items():
            phases.setdefault(k, []).append(v)
    return phases


def bench_task_cost(args: argparse.Namespace, bs: str) -> dict[str, Any]:
    """One task's write of ``n`` records per micro-batch, phase by phase, exactly-once vs the
    plain idempotent producer (both through ``TaskOutput``, outside Spark)."""
    from streamtable.config import StreamsConfig
    from streamtable.demo._harness import ensure_topics
    from streamtable.runtime.task_output import close_cached_clients, marker_topic, output_spec

    app_id = f"eos-bench-task-{uuid.uuid4().hex[:6]}"
    topic = f"{app_id}-out"
    ensure_topics(bs, {topic: args.partitions, marker_topic(app_id): 1})
    out: dict[str, Any] = {}
    modes = {"back_to_back": 0.0, "paced": args.task_pause_ms / 1000}
    for n in args.task_records:
        for mode, pause_s in modes.items():
            row: dict[str, Any] = {}
            for guarantee in GUARANTEES:
                cfg = StreamsConfig.from_mapping(
                    {
                        "application.id": app_id,
                        "bootstrap.servers": bs,
                        "processing.guarantee": guarantee,
                    }
                )
                spec = output_spec(cfg, f"bench-{n}-{mode}")
                ph = _task_batches(spec, topic, n, args.task_repeat, pause_s)
                fig = {f"{k}_ms": round(statistics.median(v), 1) for k, v in ph.items()}
                fig["total_ms_max"] = round(max(ph["total"]), 1)
                fig["records_per_s"] = round(n / (statistics.median(ph["total"]) / 1000))
                if guarantee == "at_least_once":
                    for k in ("init_transactions_ms", "marker_read_ms", "commit_ms"):
                        fig.pop(k)
                row[guarantee] = fig
            out[f"{n}_{mode}"] = row
            log.info("task cost, %d records, %s: %s", n, mode, row)
    close_cached_clients()
    for t in (topic, marker_topic(app_id)):
        _delete_topic(bs, t)
    return {
        "what": "one task partition writing n records per micro-batch through TaskOutput, "
        "outside Spark (this process): open = producer (+ init_transactions, marker read, "
        "begin_transaction under exactly_once_v2; the cached idempotent producer under "
        "at_least_once), produce_loop = Python produce() per record, close = flush (+ "
        "send_offsets_to_transaction and commit_transaction). back_to_back: the next batch "
        "opens right after the previous commit (a backlog); paced: "
        f"{args.task_pause_ms} ms between batches. Medians of {args.task_repeat} batches "
        "after a warm-up. In streamtable at_least_once writes through Spark's Kafka sink (JVM) "
        "instead; its row here is the Python producer for comparison",
        "by_records_and_mode": out,
    }


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="200,000 records over 50,000 keys, 15 s of latency, 200,000 keys of recovery state",
    )
    ap.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    ap.add_argument("--records", type=int, default=None, help="throughput input (1,000,000)")
    ap.add_argument("--keys", type=int, default=None, help="distinct keys of it (100,000)")
    ap.add_argument("--partitions", type=int, default=3, help="partitions of every topic (3)")
    ap.add_argument(
        "--shuffle-partitions", type=int, default=2, help="streamtable.shuffle.partitions (2)"
    )
    ap.add_argument("--commit-interval-ms", type=int, default=1000, help="the trigger (1000)")
    ap.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=50_000,
        help="records per micro-batch and query (50,000; 0 = no limit: one batch reads all)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per guarantee, order alternated")
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra app config entry (a streamtable or spark.* key), for A/B runs; repeatable",
    )
    ap.add_argument("--warmup-records", type=int, default=20_000, help="discarded warm-up input")
    ap.add_argument("--no-verify", dest="verify", action="store_false", help="skip output counts")
    ap.add_argument("--rate", type=float, default=2000, help="latency: records/s offered (2000)")
    ap.add_argument("--latency-seconds", type=float, default=None, help="latency: duration (30)")
    ap.add_argument("--drain-timeout-s", type=float, default=120, help="latency: wait for output")
    ap.add_argument(
        "--recovery-keys", type=int, default=None, help="recovery: keys of state (1,000,000)"
    )
    ap.add_argument(
        "--recovery-control-keys",
        type=int,
        default=1000,
        help="recovery: the small-state control run (1000; 0 = skip)",
    )
    ap.add_argument("--recovery-new-records", type=int, default=10, help="recovery: new records")
    ap.add_argument("--recovery-timeout-s", type=float, default=600, help="recovery: wait at most")
    ap.add_argument(
        "--task-records",
        default="1000,20000",
        help="task_cost: records per task and batch (comma-separated)",
    )
    ap.add_argument("--task-repeat", type=int, default=5, help="task_cost: batches per size")
    ap.add_argument(
        "--task-pause-ms", type=int, default=1000, help="task_cost: gap between paced batches"
    )
    args = ap.parse_args(argv)
    args.config = bench_run.key_values(ap, args.config, "--config")
    if args.child:
        return child_main(json.loads(args.child))
    args.records = args.records or (200_000 if args.quick else 1_000_000)
    args.keys = args.keys or (50_000 if args.quick else 100_000)
    args.latency_seconds = args.latency_seconds or (15.0 if args.quick else 30.0)
    args.recovery_keys = args.recovery_keys or (200_000 if args.quick else 1_000_000)
    args.task_records = [int(x) for x in str(args.task_records).split(",") if x]
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")

    real_stdout = bench_run.json_only_stdout()
    result: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "child"},
        "targets": TARGETS,
        "topology": "streamtable.testing._crash_app.crash_topology: echo (Python map_values, "
        "stateless) -> echo topic; group_by_key().reduce(sum) (Python fold, transformWithState "
        "with paged RocksDB state) -> sums topic; two Spark queries, each reading the input",
        "method": {
            "throughput": "records_per_s = input records / (start() -> await_caught_up), fresh "
            "application.id and state folder per run, one warm Spark session, topic production "
            "excluded; steady_records_per_s = per query, rows / triggerExecution time of the "
            "data batches after the first, then the slower query",
            "sinks": "at_least_once: Spark's Kafka sink (JVM producer); exactly_once_v2: "
            "streamtable's foreachBatch sink (confluent-kafka from Python workers, one "
            "transaction per task and batch)",
        },
        "machine_load_at_start": {
            "loadavg": _load(),
            "busiest_other_processes": _other_processes(),
        },
    }
    from streamtable.broker import EmbeddedKafka
    from streamtable.runtime.spark import get_spark

    t_all = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="streamtable-bench-eos-"))
    spark = None
    try:
        with EmbeddedKafka() as kafka:
            bs = kafka.bootstrap_servers
            if "task_cost" in sections:
                result["task_cost"] = bench_task_cost(args, bs)
            if "throughput" in sections or "latency" in sections:
                t0 = time.monotonic()
                # spark.* entries of --config: the session is created here, once
                spark = get_spark({k: v for k, v in args.config.items() if k.startswith("spark.")})
                result["spark_startup_s"] = round(time.monotonic() - t0, 2)
                if "throughput" in sections:
                    result["throughput"] = bench_throughput(args, bs, tmp)
                if "latency" in sections:
                    result["latency"] = bench_latency(args, bs, tmp)
                result["machine"] = bench_run.machine_info(spark)
                # before the recovery runs, which start their own Spark: free the cores/memory
                spark.stop()
                spark = None
            if "recovery" in sections:
                result["recovery"] = bench_recovery(args, bs, tmp)
            if "machine" not in result:
                result["machine"] = bench_run.machine_info(None)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["machine_load_at_end"] = {
        "loadavg": _load(),
        "busiest_other_processes": _other_processes(),
    }
    result["total_wall_s"] = round(time.monotonic() - t_all, 1)
    bench_run.print_result(result, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
