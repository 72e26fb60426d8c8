#!/usr/bin/env python
"""End-to-end latency of a stateless topology: micro-batches with Python callables, with column
expressions, and Spark's real-time mode.

One embedded broker; per mode a fresh application on its own topics (2 partitions), started
and given a first record, then ``--rate`` records/s (String key, String value = the produce
time in ms, in decimal) for ``--seconds``. The topology parses the value into a Long and
keeps it — ``filter(value >= 0)``, ``map_values(int(value))`` — as Python callables or as column
expressions (String sources need no Python, which real-time mode requires); a
``read_committed`` consumer of the output (``fetch.wait.max.ms=10``, polling every 2 ms, started
before the load) takes latency = its receive wall time − the value (same clock). Modes:

- ``callables``: Python callables, micro-batches every ``--commit-interval-ms`` (100);
- ``columns``: column expressions (Spark SQL), micro-batches every ``--commit-interval-ms``;
- ``real_time``: column expressions, ``streamtable.trigger=real_time`` (Spark's real-time
  mode; batch duration 5 s, the shortest Spark allows; records processed as they arrive).

- ``kstreams``: the same topology in Kafka Streams (``ReferenceApp`` ``latency-echo``: one
  stream thread, ``--commit-interval-ms``, no record cache), for reference;
- ``keyed``: a keyed aggregation, Python callables, micro-batches: the parsed value's maximum
  per key (``reduce(max)``, ``twins.latency_max``) — like a keyed count, one state update and
  one output per record, and its output value is still a produce time;
- ``keyed_columns``: the same keyed topology as a column expression and the built-in
  ``Reducers.max()`` (``twins.latency_max(columns=True)``), which streamtable runs as Spark's
  own cast and aggregation (no Python worker);
- ``kstreams_keyed``: the same in Kafka Streams (``ReferenceApp`` ``latency-max``);
- ``keyed_count``: a keyed ``count()`` (``twins.latency_count``), which streamtable runs as
  Spark's own aggregation (no Python worker);
- ``kstreams_keyed_count``: the same in Kafka Streams (``ReferenceApp`` ``latency-count``).

A count's output value is no produce time, and under ``at_least_once`` streamtable's output
records carry their write time (Spark's Kafka sink cannot set timestamps), so the count modes
take the latency from the producer's own log: the update ``(k, n)`` answers the n-th record
of key ``k`` (the newest of those it counts when updates of a micro-batch merged), whose
produce time the producer noted.

The keyed modes take their keys round-robin from ``KEYED_KEYS`` keys, so a key recurs every
2 s at 5,000 records/s: a micro-batch (which emits one update per key, as Kafka Streams'
record cache would) shorter than that holds one record per key, and every record comes out.

All under ``at_least_once`` (real-time mode writes through Spark's Kafka sink). Prints ONE JSON
object (p50/p95/p99/max per mode, whether every record arrived, and the CPU each process used
while measured: ``cpu.cores`` per process kind, ``cpu.jit_cores`` the part the JVMs spent in
their just-in-time compilers, ``cpu.machine_busy_fraction`` over all CPUs); logs go to stderr.
Never asserts timings.

With ``--warmup-s W`` every mode first runs the same load for W seconds, not measured (the
JVMs' just-in-time compilers warm up meanwhile; Spark's still took a third of a core a minute
into a keyed run): the figures are then a long-running application's.

    python bench/latency.py [--rate N] [--seconds S] [--warmup-s W] [--modes a,b]
        [--commit-interval-ms MS] [--shuffle-partitions N]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eos  # noqa: E402  (bench/eos.py: the latency collector and the paced producer)
import run as bench_run  # noqa: E402

log = logging.getLogger("bench.latency")

MODES = (
    "callables",
    "columns",
    "real_time",
    "kstreams",
    "keyed",
    "keyed_columns",
    "kstreams_keyed",
    "keyed_count",
    "kstreams_keyed_count",
)
#: Keys of the keyed modes, taken round-robin (see the module doc).
KEYED_KEYS = 10_000
#: The modes that run the keyed topology.
KEYED_MODES = (
    "keyed",
    "keyed_columns",
    "kstreams_keyed",
    "keyed_count",
    "kstreams_keyed_count",
)
#: The modes whose latency comes from the producer's log (see the module doc).
COUNT_MODES = ("keyed_count", "kstreams_keyed_count")
#: The Kafka Streams modes and the ``ReferenceApp`` topology each runs.
KSTREAMS_MODES = {
    "kstreams": "latency-echo",
    "kstreams_keyed": "latency-max",
    "kstreams_keyed_count": "latency-count",
}
PARTITIONS = 2
TARGETS = {"micro_batch_p99_ms_max": 500, "real_time_p99_ms_max": 50}


def run_mode(args: argparse.Namespace, bs: str, tmp: Path, mode: str) -> dict[str, Any]:
    """One mode's latency figures."""
    from streamtable import KafkaStreams
    from streamtable.demo._harness import ensure_topics
    from streamtable.reference.twins import latency_count, latency_echo, latency_max

    app_id = f"bench-latency-{mode.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app_id}-in", f"{app_id}-out"
    ensure_topics(bs, {source: PARTITIONS, sink: PARTITIONS})
    keys = [f"k{i:05d}".encode() for i in range(1000)]
    config: dict[str, Any] = {
        "application.id": app_id,
        "bootstrap.servers": bs,
        "state.dir": tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp),
        "commit.interval.ms": args.commit_interval_ms,
    }
    if mode == "real_time":
        config["streamtable.trigger"] = "real_time"
    if args.shuffle_partitions is not None:
        config["streamtable.shuffle.partitions"] = args.shuffle_partitions
    config.update(args.app_config)
    since_ms = int(time.time() * 1000)
    collector = (
        _CountCollector(bs, sink, since_ms, poll_s=0.002)
        if mode in COUNT_MODES
        else eos._Collector(bs, sink, since_ms, poll_s=0.002)
    )
    collector.start()
    with contextlib.ExitStack() as running:
        # also when the app fails to start (last in, first out: stop, then wait)
        running.callback(collector.join, 30)
        running.callback(collector.stop_event.set)
        if mode in KSTREAMS_MODES:
            from streamtable.reference.kafka_streams import started_reference

            running.enter_context(
                started_reference(
                    KSTREAMS_MODES[mode],
                    bootstrap_servers=bs,
                    application_id=app_id,
                    params={"input": source, "output": sink},
                    state_dir=config["state.dir"],
                    config={"commit.interval.ms": str(args.commit_interval_ms)},
                )
            )
            queries: list[Any] = []
        else:
            if mode in ("keyed", "keyed_columns"):
                topology = latency_max(source, sink, columns=mode == "keyed_columns")
            elif mode == "keyed_count":
                topology = latency_count(source, sink)
            else:
                topology = latency_echo(source, sink, columns=mode != "callables")
            app = KafkaStreams(topology, config)
            app.start()
            running.callback(app.close)
            queries = app.queries
        return _measure(args, bs, source, keys, collector, mode, since_ms, queries)


class _CountCollector(eos._Collector):
    """The latency of a count's updates: the update ``(k, n)`` answers the n-th record of key
    ``k``, whose produce time :meth:`produced` noted (the producer calls it right after handing
    the record to its client, long before the application can count it). ``received`` is the
    number of records produced at or after ``since_ms`` (when counted) that the updates so far
    have counted.
    """

    def __init__(self, bs: str, topic: str, since_ms: int, poll_s: float) -> None:
        super().__init__(bs, topic, since_ms, poll_s)
        self.times: dict[bytes, list[int]] = {}
        self._counted: dict[bytes, int] = {}
        self._covered = 0

    def produced(self, key: bytes, ms: int) -> None:
        """Note the produce time of the next record of ``key``."""
        self.times.setdefault(key, []).append(ms)

    def _take(self, m: Any, now_ms: float) -> None:
        key, n = m.key(), struct.unpack(">q", m.value())[0]
        before = self._counted.get(key, 0)
        if n <= before:  # an update written again (at least once): no new record
            return
        # records before..n-1 of the key are counted now; the newest answers
        times = self.times.get(key, [])
        self._counted[key] = n
        self._covered += sum(t >= self.since_ms for t in times[before:n])
        if n <= len(times) and times[n - 1] >= self.since_ms:
            self.latencies_ms.append(now_ms - times[n - 1])

    @property
    def received(self) -> int:
        return self._covered


def _measure(
    args: argparse.Namespace,
    bs: str,
    source: str,
    keys: list[bytes],
    collector: Any,
    mode: str,
    since_ms: int,
    queries: list[Any],
) -> dict[str, Any]:
    """Feed the running app ``--rate`` records/s and take the collector's latencies."""
    from streamtable.demo.flights_data import produce_records
    from streamtable.runtime.progress import parse_timestamp

    try:
        on_produce = getattr(collector, "produced", None)
        if on_produce is not None:
            on_produce(keys[0], since_ms)
        # a first record through the whole path: the query (or its real-time tasks) is running
        produce_records(bs, source, [(keys[0], str(since_ms).encode(), since_ms)])
        deadline = time.monotonic() + 120
        while collector.received < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        warm, first = collector.received, len(collector.latencies_ms)
        if not warm:
            raise RuntimeError(f"{mode}: the first record did not come through within 120 s")
        keyed = mode in KEYED_MODES

        def load(seconds: float) -> tuple[int, float]:
            return eos._produce_at_rate(
                bs,
                source,
                keys,
                args.rate,
                seconds,
                encode=lambda ms: str(ms).encode(),
                key_for=(lambda i: b"k%05d" % (i % KEYED_KEYS)) if keyed else None,
                on_produce=on_produce,
            )

        if args.warmup_s > 0:
            # the same load, not measured: the JVMs compile their hot code meanwhile (Spark's
            # C2 compiler thread still took a third of a core after a minute); records
            # produced before the measured load starts are not counted even when they
            # arrive during it
            load(args.warmup_s)
            collector.since_ms = int(time.time() * 1000)
            warm, first = collector.received, len(collector.latencies_ms)
        cpu_before = bench_run.cpu_snapshot()
        sent, took = load(args.seconds)
        cpu = bench_run.cpu_figures(cpu_before, bench_run.cpu_snapshot())
        deadline = time.monotonic() + args.drain_timeout_s
        while collector.received < sent + warm and time.monotonic() < deadline:
            time.sleep(0.05)
        drained = collector.received >= sent + warm
        # the micro-batches that started after the warm-up
        progresses = [
            p
            for q in queries
            for p in q.recentProgress
            if (parse_timestamp(p.timestamp) or 0) >= collector.since_ms
        ]
    finally:
        collector.stop_event.set()
        collector.join(30)
    lat = collector.latencies_ms[first:]
    batches = [int(p.durationMs.get("triggerExecution", 0)) for p in progresses if p.numInputRows]
    return {
        "produced": sent,
        "offered_rate_per_s": round(sent / took),
        "received": len(lat),
        # below 1 the percentiles miss records (keyed modes: a micro-batch longer than a
        # key's period merged two updates, the older one, with the larger latency, is gone)
        "received_fraction": round(len(lat) / sent, 4) if sent else None,
        "all_received": drained,
        "latency_ms": {
            "p50": round(eos._pct(lat, 0.50)),
            "p95": round(eos._pct(lat, 0.95)),
            "p99": round(eos._pct(lat, 0.99)),
            "max": round(max(lat)) if lat else None,
            "mean": round(statistics.fmean(lat)) if lat else None,
        },
        "batch_ms_median": statistics.median(batches) if batches else None,
        "batch_breakdown_ms_median": _breakdown(progresses),
        # the machine's load while measured: on 2 cores, a busy fraction near 1 means tasks
        # wait for a core, and the JVMs' just-in-time compilers are part of that load
        "cpu": cpu,
    }


def _breakdown(progresses: list[Any]) -> dict[str, float] | None:
    """Medians over the micro-batches that read records: each ``durationMs`` phase, the
    records read, and the state operators' update and commit times (summed over operators).
    """
    data = [p for p in progresses if p.numInputRows]
    if not data:
        return None
    columns: dict[str, list[float]] = {"records": [float(p.numInputRows) for p in data]}
    for p in data:
        for phase, ms in p.durationMs.items():
            columns.setdefault(phase, []).append(float(ms))
    if any(p.stateOperators for p in data):
        columns["state_updates"] = [
            float(sum(o.allUpdatesTimeMs for o in p.stateOperators)) for p in data
        ]
        columns["state_commit"] = [
            float(sum(o.commitTimeMs for o in p.stateOperators)) for p in data
        ]
    return {k: statistics.median(v) for k, v in sorted(columns.items())}


def _positive_int(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=float, default=5000, help="records/s (default 5000)")
    ap.add_argument("--seconds", type=float, default=20, help="load duration (default 20)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"subset of {','.join(MODES)}")
    ap.add_argument("--commit-interval-ms", type=int, default=100, help="micro-batch trigger")
    ap.add_argument("--drain-timeout-s", type=float, default=60)
    ap.add_argument(
        "--warmup-s",
        type=float,
        default=0,
        help="seconds of the same load before the measured --seconds, not measured (default 0)",
    )
    ap.add_argument(
        "--shuffle-partitions",
        type=_positive_int,
        default=None,
        help="streamtable.shuffle.partitions of the streamtable modes: the keyed modes' state "
        "partitions (default: streamtable's, 4)",
    )
    ap.add_argument(
        "--app-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the streamtable modes' application config (e.g. "
        "consumer.fetch.max.wait.ms=50), for A/B runs; repeatable",
    )
    bench_run.add_spark_config_option(ap)
    args = ap.parse_args(argv)
    spark_conf = bench_run.spark_config(ap, args)
    args.app_config = bench_run.key_values(ap, args.app_config, "--app-config")
    # every measured micro-batch in the breakdown (Spark keeps the last 100 reports by default)
    spark_conf.setdefault("spark.sql.streaming.numRecentProgressUpdates", "2000")
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        ap.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    real_stdout = bench_run.json_only_stdout()

    from streamtable.broker import EmbeddedKafka
    from streamtable.runtime.spark import get_spark

    result: dict[str, Any] = {"args": vars(args), "targets": TARGETS}
    tmp = Path(tempfile.mkdtemp(prefix="streamtable-bench-latency-"))
    with EmbeddedKafka() as kafka:
        # the session is made here, once: every streamtable mode runs on it
        spark = get_spark(spark_conf)
        result["modes"] = {}
        for mode in modes:
            r = run_mode(args, kafka.bootstrap_servers, tmp, mode)
            log.info("%s: %s", mode, r["latency_ms"])
            result["modes"][mode] = r
        result["machine"] = bench_run.machine_info(spark)
        spark.stop()
    bench_run.print_result(result, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
