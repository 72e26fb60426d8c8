"""Interactive queries: point lookups and range scans on a count store while the app ingests.

streamtable only so far (the side-by-side run against Kafka Streams' own IQ is still to come).
Preloads ``--keys`` distinct keys, starts ``count(name="counts")``, waits until the store
reflects the preload, then for ``--seconds`` ingests ``--rate`` records/s from a producer
thread while one client thread does ``store.get(random key)`` as fast as it can, then range
scans of 1,000 keys. Prints JSON: lookups/s, latency percentiles (ms), ingest rate achieved,
store lag (input records not yet reflected, sampled each second).

    python bench/interactive_queries.py --quick
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from datetime import timedelta

from confluent_kafka import Consumer, Producer, TopicPartition

from streamtable import (
    KafkaStreams,
    Position,
    PositionBound,
    QueryableStoreTypes,
    Serdes,
    StoreQueryParameters,
    StreamsBuilder,
)
from streamtable.broker import EmbeddedKafka
from streamtable.demo._harness import ensure_topics

PARTITIONS = 2


def ends(bs: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "iq-bench"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 3) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="100k keys, 10 s")
    a = ap.parse_args()
    if a.quick:
        a.keys, a.seconds = 100_000, 10
    keys = [f"k{i:07d}" for i in range(a.keys)]
    with EmbeddedKafka() as kafka, tempfile.TemporaryDirectory() as state:
        bs = kafka.bootstrap_servers
        ensure_topics(bs, {"iq-in": PARTITIONS, "iq-out": PARTITIONS})
        producer = Producer(
            {"bootstrap.servers": bs, "linger.ms": 20, "partitioner": "murmur2_random"}
        )
        t0 = time.monotonic()
        for k in keys:
            while True:
                try:
                    producer.produce("iq-in", key=k.encode(), value=b"x")
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush()
        preload_s = time.monotonic() - t0

        s = Serdes.string()
        b = StreamsBuilder()
        b.stream("iq-in", key_serde=s, value_serde=s).group_by_key().count(
            name="counts"
        ).to_stream().to("iq-out", key_serde=s, value_serde=Serdes.long())
        app = KafkaStreams(
            b.build(),
            {"application.id": "iq-bench", "bootstrap.servers": bs, "state.dir": state},
        )
        t0 = time.monotonic()
        app.start()
        try:
            store = app.store(
                StoreQueryParameters.from_name_and_type(
                    "counts", QueryableStoreTypes.key_value_store()
                )
            )
            bound = Position.empty()
            for p, end in ends(bs, "iq-in").items():
                bound = bound.with_component("iq-in", p, end - 1)
            store.wait_for(PositionBound.at(bound), timeout=timedelta(minutes=30))
            load_s = time.monotonic() - t0

            stop = threading.Event()
            ingested = [0]
            lags: list[int] = []

            def ingest() -> None:
                start = time.monotonic()
                while not stop.is_set():
                    due = int((time.monotonic() - start) * a.rate)
                    while ingested[0] < due:
                        try:
                            producer.produce("iq-in", key=random.choice(keys).encode(), value=b"x")
                            ingested[0] += 1
                        except BufferError:
                            producer.poll(0.01)
                    producer.poll(0)
                    time.sleep(0.005)
                producer.flush()

            def sample_lag() -> None:
                while not stop.wait(1.0):
                    pos = store.position()
                    lags.append(
                        sum(
                            end - 1 - pos.get(("iq-in", p), -1)
                            for p, end in ends(bs, "iq-in").items()
                        )
                    )

            threads = [threading.Thread(target=ingest), threading.Thread(target=sample_lag)]
            for t in threads:
                t.start()
            lookups: list[float] = []
            t_start = time.monotonic()
            while time.monotonic() - t_start < a.seconds:
                k = random.choice(keys)
                t1 = time.perf_counter()
                store.get(k)
                lookups.append(time.perf_counter() - t1)
            lookup_s = time.monotonic() - t_start
            scans: list[float] = []
            t_start = time.monotonic()
            while time.monotonic() - t_start < min(a.seconds, 10):
                i = random.randrange(0, max(1, a.keys - 1000))
                t1 = time.perf_counter()
                store.range(keys[i], keys[i + 999])
                scans.append(time.perf_counter() - t1)
            ingest_s = time.monotonic() - t_start + lookup_s
            stop.set()
            for t in threads:
                t.join()
        finally:
            app.close()
    print(
        json.dumps(
            {
                "engine": "streamtable",
                "keys": a.keys,
                "preload_produce_s": round(preload_s, 1),
                "start_to_store_loaded_s": round(load_s, 1),
                "lookups": len(lookups),
                "lookups_per_s": round(len(lookups) / lookup_s),
                "lookup_p50_ms": pct(lookups, 0.5),
                "lookup_p99_ms": pct(lookups, 0.99),
                "lookup_max_ms": pct(lookups, 1.0),
                "range_1000_scans": len(scans),
                "range_1000_p50_ms": pct(scans, 0.5),
                "range_1000_p99_ms": pct(scans, 0.99),
                "ingest_target_per_s": a.rate,
                "ingest_achieved_per_s": round(ingested[0] / ingest_s),
                "store_lag_records_median": statistics.median(lags) if lags else None,
                "store_lag_records_max": max(lags) if lags else None,
            }
        )
    )


if __name__ == "__main__":
    main()
