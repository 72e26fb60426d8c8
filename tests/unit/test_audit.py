"""The data-loss audit without a JVM: windows, the record format, the comparison, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from streamtable.cli import cli
from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError, StreamtableError
from streamtable.platform import audit_compare as report_module
from streamtable.platform.audit import (
    WINDOW_MS,
    AuditCounts,
    AuditError,
    AuditRecord,
    window_start,
)
from streamtable.platform.audit_compare import AuditReport, WindowAudit, compare, sunk_counts
from streamtable.platform.audit_topology import window_alert

JAN1 = 1_356_998_400_000  # 2013-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("ts", "start"),
    [
        (JAN1, JAN1),
        (JAN1 + 1, JAN1),
        (JAN1 + WINDOW_MS - 1, JAN1),
        (JAN1 + WINDOW_MS, JAN1 + WINDOW_MS),
        (0, 0),
        (59_999, 0),
    ],
)
def test_window_start_is_the_minute_of_event_time(ts, start):
    assert window_start(ts) == start


def test_counts_per_topic_partition_and_window():
    c = AuditCounts()
    for ts in (JAN1, JAN1 + 59_999, JAN1 + 60_000):
        c.add("t", 1, ts)
    c.add("t", 0, JAN1, 5)
    assert c.counts == {("t", 0, JAN1): 5, ("t", 1, JAN1): 2, ("t", 1, JAN1 + WINDOW_MS): 1}
    assert c.total == 8


def test_record_key_and_value_format():
    r = AuditRecord("produced", "gen", "flights", 3, JAN1, 42, "run-1")
    assert r.key() == b"produced|gen|flights|3|1356998400000|run-1"
    assert json.loads(r.value()) == {
        "role": "produced",
        "reporter": "gen",
        "topic": "flights",
        "partition": 3,
        "window_start": JAN1,
        "count": 42,
        "batch": "run-1",
    }
    assert AuditRecord.from_kafka(r.key(), r.value()) == r


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"role": "lost"}, r"Audit role must be one of \['produced', 'consumed', 'sunk'\]"),
        ({"reporter": "a|b"}, r"Audit reporter must be a non-empty str without '\|'"),
        ({"batch": ""}, r"Audit batch must be a non-empty str"),
        ({"count": -1}, r"Audit count must be an int >= 0, got -1"),
        ({"window_start": JAN1 + 5}, r"multiple of 60000 ms \(a minute\), got 1356998400005"),
    ],
)
def test_invalid_records_are_refused_naming_the_field(kwargs, match):
    fields = dict(
        role="consumed",
        reporter="app",
        topic="t",
        partition=0,
        window_start=JAN1,
        count=1,
        batch="0",
    )
    with pytest.raises(AuditError, match=match):
        AuditRecord(**{**fields, **kwargs})


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"k", None, r"has no value \(a tombstone\)"),
        (b"k", b"not json", r"Audit record value is not JSON"),
        (b"k", b"[1]", r"not a JSON object"),
        (b"k", b'{"role": "produced"}', r"misses field 'reporter'"),
    ],
)
def test_malformed_kafka_records(key, value, match):
    with pytest.raises(AuditError, match=match):
        AuditRecord.from_kafka(key, value)


def test_key_must_match_the_value():
    r = AuditRecord("consumed", "app", "t", 0, JAN1, 1, "0")
    with pytest.raises(AuditError, match=r"key b'other' does not match its value"):
        AuditRecord.from_kafka(b"other", r.value())


def _rec(role, reporter, count, *, partition=0, window=0, batch="b", topic="t"):
    return AuditRecord(role, reporter, topic, partition, JAN1 + window * WINDOW_MS, count, batch)


def test_no_difference_when_every_consumer_read_what_was_produced():
    report = compare(
        [
            _rec("produced", "gen-a", 3, batch="r1"),
            _rec("produced", "gen-b", 2, batch="r2"),  # two producers add up
            _rec("consumed", "app", 4, batch="0"),
            _rec("consumed", "app", 1, batch="1"),  # two micro-batches add up
            _rec("consumed", "other-app", 5, batch="0"),
        ]
    )
    assert report.ok, report.table()
    assert [(w.produced, w.consumed) for w in report.windows] == [(5, {"app": 5, "other-app": 5})]
    assert report.summary() == (
        "audit: 1 window(s) of 1 topic(s) compared, none differs (0 records missing)"
    )


def test_a_republished_batch_counts_once():
    report = compare(
        [
            _rec("produced", "gen", 10),
            _rec("consumed", "app", 6, batch="7"),
            _rec("consumed", "app", 10, batch="7"),  # batch 7 replayed: the last value wins
        ]
    )
    assert report.ok
    assert report.records == 2


def test_missing_windows_and_duplicates_are_named():
    report = compare(
        [
            _rec("produced", "gen", 10, window=0),
            _rec("produced", "gen", 4, window=1),
            _rec("produced", "gen", 4, window=1, partition=1),
            _rec("consumed", "app", 10, window=0),
            _rec("consumed", "app", 6, window=1, partition=1),  # 2 duplicates
            # window 1 of partition 0: nothing read at all
        ]
    )
    diff = [(w.partition, w.window_start - JAN1, w.missing) for w in report.differences]
    assert diff == [(0, WINDOW_MS, 4), (1, WINDOW_MS, -2)]
    assert not report.ok
    # the 2 duplicates of one window do not make up for the 4 records lost in another
    assert (report.missing, report.duplicated) == (4, 2)
    assert "2 differ (4 records missing, 2 duplicated)" in report.summary()
    assert (report.to_json()["missing"], report.to_json()["duplicated"]) == (4, 2)


def test_topics_nobody_audited_reads_are_listed_not_compared():
    report = compare([_rec("produced", "gen", 3, topic="out"), _rec("produced", "gen", 3)])
    assert report.windows == []
    assert report.unconsumed_topics == ["out", "t"]
    assert report.ok
    assert "not consumed by an audited reader: out, t" in report.summary()


def test_sunk_is_compared_with_produced():
    report = compare(
        [
            _rec("produced", "gen", 5),
            _rec("consumed", "app", 5),
            _rec("sunk", "files-0", 3),
        ]
    )
    (w,) = report.differences
    assert (w.produced, w.consumed, w.sunk, w.missing) == (5, {"app": 5}, 3, 2)


def test_table_of_differences():
    report = AuditReport(
        [
            WindowAudit("flights", 2, JAN1 + 5 * WINDOW_MS, 120, {"app": 100}, None),
            WindowAudit("flights", 0, JAN1, 7, {"app": 7}, None),
        ]
    )
    assert report.table().splitlines() == [
        "topic    partition  window start (UTC)    produced  consumed  sunk  missing",
        "-------  ---------  --------------------  --------  --------  ----  -------",
        "flights          2  2013-01-01T00:05:00Z       120       100     -       20",
    ]
    assert AuditReport([]).table() == ""


def test_json_report():
    w = WindowAudit("flights", 2, JAN1, 120, {"app": 100}, 100)
    doc = AuditReport([w]).to_json()
    assert doc["ok"] is False and doc["missing"] == 20
    assert doc["differences"] == [
        {
            "topic": "flights",
            "partition": 2,
            "window_start": JAN1,
            "window_start_utc": "2013-01-01T00:00:00Z",
            "produced": 120,
            "consumed": {"app": 100},
            "sunk": 100,
            "missing": 20,
        }
    ]
    assert doc["totals"] == {"flights": {"produced": 120, "consumed:app": 100, "sunk": 100}}


def test_sunk_counts_read_the_file_sink_log(tmp_path: Path):
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    utc = dt.UTC
    rows = pa.table(
        {
            "timestamp": pa.array(
                [dt.datetime.fromtimestamp(JAN1 / 1000 + s, utc) for s in (0.5, 59.999, 60, 1, 1)],
                pa.timestamp("us", tz="UTC"),
            ),
            "topic": ["t", "t", "t", "t", "other"],
            "partition": pa.array([0, 0, 0, 1, 0], pa.int32()),
        }
    )
    pq.write_table(rows, tmp_path / "part-0.parquet")
    pq.write_table(rows, tmp_path / "part-crashed.parquet")  # not in the log: not counted
    (tmp_path / "_spark_metadata").mkdir()
    (tmp_path / "_spark_metadata" / "0").write_text(
        "v1\n" + json.dumps({"path": f"file://{tmp_path}/part-0.parquet", "action": "add"})
    )
    assert sunk_counts(tmp_path, "t").counts == {
        ("t", 0, JAN1): 2,
        ("t", 0, JAN1 + WINDOW_MS): 1,
        ("t", 1, JAN1): 1,
    }


def test_window_alert_of_the_topology():
    agg = {
        "topic": "t",
        "partition": 1,
        "window_start": JAN1,
        "counts": {"produced": {"gen": 10}, "consumed": {"app": 10}},
    }
    assert window_alert(agg) is None
    assert window_alert(agg, ["app", "late-app"]) == {
        "topic": "t",
        "partition": 1,
        "window_start": JAN1,
        "window_start_utc": "2013-01-01T00:00:00Z",
        "produced": 10,
        "consumed": {"app": 10, "late-app": 0},
        "missing": 10,
    }
    assert window_alert({**agg, "counts": {"consumed": {"app": 3}}}) is None  # nothing produced


def test_config_key_is_validated_and_optional():
    base = {"application.id": "a", "bootstrap.servers": "localhost:9092"}
    assert StreamsConfig.from_mapping(base).audit_topic is None
    assert StreamsConfig.from_mapping({**base, "streamtable.audit.topic": "audit"}).audit_topic
    with pytest.raises(
        ConfigError,
        match=r"Config 'streamtable.audit.topic' expects a Kafka topic name: 1-249 characters "
        r"from \[a-zA-Z0-9._-\], not '.' or '..'; got 'audit topic'",
    ):
        StreamsConfig.from_mapping({**base, "streamtable.audit.topic": "audit topic"})
    with pytest.raises(ConfigError, match=r"Did you mean 'streamtable.audit.topic'"):
        StreamsConfig.from_mapping({**base, "streamtable.audit.topics": "audit"})


def test_producer_reporter_is_checked_before_producing():
    from streamtable.demo.flights_data import produce_records

    with pytest.raises(AuditError, match=r"Audit reporter must be a non-empty str without"):
        produce_records("localhost:1", "t", [], audit_topic="audit", reporter="a|b")


def _cli(monkeypatch, report, *args):
    seen = {}

    def fake_report(bootstrap, topic, *, files, timeout):
        seen.update(bootstrap=bootstrap, topic=topic, files=files)
        if isinstance(report, Exception):
            raise report
        return report

    monkeypatch.setattr(report_module, "audit_report", fake_report)
    result = CliRunner().invoke(cli, ["audit", "--bootstrap-servers", "h:1", *args])
    return result, seen


def test_cli_prints_the_differing_windows_and_exits_1(monkeypatch):
    report = AuditReport([WindowAudit("flights", 2, JAN1, 120, {"app": 100}, None)])
    result, seen = _cli(monkeypatch, report, "--files", "/data/out=flights", "--topic", "aud")
    assert result.exit_code == 1, result.output
    assert seen == {"bootstrap": "h:1", "topic": "aud", "files": [("/data/out", "flights")]}
    lines = result.output.splitlines()
    assert lines[2].split() == ["flights", "2", "2013-01-01T00:00:00Z", "120", "100", "-", "20"]
    assert lines[-1] == ("audit: 1 window(s) of 1 topic(s) compared, 1 differ (20 records missing)")


def test_cli_exits_0_without_differences_and_prints_json(monkeypatch):
    report = AuditReport([WindowAudit("flights", 0, JAN1, 5, {"app": 5}, None)])
    result, _ = _cli(monkeypatch, report, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ok"] is True


def test_cli_errors(monkeypatch):
    result, _ = _cli(monkeypatch, StreamtableError("The audit topic 'audit' does not exist"))
    assert result.exit_code == 1
    assert "Error: The audit topic 'audit' does not exist" in result.output
    result, _ = _cli(monkeypatch, AuditReport([]), "--files", "no-topic")
    assert result.exit_code == 2
    assert "expected PATH=TOPIC" in result.output
