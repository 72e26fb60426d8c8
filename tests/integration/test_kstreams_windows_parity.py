"""Parity of windowed aggregations: Kafka Streams (Java) and streamtable on the same input.

One Kafka Streams reference app (``ReferenceApp`` topology ``windowed-parity``, real Kafka
Streams 4.3.1) and its streamtable twin (:func:`streamtable.reference.twins.windowed_parity`)
read the same seeded input and each write their own output topics: per key and 5 s tumbling
window (2 s grace), a count and a ``"count:sum:max"`` aggregate, as updates and as
final results (``suppress(untilWindowCloses(unbounded()))``).

The input has out-of-order timestamps: most records a little behind the running time (within
the grace), some far behind (their window has closed: both engines must drop them). The keys
are grouped as they are (``group_by_key``, no repartition), so Kafka Streams' task stream time
is the stream time of one input partition, which is what streamtable tracks per source
partition. Two inputs: a single-partition topic and a 3-partition one whose keys are placed by
the Java default partitioner (murmur2). Each ends with one "flush" record per partition, an
hour after everything else, so that every real window closes on both sides (stream time only
advances with data).

Compared:

- the final table (last update per windowed key) of the update outputs; intermediate updates
  are not (Kafka Streams emits one per record here, streamtable one per window and batch);
- with suppression, the whole emitted multiset: exactly one final record per closed window;
- the number of records dropped for closed windows: Kafka Streams' task metric
  ``dropped-records-total`` (both aggregations count a late record) against streamtable's
  ``dropped-records`` (``late`` and every other cause);
- and, as a check of the test itself, Kafka Streams' final tables against a Python model of
  the rule (a record is dropped when its window end + grace <= the max timestamp seen before it,
  in offset order, on its partition).
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import random
import struct
import uuid
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams
from streamtable.reference import twins
from streamtable.reference.kafka_streams import run_reference
from streamtable.serde.murmur2 import default_partition

SEED = 20130104
BASE_TS = 1_356_998_400_000  # 2013-01-01T00:00Z
SIZE_MS = 5_000
GRACE_MS = 2_000
RECORDS = 800
STEP_MS = 50  # running time advances 50 ms per record: 40 s of data, 8 windows
FLUSH_AFTER_MS = 3_600_000
KEYS = [f"k{i:02d}" for i in range(12)]
PARTITION_CASES = (1, 3)


def windowed_input(rng: random.Random, partitions: int) -> tuple[list, int]:
    """The seeded records ``(key, value, ts)`` in bytes, flush records last, and the max ts.

    Record ``i`` has running time ``BASE_TS + 50 i`` ms; 85 % are up to 1.5 s behind it (inside
    the grace of their window unless it ended more than 2 s ago), 15 % between 2 and 12 s
    behind (mostly for a closed window). Values are integers 0..99 as strings.
    """
    records = []
    for i in range(RECORDS):
        now = BASE_TS + STEP_MS * i
        behind = rng.randrange(0, 1_500) if rng.random() < 0.85 else rng.randrange(2_000, 12_000)
        ts = max(BASE_TS, now - behind)
        records.append((rng.choice(KEYS).encode(), str(rng.randrange(100)).encode(), ts))
    top = max(ts for _, _, ts in records)
    return records + flush_records(partitions, top + FLUSH_AFTER_MS), top


def flush_records(partitions: int, ts: int) -> list[tuple[bytes, bytes, int]]:
    """One record at ``ts`` for every partition (keys chosen by the default partitioner)."""
    out, j = {}, 0
    while len(out) < partitions:
        key = f"flush-{j}".encode()
        out.setdefault(default_partition(key, partitions), (key, b"0", ts))
        j += 1
    return [out[p] for p in range(partitions)]


def window_key(key: bytes, ts: int) -> bytes:
    """``TimeWindowedSerde`` bytes of ``key``'s tumbling window holding ``ts``."""
    return key + struct.pack(">q", ts - ts % SIZE_MS)


def model(records: list, partitions: int) -> tuple[dict, dict, int]:
    """Kafka Streams' rule in Python: final counts and aggregates per window, and drops."""
    stream_time: dict[int, int] = {}
    counts: dict[bytes, int] = collections.Counter()
    stats: dict[bytes, list[int]] = {}
    dropped = 0
    for key, value, ts in records:
        p = default_partition(key, partitions)
        stream_time[p] = max(stream_time.get(p, ts), ts)
        end = ts - ts % SIZE_MS + SIZE_MS
        if end + GRACE_MS <= stream_time[p]:
            dropped += 1
            continue
        wk, x = window_key(key, ts), int(value)
        counts[wk] += 1
        n, total, top = stats.get(wk, [0, 0, 0])
        stats[wk] = [n + 1, total + x, max(top, x)]
    return dict(counts), {wk: f"{n}:{s}:{m}" for wk, (n, s, m) in stats.items()}, dropped


def decode_count(v: bytes) -> int:
    return struct.unpack(">q", v)[0]


def final_table(records, decode) -> dict:
    """The last value per windowed key (key bytes), in offset order per partition."""
    table = {}
    for k, v, _ in records:
        table[k] = None if v is None else decode(v)
    return table


def emitted(records, decode) -> collections.Counter:
    return collections.Counter((k, None if v is None else decode(v)) for k, v, _ in records)


def show(wk: bytes) -> str:
    return f"{wk[:-8].decode()}@{struct.unpack('>q', wk[-8:])[0] - BASE_TS}"


def diff(want: dict, got: dict, limit: int = 15) -> str:
    """The windowed keys whose values differ, Kafka Streams (ks) vs streamtable (st)."""
    keys = sorted(set(want) | set(got), key=lambda k: (k[-8:], k))
    bad = [k for k in keys if want.get(k) != got.get(k)]
    lines = [f"{show(k)}: ks={want.get(k)!r} st={got.get(k)!r}" for k in bad[:limit]]
    return f"{len(bad)} windows differ:\n  " + "\n  ".join(lines)


@pytest.fixture(scope="module")
def runs(kafka_broker, spark, tmp_path_factory):
    """Per partition count: the input, both engines' outputs (records) and drop counts."""
    bs = kafka_broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    tmp = tmp_path_factory.mktemp("windows-parity")
    results = {}
    # one JVM at a time beside one streamtable app (the box has 2 cores)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = {}
        for partitions in PARTITION_CASES:
            t = lambda name, p=partitions: f"wparity-{name}-p{p}-{suffix}"  # noqa: E731
            outputs = ["count", "aggregate", "count_final", "aggregate_final"]
            topics = {
                engine: {o: t(f"{o.replace('_', '-')}-{engine}") for o in outputs}
                for engine in ("ks", "st")
            }
            source = t("in")
            ensure_topics(
                bs,
                {
                    source: partitions,
                    **{x: partitions for d in topics.values() for x in d.values()},
                },
            )
            records, _top = windowed_input(random.Random(SEED + partitions), partitions)
            produce_records(bs, source, records, partitions=partitions)
            metrics_file = tmp / f"ks-metrics-p{partitions}.json"
            pending[partitions] = pool.submit(
                run_reference,
                "windowed-parity",
                bootstrap_servers=bs,
                application_id=f"wparity-p{partitions}-{suffix}",
                params={
                    "input": source,
                    "size_ms": str(SIZE_MS),
                    "grace_ms": str(GRACE_MS),
                    **{f"{o}_output": name for o, name in topics["ks"].items()},
                    "metrics_file": str(metrics_file),
                },
                input_topics=[source],
                state_dir=str(tmp / f"ks-p{partitions}"),
            )
            twin = twins.windowed_parity(
                source,
                size_ms=SIZE_MS,
                grace_ms=GRACE_MS,
                **{f"{o}_output": name for o, name in topics["st"].items()},
            )
            app = KafkaStreams(
                twin,
                {
                    "application.id": f"wparity-p{partitions}-st-{suffix}",
                    "bootstrap.servers": bs,
                    "state.dir": str(tmp / f"st-p{partitions}"),
                    "streamtable.shuffle.partitions": 2,
                    "commit.interval.ms": 200,
                },
            )
            app.start()
            try:
                app.await_caught_up(timeout=timedelta(minutes=3))
                st_dropped = app.metrics()["dropped-records"]
            finally:
                app.close()
            results[partitions] = {
                "records": records,
                "topics": topics,
                "st_dropped": st_dropped,
                "metrics_file": metrics_file,
            }
        for partitions, fut in pending.items():
            assert fut.result()["records_in"] == len(results[partitions]["records"])
    for r in results.values():
        r["ks_dropped"] = json.loads(r["metrics_file"].read_text())["dropped-records-total"]
        r["out"] = {
            engine: {o: read_topic(bs, name) for o, name in named.items()}
            for engine, named in r["topics"].items()
        }
    return results


DECODE = {"count": decode_count, "aggregate": bytes.decode}


@pytest.mark.parametrize("agg", ["count", "aggregate"])
@pytest.mark.parametrize("partitions", PARTITION_CASES)
def test_final_table(runs, partitions, agg):
    r = runs[partitions]
    want = final_table(r["out"]["ks"][agg], DECODE[agg])
    got = final_table(r["out"]["st"][agg], DECODE[agg])
    assert len(want) > 50, "Kafka Streams' final table is nearly empty"
    assert got == want, diff(want, got)


@pytest.mark.parametrize("agg", ["count", "aggregate"])
@pytest.mark.parametrize("partitions", PARTITION_CASES)
def test_suppressed_final_results(runs, partitions, agg):
    r = runs[partitions]
    want = emitted(r["out"]["ks"][f"{agg}_final"], DECODE[agg])
    got = emitted(r["out"]["st"][f"{agg}_final"], DECODE[agg])
    assert want, "Kafka Streams emitted no final result"
    assert max(want.values()) == 1, "Kafka Streams emitted a window twice"
    assert got == want, (
        f"only in Kafka Streams: {sorted((show(k), v) for k, v in want - got)[:15]}; "
        f"only in streamtable: {sorted((show(k), v) for k, v in got - want)[:15]}"
    )
    # the final results are the last updates of every closed window (not the flush windows)
    updates = final_table(r["out"]["ks"][agg], DECODE[agg])
    flushed = {k for k, _, _ in r["records"][-partitions:]}
    closed = {k: v for k, v in updates.items() if k[:-8] not in flushed}
    assert dict(want) == {(k, v): 1 for k, v in closed.items()}


@pytest.mark.parametrize("partitions", PARTITION_CASES)
def test_dropped_late_records(runs, partitions):
    r = runs[partitions]
    _, _, late = model(r["records"], partitions)
    assert late > 10, "the input has too few late records"
    # each of the two aggregations drops (and counts) a late record
    assert r["ks_dropped"] == 2 * late, "the Python model disagrees with Kafka Streams"
    st = r["st_dropped"]
    assert sum(st.values()) == r["ks_dropped"] and st.get("late", 0) == 2 * late, (
        f"Kafka Streams dropped {r['ks_dropped']} (2 x {late} late records); streamtable: {st}"
    )


@pytest.mark.parametrize("partitions", PARTITION_CASES)
def test_model_matches_kafka_streams(runs, partitions):
    """Checks the test's own understanding of the rule against Kafka Streams."""
    r = runs[partitions]
    counts, stats, _ = model(r["records"], partitions)
    assert final_table(r["out"]["ks"]["count"], decode_count) == counts
    assert final_table(r["out"]["ks"]["aggregate"], bytes.decode) == stats
