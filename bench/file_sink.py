"""The Parquet sink, side by side: ``KStream.to_files`` vs Spark's plain file sink on the same
stream (the same topic, the same columns), one broker, one Spark session.

Preloads ``--records`` JSON trade events into ``fs-in`` (4 partitions); then, alternating which
engine goes first, ``--repeat`` times:

- streamtable: ``stream(value_serde=Serdes.json(schema)).to_files(path, partition_by="date")``
  under ``trigger=available_now`` (one application per run);
- plain PySpark: Kafka source → ``from_json`` of the value with the same schema → key as
  string, the fields, timestamp, date, topic, partition, offset → ``writeStream.parquet`` with
  ``partitionBy("date")``, ``trigger(availableNow=True)``.

Both read ``streamtable.max.offsets.per.trigger`` records per micro-batch. Wall time is from
the query's start to its end, rows are counted back through each sink's log. Prints one JSON
object: per engine the median records/s, every run, and the overhead of ``to_files``.

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


def run_streamtable(bootstrap: str, out: Path, state: Path) -> float:
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
    finally:
        app.close()
    return time.monotonic() - start


def run_plain(spark, bootstrap: str, out: Path, state: Path) -> float:  # noqa: ANN001
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
    return time.monotonic() - start


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
                    wall = run_streamtable(bs, out, state)
                else:
                    wall = run_plain(spark, bs, out, state)
                rows = read_files(out, columns=["offset"]).num_rows
                runs[engine].append(
                    {"wall_s": round(wall, 2), "rows": rows, "records_per_s": round(rows / wall)}
                )
                print(f"{engine} run {r}: {runs[engine][-1]}", file=sys.stderr)
                shutil.rmtree(work, ignore_errors=True)
    medians = {e: statistics.median(x["records_per_s"] for x in v) for e, v in runs.items()}
    result = {
        "benchmark": "file_sink",
        "records": args.records,
        "partitions": PARTITIONS,
        "records_per_batch": BATCH,
        "median_records_per_s": medians,
        "to_files_overhead": round(1 - medians["streamtable"] / medians["plain"], 3),
        "target_overhead": 0.10,
        "runs": runs,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
