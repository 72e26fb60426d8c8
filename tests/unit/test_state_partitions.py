"""The notice a start gives when ``streamtable.shuffle.partitions`` differs from what the
checkpoints of its stateful queries keep (``streamtable.runtime.state_partitions``)."""

from __future__ import annotations

from pathlib import Path

from streamtable.runtime.state_partitions import fixed_partitions_notice, kept_partitions


def checkpoint(folder: Path, partitions: int, *, stateful: bool = True) -> Path:
    """A query checkpoint as Spark leaves it: offset log entries, and ``state`` if stateful."""
    (folder / "offsets").mkdir(parents=True)
    meta = f'{{"batchWatermarkMs":0,"conf":{{"spark.sql.shuffle.partitions":"{partitions}"}}}}'
    for batch in (0, 1):
        (folder / "offsets" / str(batch)).write_text(f"v1\n{meta}\n-")
    if stateful:
        (folder / "state").mkdir()
    return folder


def test_only_the_stateful_queries_of_this_start_are_named(tmp_path):
    queries = {
        "counts": checkpoint(tmp_path / "counts", 4),
        "copy": checkpoint(tmp_path / "copy", 4, stateful=False),
        "new-sink": tmp_path / "new-sink",  # no checkpoint yet: takes the setting
    }
    checkpoint(tmp_path / "removed-sink", 4)  # an unused checkpoint: not passed, not named
    notice = fixed_partitions_notice(
        kept_partitions(queries), 2, "app", "streamtable reset --application-id app"
    )
    assert notice is not None
    assert notice.startswith("[app] streamtable.shuffle.partitions=2 does not apply")
    assert "(query counts: 4)" in notice
    assert "copy" not in notice and "removed" not in notice
    assert "Set streamtable.shuffle.partitions=4 to match" in notice
    assert notice.endswith(": streamtable reset --application-id app")


def test_checkpoints_that_disagree_can_only_be_reset(tmp_path):
    queries = {
        "a": checkpoint(tmp_path / "a", 4),
        "b": checkpoint(tmp_path / "b", 8),
        "c": checkpoint(tmp_path / "c", 8),
    }
    notice = fixed_partitions_notice(kept_partitions(queries), 2, "app", "RESET")
    assert notice is not None
    assert "(query a: 4; queries b, c: 8)" in notice
    assert "to match" not in notice and "To change them, reset" in notice
    assert fixed_partitions_notice(kept_partitions({"a": queries["a"]}), 4, "app", "RESET") is None
