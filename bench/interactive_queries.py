"""Interactive queries, side by side: point lookups and 1,000-key range scans on a count store
while the app ingests, in streamtable (Python, and over HTTP) and in Kafka Streams (its own IQ,
RocksDB store), on the same broker and the same preloaded input.

Preloads ``--keys`` distinct keys into ``iq-in``; then, per engine in turn: starts
``count(name="counts")``, waits until the store holds the preload, then for ``--seconds``
ingests ``--rate`` records/s from a producer thread while one client thread does
``store.get(random key)`` as fast as it can, then range scans of 1,000 keys for up to 10 s.
streamtable also answers HTTP lookups (``GET /stores/counts/keys/{key}``, one httpx client,
keep-alive) for up to 10 s. Prints one JSON object per engine and a summary.

    python bench/interactive_queries.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from datetime import timedelta
from typing import Any

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


class Ingest(threading.Thread):
    """Produces ``rate`` records/s of random known keys until stopped."""

    def __init__(self, bs: str, keys: list[str], rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {"bootstrap.servers": bs, "linger.ms": 20, "partitioner": "murmur2_random"}
        )
        self.keys, self.rate = keys, rate
        self.stop = threading.Event()
        self.sent = 0
        self.seconds = 0.0

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                try:
                    key = random.choice(self.keys).encode()
                    self.producer.produce("iq-in", key=key, value=b"x")
                    self.sent += 1
                except BufferError:
                    self.producer.poll(0.01)
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush()
        self.seconds = time.monotonic() - start


def preload(bs: str, keys: list[str]) -> float:
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 20, "partitioner": "murmur2_random"})
    t0 = time.monotonic()
    for k in keys:
        while True:
            try:
                producer.produce("iq-in", key=k.encode(), value=b"x")
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    return time.monotonic() - t0


def run_streamtable(bs: str, keys: list[str], a: argparse.Namespace) -> dict[str, Any]:
    import httpx

    s = Serdes.string()
    b = StreamsBuilder()
    b.stream("iq-in", key_serde=s, value_serde=s).group_by_key().count(
        name="counts"
    ).to_stream().to("iq-out", key_serde=s, value_serde=Serdes.long())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    with tempfile.TemporaryDirectory() as state:
        app = KafkaStreams(
            b.build(),
            {
                "application.id": "iq-bench-streamtable",
                "bootstrap.servers": bs,
                "state.dir": state,
                "application.server": address,
            },
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
            ingest = Ingest(bs, keys, a.rate)
            lags: list[int] = []

            def sample_lag() -> None:
                while not ingest.stop.wait(1.0):
                    pos = store.position()
                    lags.append(
                        sum(
                            end - 1 - pos.get(("iq-in", p), -1)
                            for p, end in ends(bs, "iq-in").items()
                        )
                    )

            lagger = threading.Thread(target=sample_lag, daemon=True)
            ingest.start()
            lagger.start()
            lookups = timed(lambda: store.get(random.choice(keys)), a.seconds)
            scans = timed(lambda: range_scan(store, keys, a.keys), min(a.seconds, 10))
            with httpx.Client(base_url=f"http://{address}", timeout=30) as http:
                http_lookups = timed(
                    lambda: http.get(
                        f"/stores/counts/keys/{random.choice(keys)}"
                    ).raise_for_status(),
                    min(a.seconds, 10),
                )
            ingest.stop.set()
            ingest.join()
            lagger.join()
        finally:
            app.close()
    figures = figures_of("streamtable", a, load_s, lookups, scans, a.seconds)
    figures.update(
        {
            "http_lookups_per_s": round(len(http_lookups) / min(a.seconds, 10)),
            "http_lookup_p50_ms": pct(http_lookups, 0.5),
            "http_lookup_p99_ms": pct(http_lookups, 0.99),
            "ingest_achieved_per_s": round(ingest.sent / ingest.seconds),
            "store_lag_records_median": statistics.median(lags) if lags else None,
            "store_lag_records_max": max(lags) if lags else None,
        }
    )
    return figures


def range_scan(store: Any, keys: list[str], n: int) -> None:
    i = random.randrange(0, max(1, n - 1000))
    store.range(keys[i], keys[i + 999])


def timed(fn: Any, seconds: float) -> list[float]:
    out: list[float] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t1 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t1)
    return out


def figures_of(
    engine: str,
    a: argparse.Namespace,
    load_s: float,
    lookups: list[float],
    scans: list[float],
    seconds: float,
) -> dict[str, Any]:
    return {
        "engine": engine,
        "keys": a.keys,
        "start_to_store_loaded_s": round(load_s, 1),
        "lookups": len(lookups),
        "lookups_per_s": round(len(lookups) / seconds),
        "lookup_p50_ms": pct(lookups, 0.5),
        "lookup_p99_ms": pct(lookups, 0.99),
        "lookup_max_ms": pct(lookups, 1.0),
        "range_1000_scans": len(scans),
        "range_1000_p50_ms": pct(scans, 0.5),
        "range_1000_p99_ms": pct(scans, 0.99),
    }


def run_kafka_streams(bs: str, keys: list[str], a: argparse.Namespace) -> dict[str, Any]:
    """Kafka Streams' own IQ (``IqBench.java``), the same ingest running meanwhile."""
    from streamtable.reference.kafka_streams import classpath
    from streamtable.runtime import jars

    with tempfile.TemporaryDirectory() as state:
        cmd = [
            jars.java_executable(),
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            os.pathsep.join(map(str, classpath())),
            "io.streamtable.reference.IqBench",
            *("--bootstrap-servers", bs, "--application-id", "iq-bench-kafka-streams"),
            *("--state-dir", state, "--input", "iq-in", "--output", "iq-out-ks"),
            *("--keys", str(a.keys), "--seconds", str(a.seconds), "--store", a.ks_store),
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        ingest = Ingest(bs, keys, a.rate)
        result: dict[str, Any] = {}
        for line in proc.stdout:
            if line.strip() == "ready":
                ingest.start()
            elif line.startswith("{"):
                result = json.loads(line)
        proc.wait(timeout=120)
        ingest.stop.set()
        if ingest.is_alive():
            ingest.join()
    if ingest.seconds:
        result["ingest_achieved_per_s"] = round(ingest.sent / ingest.seconds)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--ks-store", choices=("rocksdb", "memory"), default="rocksdb")
    ap.add_argument("--quick", action="store_true", help="100k keys, 10 s")
    a = ap.parse_args()
    if a.quick:
        a.keys, a.seconds = 100_000, 10
    keys = [f"k{i:07d}" for i in range(a.keys)]
    with EmbeddedKafka() as kafka:
        bs = kafka.bootstrap_servers
        ensure_topics(bs, {"iq-in": PARTITIONS, "iq-out": PARTITIONS, "iq-out-ks": PARTITIONS})
        preload_s = preload(bs, keys)
        ours = run_streamtable(bs, keys, a)
        print(json.dumps(ours), flush=True)
        theirs = run_kafka_streams(bs, keys, a)
        print(json.dumps(theirs), flush=True)
    print(
        json.dumps(
            {
                "summary": "interactive queries, streamtable vs Kafka Streams",
                "preload_produce_s": round(preload_s, 1),
                "lookup_p99_ms": [ours["lookup_p99_ms"], theirs.get("lookup_p99_ms")],
                "lookups_per_s": [ours["lookups_per_s"], theirs.get("lookups_per_s")],
                "range_1000_p99_ms": [ours["range_1000_p99_ms"], theirs.get("range_1000_p99_ms")],
                "http_lookup_p99_ms": ours["http_lookup_p99_ms"],
            }
        )
    )


if __name__ == "__main__":
    main()
