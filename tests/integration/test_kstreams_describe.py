"""``Topology.describe()`` prints exactly what Kafka Streams prints for the same topology.

Each reference topology of ``ReferenceApp.java`` is built by the real Kafka Streams (the JVM
only: no broker, no Spark) and by its streamtable twin (``streamtable.reference.twins``), with
fixed topic names; the two texts must be equal, character for character.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamtable import Topology
from streamtable.demo import wordcount
from streamtable.reference import twins
from streamtable.reference.kafka_streams import TOPOLOGIES, describe_reference

WINDOW = {"size_ms": 60_000, "grace_ms": 10_000}
WINDOW_PARAMS = {k: str(v) for k, v in WINDOW.items()}

# (reference topology, its params, the twin with the same params)
CASES: dict[str, tuple[str, dict[str, str], Callable[[], Topology]]] = {
    "stream-table-join": (
        "stream-table-join",
        {"stream": "clicks", "table": "regions", "output": "out"},
        lambda: twins.stream_table_join("clicks", "regions", "out"),
    ),
    "stream-table-join-left": (
        "stream-table-join",
        {"stream": "clicks", "table": "regions", "output": "out", "kind": "left"},
        lambda: twins.stream_table_join("clicks", "regions", "out", kind="left"),
    ),
    "table-table-join": (
        "table-table-join",
        {"left": "l", "right": "r", "output": "out"},
        lambda: twins.table_table_join("l", "r", "out"),
    ),
    "table-table-join-outer": (
        "table-table-join",
        {"left": "l", "right": "r", "output": "out", "kind": "outer"},
        lambda: twins.table_table_join("l", "r", "out", kind="outer"),
    ),
    "table-aggregate": (
        "table-aggregate",
        {"table": "amounts", "output": "out"},
        lambda: twins.table_aggregate("amounts", "out"),
    ),
    "flights-weather": (
        "flights-weather",
        {"flights": "flights", "weather": "weather", "output": "out"},
        lambda: twins.flights_weather("flights", "weather", "out"),
    ),
    "flights-planes": (
        "flights-planes",
        {"flights": "flights", "planes": "planes", "output": "out"},
        lambda: twins.flights_planes("flights", "planes", "out"),
    ),
    "flights-fk-planes": (
        "flights-fk-planes",
        {"flights": "flights", "planes": "planes", "output": "out"},
        lambda: twins.flights_fk_planes("flights", "planes", "out"),
    ),
    "windowed-count": (
        "windowed-count",
        {"input": "in", "output": "out", **WINDOW_PARAMS},
        lambda: twins.windowed_count("in", "out", **WINDOW),
    ),
    "windowed-count-suppressed": (
        "windowed-count",
        {"input": "in", "output": "out", **WINDOW_PARAMS, "suppress": "true"},
        lambda: twins.windowed_count("in", "out", **WINDOW, suppress=True),
    ),
    "windowed-aggregate": (
        "windowed-aggregate",
        {"input": "in", "output": "out", **WINDOW_PARAMS, "suppress": "true"},
        lambda: twins.windowed_aggregate("in", "out", **WINDOW, suppress=True),
    ),
    "flights-hourly": (
        "flights-hourly",
        {"flights": "flights", "output": "out"},
        lambda: twins.flights_hourly("flights", "out"),
    ),
    "flights-hourly-stats-suppressed": (
        "flights-hourly",
        {"flights": "flights", "output": "out", "agg": "stats", "suppress": "true"},
        lambda: twins.flights_hourly("flights", "out", agg="stats", suppress=True),
    ),
    "windowed-parity": (
        "windowed-parity",
        {
            "input": "in",
            **WINDOW_PARAMS,
            "count_output": "counts",
            "aggregate_output": "stats",
            "count_final_output": "counts-final",
            "aggregate_final_output": "stats-final",
        },
        lambda: twins.windowed_parity(
            "in",
            **WINDOW,
            count_output="counts",
            aggregate_output="stats",
            count_final_output="counts-final",
            aggregate_final_output="stats-final",
        ),
    ),
    "join-rekey-reduce": (
        "join-rekey-reduce",
        {"stream": "clicks", "table": "regions", "output": "out"},
        lambda: twins.join_rekey_reduce("clicks", "regions", "out"),
    ),
    "count-histogram": (
        "count-histogram",
        {"input": "events", "output": "out"},
        lambda: twins.count_histogram("events", "out"),
    ),
    "count-filter": (
        "count-filter",
        {"input": "events", "output": "out"},
        lambda: twins.count_filter("events", "out"),
    ),
    "count-suppress-filter": (
        "count-filter",
        {"input": "events", "output": "out", "suppress_ms": "100"},
        lambda: twins.count_filter("events", "out", suppress_ms=100),
    ),
    "windowed-count-filter": (
        "windowed-count-filter",
        {"input": "in", "output": "out", **WINDOW_PARAMS},
        lambda: twins.windowed_count_filter("in", "out", **WINDOW),
    ),
    "windowed-count-suppress-filter": (
        "windowed-count-filter",
        {"input": "in", "output": "out", **WINDOW_PARAMS, "suppress": "true"},
        lambda: twins.windowed_count_filter("in", "out", **WINDOW, suppress=True),
    ),
    "windowed-count-limit-filter": (
        "windowed-count-filter",
        {"input": "in", "output": "out", **WINDOW_PARAMS, "suppress_ms": "100"},
        lambda: twins.windowed_count_filter("in", "out", **WINDOW, suppress_ms=100),
    ),
    "session-count-filter": (
        "session-count-filter",
        {"input": "in", "output": "out", "gap_ms": "200", "grace_ms": "1000"},
        lambda: twins.session_count_filter("in", "out", gap_ms=200, grace_ms=1000),
    ),
    "sliding-count-filter": (
        "sliding-count-filter",
        {"input": "in", "output": "out", "difference_ms": "300", "grace_ms": "1000"},
        lambda: twins.sliding_count_filter("in", "out", difference_ms=300, grace_ms=1000),
    ),
    "session-count-suppress-filter": (
        "session-count-filter",
        {"input": "in", "output": "out", "gap_ms": "200", "grace_ms": "0", "suppress": "true"},
        lambda: twins.session_count_filter("in", "out", gap_ms=200, grace_ms=0, suppress=True),
    ),
    "sliding-count-suppress-filter": (
        "sliding-count-filter",
        {
            "input": "in",
            "output": "out",
            "difference_ms": "300",
            "grace_ms": "0",
            "suppress": "true",
        },
        lambda: twins.sliding_count_filter(
            "in", "out", difference_ms=300, grace_ms=0, suppress=True
        ),
    ),
    "table-join-regroup": (
        "table-join-regroup",
        {"left": "regions", "right": "scores", "output": "out"},
        lambda: twins.table_join_regroup("regions", "scores", "out"),
    ),
    "three-level": (
        "three-level",
        {"input": "events", "output": "out"},
        lambda: twins.three_level("events", "out"),
    ),
    "flights-carrier-seats": (
        "flights-carrier-seats",
        {"flights": "flights", "planes": "planes", "output": "out"},
        lambda: twins.flights_carrier_seats("flights", "planes", "out"),
    ),
    "processor-punctuation": (
        "processor-punctuation",
        {"input": "in", "output": "out", "stream_ms": "1000", "wall_ms": "60000"},
        lambda: twins.processor_punctuation("in", "out", stream_ms=1_000, wall_ms=60_000),
    ),
    "windowed-filter-join": (
        "windowed-filter-join",
        {"input": "events", "table": "regions", "output": "out", **WINDOW_PARAMS},
        lambda: twins.windowed_filter_join("events", "regions", "out", **WINDOW),
    ),
    "wordcount": (
        "wordcount",
        {"input": "lines", "output": "out"},
        lambda: wordcount.build_topology("lines", "out"),
    ),
    "latency-echo": (
        "latency-echo",
        {"input": "in", "output": "out"},
        lambda: twins.latency_echo("in", "out"),
    ),
    "latency-echo-columns": (
        "latency-echo",
        {"input": "in", "output": "out"},
        lambda: twins.latency_echo("in", "out", columns=True),
    ),
    "latency-max": (
        "latency-max",
        {"input": "in", "output": "out"},
        lambda: twins.latency_max("in", "out"),
    ),
    "latency-count": (
        "latency-count",
        {"input": "in", "output": "out"},
        lambda: twins.latency_count("in", "out"),
    ),
}


def test_every_reference_topology_is_compared():
    assert {topology for topology, _, _ in CASES.values()} == set(TOPOLOGIES)


@pytest.mark.parametrize("case", list(CASES))
def test_describe_equals_kafka_streams(case):
    topology, params, twin = CASES[case]
    assert str(twin().describe()) == describe_reference(topology, params)
