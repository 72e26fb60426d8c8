"""KStream.to_files arguments and streamtable.files' reading of Spark's file-sink log (no JVM)."""

from __future__ import annotations

import json

import pytest

from streamtable import Serdes, StreamsBuilder
from streamtable.errors import StreamsError, TopologyError
from streamtable.files import committed_files
from streamtable.topology.nodes import FileSinkNode


def _sink(**kwargs):
    b = StreamsBuilder()
    b.stream("in", key_serde=Serdes.string()).to_files(**kwargs)
    (node,) = b.build().graph.of_type(FileSinkNode)
    return node


def test_arguments_become_the_node():
    node = _sink(path="/out", partition_by=["date", "key"], format="orc", name="archive")
    assert (node.name, node.path, node.format, node.partition_by) == (
        "archive",
        "/out",
        "orc",
        ("date", "key"),
    )
    assert node.key_serde == Serdes.string()  # the stream's serde by default
    assert _sink(path="/out", partition_by="date").partition_by == ("date",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": ""}, "path must be a non-empty directory path or URI"),
        ({"path": "/o", "format": "csv"}, "format 'csv' is not supported; use one of parquet"),
        ({"path": "/o", "partition_by": ["date", ""]}, r"partition_by takes column names .*''"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(TopologyError, match=message):
        _sink(**kwargs)


def _log(root, batch, entries, suffix=""):
    log = root / "_spark_metadata"
    log.mkdir(exist_ok=True)
    lines = ["v1", *(json.dumps({"path": f"file://{root}/{p}", "action": a}) for p, a in entries)]
    (log / f"{batch}{suffix}").write_text("\n".join(lines))


def test_committed_files_follow_the_log_from_its_last_compaction(tmp_path):
    _log(tmp_path, 0, [("a.parquet", "add")])
    _log(tmp_path, 1, [("b.parquet", "add")])
    _log(tmp_path, 1, [("a.parquet", "add"), ("b.parquet", "add")], ".compact")
    _log(tmp_path, 2, [("date=2026-11-25/c.parquet", "add"), ("a.parquet", "delete")])
    (tmp_path / "crashed-attempt.parquet").write_bytes(b"")  # in the directory, not in the log
    files = committed_files(f"file://{tmp_path}")
    assert [str(f.relative_to(tmp_path)) for f in files] == [
        "b.parquet",
        "date=2026-11-25/c.parquet",
    ]


def test_a_directory_without_a_log_or_with_a_damaged_one_is_named(tmp_path):
    with pytest.raises(StreamsError, match=r"has no file-sink log \(_spark_metadata\)"):
        committed_files(tmp_path)
    _log(tmp_path, 0, [("a.parquet", "add")])
    _log(tmp_path, 2, [("b.parquet", "add")])
    with pytest.raises(StreamsError, match=r"misses batch 1 \(it has \[0, 2\]\)"):
        committed_files(tmp_path)
    (tmp_path / "_spark_metadata" / "1").write_text("v2\n")
    with pytest.raises(StreamsError, match="is not a Spark file-sink log file"):
        committed_files(tmp_path)


def test_remote_paths_are_left_to_spark():
    with pytest.raises(StreamsError, match="read others with Spark"):
        committed_files("s3a://bucket/trades")


def test_commit_interval_is_a_positive_timedelta():
    from datetime import timedelta

    assert _sink(path="/o", commit_interval=timedelta(seconds=30)).commit_interval_ms == 30_000
    assert _sink(path="/o").commit_interval_ms is None
    with pytest.raises(TopologyError, match="commit_interval must be a positive timedelta"):
        _sink(path="/o", commit_interval=30)
