"""TopologyTestDriver overhead: seconds per piped record after warm-up, stateless and stateful.

    python bench/driver.py [--sections pipes,raw,idle,store] [--records 10] [--repeat 2]

Prints ONE JSON object. ``pipes``: each topology (stateless, count, table re-grouping) runs
``--repeat`` times in one Spark session; the first driver pays for the session's first jobs, the
later ones show what a test in a warm session pays. ``raw``: the floor, a hand-written PySpark
query (the same in-memory source, ``groupBy().count()``, ``foreachBatch`` collect) driven the
same way, one record and ``processAllAvailable()`` per step, so ``count / raw`` is the driver's
own overhead per record. ``idle``: CPU an idle driver costs. ``store``: one store read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

from streamtable import Serdes, StreamsBuilder
from streamtable.runtime.spark import get_spark
from streamtable.testing import TopologyTestDriver

S, L = Serdes.string(), Serdes.long()
WORDS = ["a", "b", "a", "c", "a", "b", "xq", "a", "c", "a"]
USERS = [
    ("alice", "A"),
    ("bob", "A"),
    ("alice", "E"),
    ("bob", None),
    ("carol", "E"),
    ("dave", "B"),
    ("alice", "B"),
    ("erin", "A"),
    ("bob", "E"),
    ("carol", "A"),
]


def stateless():
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .filter(lambda k, v: not v.startswith("x"))
        .map_values(lambda v: v.upper())
        .to("out", key_serde=S, value_serde=S)
    )
    return b.build(), [(str(i), w) for i, w in enumerate(WORDS)], S


def count():
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .group_by(lambda k, v: v, key_serde=S)
        .count(name="Counts")
        .to_stream()
        .to("out", key_serde=S, value_serde=L)
    )
    return b.build(), [(str(i), w) for i, w in enumerate(WORDS)], L


def table():
    b = StreamsBuilder()
    users = b.table("in", key_serde=S, value_serde=S, name="users")
    (
        users.group_by(lambda u, r: (r, u), key_serde=S)
        .count(name="region-counts")
        .to_stream()
        .to("out", key_serde=S, value_serde=L)
    )
    return b.build(), USERS, L


TOPOLOGIES = {"stateless": stateless, "count": count, "table": table}


def pipes(name: str, n: int) -> dict:
    topology, records, value_serde = TOPOLOGIES[name]()
    records = (records * (n // len(records) + 1))[:n]
    t0 = time.time()
    with TopologyTestDriver(topology) as d:
        started = time.time() - t0
        inp = d.create_input_topic("in", S, S)
        out = d.create_output_topic("out", S, value_serde)
        times = []
        for i, (k, v) in enumerate(records):
            s = time.time()
            inp.pipe_input(k, v, timestamp=1000 + i)
            times.append(time.time() - s)
        last = [p for p in d._queries[0].recentProgress if p["numInputRows"] > 0][-1]
        produced = out.get_queue_size()
    return _figures(name, started, times) | {
        "records_out": produced,
        "last_batch_duration_ms": last["durationMs"],
    }


def _figures(name: str, started: float, times: list[float]) -> dict:
    rest = times[1:]
    return {
        "topology": name,
        "driver_start_s": round(started, 2),
        "first_pipe_s": round(times[0], 2),
        "median_s_per_record_after_first": round(statistics.median(rest), 3),
        "max_s_after_first": round(max(rest), 3),
        "total_s": round(sum(times), 1),
    }


def raw(n: int) -> dict:
    """Plain PySpark on the same source: one record, then processAllAvailable, per step."""
    import tempfile

    from streamtable.testing.driver_topics import DriverTopicSource, append_records

    spark = get_spark({})
    spark.dataSource.register(DriverTopicSource)
    spark.conf.set("spark.sql.streaming.stateStore.encodingFormat", "unsaferow")
    root = tempfile.mkdtemp(prefix="bench-raw-")
    append_records(root, "in", [])
    got: list = []
    df = spark.readStream.format("streamtable-driver").option("path", root)
    df = df.option("topics", "in").load().groupBy("value").count()
    t0 = time.time()
    q = (
        df.writeStream.outputMode("update")
        .option("checkpointLocation", f"{root}/chk")
        .foreachBatch(lambda b, _i: got.extend(b.collect()))
        .start()
    )
    started = time.time() - t0
    times = []
    try:
        for i in range(n):
            s = time.time()
            append_records(root, "in", [(b"k", WORDS[i % len(WORDS)].encode(), 1000 + i)])
            q.processAllAvailable()
            times.append(time.time() - s)
    finally:
        q.stop()
    return _figures("raw_pyspark_count", started, times) | {"records_out": len(got)}


def _cpu_of_children() -> int:
    out = subprocess.run(
        ["ps", "-o", "pid=,ppid=,cputimes=", "-e"], capture_output=True, text=True, check=True
    ).stdout
    kids: dict[int, list[tuple[int, int]]] = {}
    for line in out.splitlines():
        pid, ppid, cpu = line.split()
        kids.setdefault(int(ppid), []).append((int(pid), int(cpu)))
    total, todo = 0, [os.getpid()]
    while todo:
        for child, cpu in kids.get(todo.pop(), []):
            total += cpu
            todo.append(child)
    return total


def idle() -> dict:
    topology, _, _ = count()
    with TopologyTestDriver(topology) as d:
        d.create_input_topic("in", S, S).pipe_input("k", "a", timestamp=1)
        time.sleep(2)
        c0 = _cpu_of_children()
        time.sleep(20)
        return {"idle_cpu_s_over_20_s": _cpu_of_children() - c0}


def store() -> dict:
    topology, records, _ = count()
    with TopologyTestDriver(topology) as d:
        inp = d.create_input_topic("in", S, S)
        for i, (k, v) in enumerate(records[:5]):
            inp.pipe_input(k, v, timestamp=1000 + i)
        t = time.time()
        contents = d.get_key_value_store("Counts").all()
        return {"store_read_s": round(time.time() - t, 2), "entries": len(contents)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="pipes,raw")
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--topologies", default=",".join(TOPOLOGIES))
    args = ap.parse_args()
    sections = args.sections.split(",")
    t = time.time()
    get_spark({"spark.sql.shuffle.partitions": "2"})
    result: dict = {"spark_session_s": round(time.time() - t, 1), "records": args.records}
    result["load_average"] = os.getloadavg()
    if "pipes" in sections:
        result["pipes"] = [
            pipes(name, args.records)
            for name in args.topologies.split(",")
            for _ in range(args.repeat)
        ]
    if "raw" in sections:
        result["raw"] = [raw(args.records) for _ in range(args.repeat)]
    if "pipes" in sections and "raw" in sections:
        warm = {r["topology"]: r["median_s_per_record_after_first"] for r in result["pipes"]}
        floor = result["raw"][-1]["median_s_per_record_after_first"]
        result["ratio_to_raw_pyspark_per_record"] = {
            k: round(v / floor, 2) for k, v in warm.items()
        }
    if "idle" in sections:
        result["idle"] = idle()
    if "store" in sections:
        result["store"] = store()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
