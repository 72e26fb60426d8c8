"""Exactly-once under hard crashes: the crash harness kills the app (driver, JVM, workers)."""

from __future__ import annotations

import json

from streamtable.testing.crash import run_crash_test


def test_exactly_once_survives_sigkills(kafka_broker, tmp_path):
    report = run_crash_test(
        kafka_broker.bootstrap_servers,
        tmp_path,
        records=6000,
        keys=40,
        partitions=2,
        kills=3,
        max_offsets_per_trigger=300,
        files_dir=tmp_path / "files",
    )
    print(json.dumps(report.to_json()))  # the seed replays a failure
    assert len(report.kills) == 3
    assert report.echo_missing == 0, report.to_json()
    assert report.echo_duplicates == 0, report.to_json()
    assert report.sums_duplicates == 0, report.to_json()
    assert report.sums_errors == [], report.to_json()
    assert report.echo_records == 6000
    # the Parquet sinks, read through Spark's file-sink log: every record once, every sum right
    assert report.files_echo_missing == 0, report.to_json()
    assert report.files_echo_duplicates == 0, report.to_json()
    assert report.files_sums_duplicates == 0, report.to_json()
    assert report.files_sums_errors == [], report.to_json()


def test_exactly_once_through_a_repartition_topic_survives_sigkills(kafka_broker, tmp_path):
    """Two sub-topologies (join -> re-key -> aggregate behind a repartition topic), killed
    three times: nothing lost, nothing counted twice, in either sub-topology.
    """
    report = run_crash_test(
        kafka_broker.bootstrap_servers,
        tmp_path,
        records=4000,
        keys=40,
        partitions=2,
        kills=3,
        max_offsets_per_trigger=300,
        topology="chain",
    )
    print(json.dumps(report.to_json()))  # the seed replays a failure
    assert len(report.kills) == 3
    assert report.echo_missing == 0 and report.echo_duplicates == 0, report.to_json()
    assert report.sums_errors == [] and report.sums_duplicates == 0, report.to_json()
    assert report.group_sums_records > 0
    assert report.group_sums_errors == [], report.to_json()
