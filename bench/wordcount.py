#!/usr/bin/env python
"""WordCount side by side: streamtable, hand-written PySpark, Kafka Streams and Quix Streams.

One embedded broker, one input topic — synthetic text (``generate_text``, seed 42, ~500-word
Zipf vocabulary), one line per record, null keys, 2 partitions — read by every engine; each run
writes its own output topic (word → 8-byte big-endian count). Engines take turns in an order
that rotates with each repeat; medians of ``--repeat`` runs.

- ``streamtable``: ``streamtable.demo.wordcount.build_topology`` (``KafkaStreams``, default 1 s
  trigger, ``streamtable.shuffle.partitions=2``), in this process's Spark session.
- ``streamtable_columns``: the same topology with its tokenizer and grouping as column
  expressions (``build_topology(columns=True)``: Spark SQL, no Python stage).
- ``plain_pyspark``: ``bench/run.py``'s ``plain_wordcount`` in the same session.
- ``kstreams_rocksdb`` / ``kstreams_memory``: Kafka's ``WordCountDemo`` topology
  (``ReferenceApp`` ``wordcount``) with a RocksDB / in-memory store and the demo's
  ``statestore.cache.max.bytes=0`` (every update written), one stream thread,
  ``commit.interval.ms=100`` (the reference runner's).
- ``kstreams_rocksdb_cached``: the same with Kafka Streams' default 10 MB record cache and
  ``commit.interval.ms=1000`` — at most one update per word per second, like streamtable's one
  per word per micro-batch (the design's record-cache rule): the like-for-like comparison.
- ``quix``: Quix Streams (``QUIX_VERSION``, its own virtual environment under
  ``~/.cache/streamtable/peers``, made on first use with pip) running ``bench/quix_wordcount.py``,
  ``commit_interval=1`` s, string keys and values in its repartition topic.

Figures per engine: ``processing_s`` from the engine being up (streamtable and PySpark: the
return of ``start()``; Kafka Streams: state ``RUNNING``; Quix: just before
``Application.run()``) until its consumer group or query has committed the input's end
offsets (and those of its repartition topics); ``total_s`` adds the start-up.
``words_per_s = words / processing_s``; ratios are streamtable's rate over each engine's. Every
output's final counts are checked against the expected counts.

Prints ONE JSON object on stdout; logs go to stderr. Never asserts timings.

    python bench/wordcount.py [--text-mb N] [--repeat N] [--engines a,b,...]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench_run  # noqa: E402  (bench/run.py: shared helpers)
from quix import QUIX_VERSION, quix_python, run_quix  # noqa: E402  (bench/quix.py)

log = logging.getLogger("bench.wordcount")

ENGINES = (
    "streamtable",
    "streamtable_columns",
    "plain_pyspark",
    "kstreams_rocksdb",
    "kstreams_memory",
    "kstreams_rocksdb_cached",
    "quix",
)
IN_TOPIC = "bench-wordcount-peers"
PARTITIONS = 2
TARGETS = {"vs_kstreams_min": 1.0, "vs_plain_pyspark_min": 1 / 1.5, "vs_quix_min": 3.0}


# --------------------------------------------------------------------------- the other engines


def _run_kstreams(bs: str, out_topic: str, store: str, cached: bool, tmp: Path) -> dict[str, Any]:
    from streamtable.reference.kafka_streams import run_reference

    app_id = f"bench-wc-ks-{uuid.uuid4().hex[:6]}"
    config = bench_run.KSTREAMS_CACHED_CONFIG if cached else {}
    r = run_reference(
        "wordcount",
        bootstrap_servers=bs,
        application_id=app_id,
        params={"input": IN_TOPIC, "output": out_topic, "store": store},
        input_topics=[IN_TOPIC],
        state_dir=tempfile.mkdtemp(prefix=f"{app_id}-", dir=tmp),
        timeout_s=bench_run.CATCH_UP_TIMEOUT_S,
        config=config,
    )
    total, startup = float(r["seconds"]), float(r["startup_seconds"])
    return {
        "total_s": round(total, 3),
        "startup_s": round(startup, 3),
        "processing_s": round(total - startup, 3),
    }


def _run_spark(spark: Any, engine: str, bs: str, out_topic: str, n: int, tmp: Path) -> dict:
    from streamtable.demo import wordcount

    tag = f"bench-wc-{uuid.uuid4().hex[:6]}"
    if engine.startswith("streamtable"):
        columns = engine == "streamtable_columns"
        topology = wordcount.build_topology(IN_TOPIC, out_topic, columns=columns)
        r = bench_run._run_streamtable(spark, bs, topology, tag, IN_TOPIC, n, tmp)
    else:
        build = bench_run.plain_wordcount(bs, IN_TOPIC, out_topic)
        r = bench_run._run_plain(spark, tag.replace("-", "_"), build, IN_TOPIC, n, bs, tmp)
    return bench_run.startup_split(r)


def run_engine(spark: Any, engine: str, bs: str, out_topic: str, n: int, tmp: Path) -> dict:
    if engine in ("streamtable", "streamtable_columns", "plain_pyspark"):
        return _run_spark(spark, engine, bs, out_topic, n, tmp)
    if engine == "quix":
        return run_quix("quix_wordcount.py", bs, IN_TOPIC, out_topic, tmp, repartitions=True)
    store = "memory" if engine == "kstreams_memory" else "rocksdb"
    return _run_kstreams(bs, out_topic, store, engine.endswith("_cached"), tmp)


# --------------------------------------------------------------------------- main


def bench(spark: Any, bs: str, tmp: Path, text_mb: float, repeat: int, engines: list[str]) -> dict:
    from streamtable.demo._harness import ensure_topics, read_topic

    text = bench_run.produce_text(bs, IN_TOPIC, text_mb)
    expected = dict(text.pop("expected"))
    n = text["words"]
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for i in range(repeat):
        order = engines[i % len(engines) :] + engines[: i % len(engines)]
        for engine in order:
            out = f"bench-wc-{engine}-{i}".replace("_", "-")
            ensure_topics(bs, {out: PARTITIONS}, recreate=True)
            r = run_engine(spark, engine, bs, out, n, tmp)
            counts = bench_run._final_counts(read_topic(bs, out))
            r["output_equals_expected"] = counts == expected
            r["words_per_s"] = round(n / r["processing_s"])
            runs[engine].append(r)
            log.info(
                "%s run %d: %.2f s processing, %d words/s",
                engine,
                i,
                r["processing_s"],
                r["words_per_s"],
            )
    summary: dict[str, Any] = {}
    for engine, rs in runs.items():
        s = bench_run._median([r["processing_s"] for r in rs])
        summary[engine] = {
            "processing_s": round(s, 3),
            "words_per_s": round(n / s),
            "startup_s": round(bench_run._median([r["startup_s"] for r in rs]), 3),
            "all_outputs_correct": all(r["output_equals_expected"] for r in rs),
            "runs": rs,
        }
    ratios = {}
    for mine in ("streamtable", "streamtable_columns"):
        if mine not in summary:
            continue
        st = summary[mine]["processing_s"]
        ratios.update(
            {
                f"{mine}_over_{e}": round(summary[e]["processing_s"] / st, 3)
                for e in summary
                if not e.startswith("streamtable")
            }
        )
    return {**text, "engines": summary, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--text-mb", type=float, default=20.0, help="input size in MB (default 20)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per engine (default 3)")
    ap.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated subset of {','.join(ENGINES)}",
    )
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        ap.error(f"unknown engines {unknown}; choose from {', '.join(ENGINES)}")
    real_stdout = bench_run.json_only_stdout()
    if "quix" in engines:
        quix_python()  # made before anything is timed
    if any(e.startswith("kstreams") for e in engines):
        from streamtable.reference.kafka_streams import classpath

        classpath()  # resolved and compiled before anything is timed

    from streamtable.broker import EmbeddedKafka
    from streamtable.runtime.spark import get_spark

    result: dict[str, Any] = {
        "args": {"text_mb": args.text_mb, "repeat": args.repeat, "engines": engines},
        "targets": TARGETS,
        "quix_version": QUIX_VERSION,
    }
    tmp = Path(tempfile.mkdtemp(prefix="streamtable-bench-wc-"))
    t_all = time.monotonic()
    try:
        with EmbeddedKafka() as kafka:
            bs = kafka.bootstrap_servers
            spark = get_spark({})
            # warm-up (discarded): JIT and Python workers are not charged to the first run
            warm = [
                e for e in engines if e in ("streamtable", "streamtable_columns", "plain_pyspark")
            ]
            if warm:
                bench(spark, bs, tmp, 0.5, 1, warm)
            result["wordcount"] = bench(spark, bs, tmp, args.text_mb, args.repeat, engines)
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
