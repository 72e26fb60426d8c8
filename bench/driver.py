"""TopologyTestDriver (prototype) timings: per piped record, idle CPU, store reads.

    PYTHONPATH=src python bench/driver.py pipes [stateless|count|table ...]
    PYTHONPATH=src python bench/driver.py idle
    PYTHONPATH=src python bench/driver.py store

Each topology runs twice in one Spark session: the first driver pays for the session's first
jobs (Python workers, code generation), the second one shows what a test in a warm session pays.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def pipes(name: str) -> None:
    topology, records, value_serde = TOPOLOGIES[name]()
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
        q = d._queries[0]
        last = [p for p in q.recentProgress if p["numInputRows"] > 0][-1]
        result = out.read_key_values_to_list()
    rest = sorted(times[1:])
    print(
        f"{name:9s} start {started:5.2f}s  first pipe {times[0]:5.2f}s  "
        f"median of the other {len(rest)} {rest[len(rest) // 2]:5.3f}s  max {rest[-1]:5.3f}s  "
        f"all {sum(times):5.1f}s",
        flush=True,
    )
    print("    last batch durationMs", json.dumps(last["durationMs"]), flush=True)
    print("    output", result, flush=True)


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


def idle() -> None:
    topology, _, _ = count()
    with TopologyTestDriver(topology) as d:
        d.create_input_topic("in", S, S).pipe_input("k", "a", timestamp=1)
        time.sleep(2)
        c0 = _cpu_of_children()
        time.sleep(20)
        print(f"idle driver: {_cpu_of_children() - c0} s CPU of Spark's processes over 20 s")


def store() -> None:
    topology, records, _ = count()
    with TopologyTestDriver(topology) as d:
        inp = d.create_input_topic("in", S, S)
        for i, (k, v) in enumerate(records[:5]):
            inp.pipe_input(k, v, timestamp=1000 + i)
        s = d.get_key_value_store("Counts")
        for _ in range(3):
            t = time.time()
            contents = s.all()
            print(f"store read {time.time() - t:.2f}s: {contents}", flush=True)


if __name__ == "__main__":
    t = time.time()
    get_spark({"spark.sql.shuffle.partitions": "2"})
    print(f"Spark session {time.time() - t:.1f}s", flush=True)
    what = sys.argv[1] if len(sys.argv) > 1 else "pipes"
    if what == "pipes":
        for name in sys.argv[2:] or list(TOPOLOGIES):
            for _ in range(2):
                pipes(name)
    elif what == "idle":
        idle()
    else:
        store()
