"""The Parquet sink, side by side: ``KStream.to_files`` vs Spark's plain file sink on the same
stream (the same topic, the same columns), one broker, one Spark session.

Preloads ``--records`` JSON trade events into ``fs-in`` (4 partitions); then, alternating which
engine goes first, ``--repeat`` times:

- streamtable: ``stream(value_serde=Serdes.json(schema)).to_files(path, partition_by="date")``
  under ``trigger=available_now`` (one application per run);
- plain PySpark: Kafka source → ``from_json`` of the value with the same schema → key as
  string, the fields, timestamp, date, topic, partition, offset → ``writeStream.parquet`` with
  ``partitionBy("date")``, ``trigger(availableNow=True)``.

Both read ``streamtable.max.offsets.per.trigger`` records per micro-batch. Two times per run:
``wall_s`` from the application's (the query's) start to its end, start-up included, and
``batches_s``, the sum of the micro-batches' ``triggerExecution`` durations from Spark's query
progress (the sink's own work, without the fixed start-up). Rows are counted back through each
sink's log. Prints one JSON object: per engine the median records/s by each time, every run,
and the overhead of ``to_files`` by each.

    python bench/file_sink.py --records 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

SCHEMA = {"player": "string", "amount": "double", "item": "string", "trade_id": "long"}
TOPIC = "fs-in"
PARTITIONS = 4
BATCH = 200_000


def produce(bootstrap: str, n: int) -> None:
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records

    ensure_topics(bootstrap, {TOPIC: PARTITIONS}, recreate=True)
    t0 = 1_795_000_000_000
    records = (
        (
            f"p{i % 50_000:05d}".encode(),
            json.dumps(
                {
                    "player": f"p{i % 50_000:05d}",
                    "amount": i % 997 * 1.5,
                    "item": f"i{i % 13}",
                    "trade_id": i,
                }
            ).encode(),
            t0 + i * 10,
        )
        for i in range(n)
    )
    produce_records(bootstrap, TOPIC, records)


def batches_seconds(query) -> float:  # noqa: ANN001
    """Sum of the query's micro-batch durations (``durationMs.triggerExecution``), in s."""
    return sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress) / 1000


def run_streamtable(bootstrap: str, out: Path, state: Path) -> tuple[float, float]:
    from streamtable import KafkaStreams, Serdes, StreamsBuilder

    b = StreamsBuilder()
    b.stream(TOPIC, key_serde=Serdes.string(), value_serde=Serdes.json(SCHEMA)).to_files(
        out, partition_by="date"
    )
    app = KafkaStreams(
        b.build(),
        {
            "application.id": f"fs-bench-{time.time_ns()}",
            "bootstrap.servers": bootstrap,
            "state.dir": str(state),
            "streamtable.trigger": "available_now",
            "streamtable.shuffle.partitions": 2,
            "streamtable.max.offsets.per.trigger": BATCH,
        },
    )
    start = time.monotonic()
    app.start()
    try:
        app.await_caught_up(timedelta_minutes(30))
        wall = time.monotonic() - start
        # the application's queries (private: a benchmark reads Spark's progress directly)
        batches = sum(batches_seconds(q) for q in app._queries)
    finally:
        app.close()
    return wall, batches


def run_plain(spark, bootstrap: str, out: Path, state: Path) -> tuple[float, float]:  # noqa: ANN001
    from pyspark.sql import functions as F

    from streamtable.serde import Serdes

    ddl = Serdes.json(SCHEMA).spark_ddl()
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(BATCH))
        .load()
    )
    parsed = F.from_json(F.col("value").cast("string"), ddl)
    rows = df.select(
        F.col("key").cast("string").alias("key"),
        *[parsed.getField(c).alias(c) for c in SCHEMA],
        F.col("timestamp"),
        F.to_date(F.col("timestamp")).alias("date"),
        "topic",
        "partition",
        "offset",
    )
    start = time.monotonic()
    q = (
        rows.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(state / "plain-checkpoint"))
        .partitionBy("date")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return time.monotonic() - start, batches_seconds(q)


def timedelta_minutes(m: int):  # noqa: ANN201
    from datetime import timedelta

    return timedelta(minutes=m)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from streamtable.broker import EmbeddedKafka
    from streamtable.files import read_files
    from streamtable.runtime.spark import get_spark

    runs: dict[str, list[dict[str, float]]] = {"streamtable": [], "plain": []}
    with EmbeddedKafka() as kafka:
        bs = kafka.bootstrap_servers
        produce(bs, args.records)
        spark = get_spark({})
        for r in range(args.repeat):
            order = ["streamtable", "plain"] if r % 2 == 0 else ["plain", "streamtable"]
            for engine in order:
                work = Path(tempfile.mkdtemp(prefix=f"fs-bench-{engine}-"))
                out, state = work / "out", work / "state"
                if engine == "streamtable":
                    wall, batches = run_streamtable(bs, out, state)
                else:
                    wall, batches = run_plain(spark, bs, out, state)
                rows = read_files(out, columns=["offset"]).num_rows
                runs[engine].append(
                    {
                        "wall_s": round(wall, 2),
                        "batches_s": round(batches, 2),
                        "rows": rows,
                        "records_per_s": round(rows / wall),
                        "records_per_batch_s": round(rows / batches),
                    }
                )
                print(f"{engine} run {r}: {runs[engine][-1]}", file=sys.stderr)
                shutil.rmtree(work, ignore_errors=True)

    def median(field: str) -> dict[str, float]:
        return {e: statistics.median(x[field] for x in v) for e, v in runs.items()}

    wall, in_batches = median("records_per_s"), median("records_per_batch_s")
    result = {
        "benchmark": "file_sink",
        "records": args.records,
        "partitions": PARTITIONS,
        "records_per_batch": BATCH,
        "median_records_per_s": wall,
        "median_records_per_batch_s": in_batches,
        "to_files_overhead": round(1 - wall["streamtable"] / wall["plain"], 3),
        "to_files_overhead_in_batches": round(
            1 - in_batches["streamtable"] / in_batches["plain"], 3
        ),
        "target_overhead": 0.10,
        "runs": runs,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
