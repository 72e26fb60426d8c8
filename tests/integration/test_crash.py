"""Exactly-once under hard crashes: the crash harness kills the app (driver, JVM, workers).

One run covers every output kind the harness checks: the echo and per-key sums topics, their
Parquet file sinks, and a second sub-topology behind a repartition topic. (The single-query
crash topology also runs under worker kills on a Spark cluster: ``test_spark_cluster.py``.)
"""

from __future__ import annotations

import json

from streamtable.testing.crash import run_crash_test


def test_exactly_once_survives_sigkills(kafka_broker, tmp_path):
    """Two sub-topologies (echo and per-key sums; join -> re-key -> aggregate behind a
    repartition topic), with the echo and the sums also written to Parquet, killed three
    times: nothing lost, nothing counted twice, in either sub-topology or in the files.
    """
    report = run_crash_test(
        kafka_broker.bootstrap_servers,
        tmp_path,
        records=3000,
        keys=40,
        partitions=2,
        kills=3,
        max_offsets_per_trigger=300,
        max_kill_delay_s=2.0,  # a kill within the micro-batch after the first output
        topology="chain",
        files_dir=tmp_path / "files",
    )
    print(json.dumps(report.to_json()))  # the seed replays a failure
    assert len(report.kills) == 3
    assert report.echo_missing == 0, report.to_json()
    assert report.echo_duplicates == 0, report.to_json()
    assert report.sums_duplicates == 0, report.to_json()
    assert report.sums_errors == [], report.to_json()
    assert report.echo_records == 3000
    assert report.group_sums_records > 0
    assert report.group_sums_errors == [], report.to_json()
    # the Parquet sinks, read through Spark's file-sink log: every record once, every sum right
    assert report.files_echo_missing == 0, report.to_json()
    assert report.files_echo_duplicates == 0, report.to_json()
    assert report.files_sums_duplicates == 0, report.to_json()
    assert report.files_sums_errors == [], report.to_json()
