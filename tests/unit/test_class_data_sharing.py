"""The driver JVM's class data sharing archive: when a JVM records it, maps it, or does neither."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from streamtable.runtime import class_data_sharing as cds

pytestmark = pytest.mark.unit

#: the header of a complete dynamic archive (HotSpot's magic), then anything
ARCHIVE = (0xF00BABA8).to_bytes(4, "little") + b"archive bytes"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_without_an_archive_the_jvm_records_one_at_its_exit(tmp_path):
    plan = cds.plan_archive("k1", tmp_path)
    assert plan.recording is not None and plan.recording.parent == tmp_path
    assert f"-XX:ArchiveClassesAtExit={plan.recording}" in plan.options
    assert not any(o.startswith("-XX:SharedArchiveFile") for o in plan.options)


def test_a_finished_recording_is_moved_into_place_and_mapped_by_the_next_jvm(tmp_path):
    plan = cds.plan_archive("k1", tmp_path)
    plan.register(_dead_pid())
    assert plan.recording is not None
    plan.recording.write_bytes(ARCHIVE)  # what the JVM writes when it exits
    nxt = cds.plan_archive("k1", tmp_path)
    final = tmp_path / "k1.jsa"
    assert final.read_bytes() == ARCHIVE
    assert nxt.recording is None
    assert f"-XX:SharedArchiveFile={final}" in nxt.options and "-Xshare:auto" in nxt.options
    # no leftover recording or marker; the mapped archive's time of use is noted beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k1.jsa", "k1.used"]


def test_while_a_jvm_records_others_neither_record_nor_map(tmp_path):
    plan = cds.plan_archive("k1", tmp_path)  # this process stands for its JVM until it runs
    assert plan.recording is not None
    assert cds.plan_archive("k1", tmp_path).options == ()
    # another key is another archive
    assert cds.plan_archive("k2", tmp_path).recording is not None


def test_a_recorder_killed_before_or_while_writing_leaves_nothing_and_the_next_start_records(
    tmp_path,
):
    plan = cds.plan_archive("k1", tmp_path)
    plan.register(_dead_pid())  # killed: no file
    again = cds.plan_archive("k1", tmp_path)
    assert again.recording is not None and again.recording != plan.recording
    again.register(_dead_pid())
    assert again.recording is not None
    again.recording.write_bytes(bytes(64))  # killed while writing: the header is still zeros
    third = cds.plan_archive("k1", tmp_path)
    assert third.recording is not None
    assert not (tmp_path / "k1.jsa").exists()
    assert not again.recording.exists()


def test_a_reused_pid_is_not_taken_for_the_recording_jvm(tmp_path):
    plan = cds.plan_archive("k1", tmp_path)
    assert plan.recording is not None
    plan.register(os.getpid())  # alive, but its command line does not name the recording
    plan.recording.write_bytes(ARCHIVE)
    assert cds.plan_archive("k1", tmp_path).options[0].startswith("-XX:SharedArchiveFile=")


def test_a_recording_nobody_marked_is_removed_when_old(tmp_path):
    stray = tmp_path / "k1.1-2.recording"
    stray.write_bytes(ARCHIVE)
    cds.plan_archive("k1", tmp_path)
    assert stray.exists()  # young: its JVM may still run
    os.utime(stray, (0, 0))
    cds.plan_archive("k2", tmp_path)
    assert stray.exists()  # another key's start leaves it
    cds.plan_archive("k1", tmp_path)
    assert not stray.exists()


def test_no_sharing_for_a_cache_path_with_whitespace(tmp_path):
    assert cds.plan_archive("k1", tmp_path / "my cache").options == ()


def test_an_unreadable_marker_counts_as_a_dead_recorder(tmp_path):
    plan = cds.plan_archive("k1", tmp_path)
    assert plan.recording is not None
    plan.recording.with_suffix(".json").write_text("{not json")
    plan.recording.write_bytes(ARCHIVE)
    assert cds.plan_archive("k1", tmp_path).options[0] == (
        f"-XX:SharedArchiveFile={tmp_path / 'k1.jsa'}"
    )


def test_a_folder_that_cannot_be_made_turns_sharing_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cds.plan_archive("k1", blocker / "cds").options == ()


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMTABLE_CDS_CACHE", str(tmp_path / "x"))
    assert cds.cache_dir() == tmp_path / "x"
    monkeypatch.delenv("STREAMTABLE_CDS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cds.cache_dir() == tmp_path / "streamtable" / "cds"


def test_the_key_changes_with_spark_jars(tmp_path):
    (tmp_path / "a.jar").write_bytes(b"1")
    before = cds.archive_key("java", "17", str(tmp_path))
    (tmp_path / "a.jar").write_bytes(b"12")
    assert cds.archive_key("java", "17", str(tmp_path)) != before


def test_the_defaults_digest_changes_with_streamtable_version_and_defaults(monkeypatch):
    import streamtable

    before = cds.defaults_digest({"spark.a": "1"})
    assert cds.defaults_digest({"spark.a": "1", "spark.b": "2"}) != before
    monkeypatch.setattr(streamtable, "__version__", "0.0.0-other")
    assert cds.defaults_digest({"spark.a": "1"}) != before


def test_archives_no_jvm_mapped_for_30_days_are_deleted_and_a_mapped_one_is_kept(tmp_path):
    month_ago = time.time() - 31 * 86400
    mine, old, recent, used_lately = "a" * 20, "b" * 20, "c" * 20, "d" * 20
    for key in (mine, old, recent, used_lately):
        (tmp_path / f"{key}.jsa").write_bytes(ARCHIVE)
    for key in (mine, old, used_lately):
        os.utime(tmp_path / f"{key}.jsa", (month_ago, month_ago))
    (tmp_path / f"{used_lately}.used").touch()  # mapped lately, recorded long ago
    (tmp_path / f"{old}.used").touch()
    os.utime(tmp_path / f"{old}.used", (month_ago, month_ago))
    (tmp_path / "not-ours.jsa").write_bytes(b"x")  # not an archive name of streamtable's
    os.utime(tmp_path / "not-ours.jsa", (month_ago, month_ago))
    plan = cds.plan_archive(mine, tmp_path)
    assert f"-XX:SharedArchiveFile={tmp_path / f'{mine}.jsa'}" in plan.options
    assert sorted(p.name for p in tmp_path.glob("*.jsa")) == sorted(
        [f"{mine}.jsa", f"{recent}.jsa", f"{used_lately}.jsa", "not-ours.jsa"]
    )
    assert not (tmp_path / f"{old}.used").exists()
    # mapping it marks it used (its own .used file; the archive is not written): a month from
    # now another key's start does not prune it
    assert (tmp_path / f"{mine}.used").stat().st_mtime > month_ago + 30 * 86400
    assert os.path.getmtime(tmp_path / f"{mine}.jsa") == pytest.approx(month_ago)


def test_the_register_marker_names_the_jvm(tmp_path):
    plan = cds.plan_archive("k1", tmp_path)
    plan.register(12345)
    assert plan.recording is not None
    assert json.loads(plan.recording.with_suffix(".json").read_text())["jvm_pid"] == 12345


def test_the_config_key_turns_it_off_and_refuses_other_values():
    from streamtable.config import StreamsConfig
    from streamtable.errors import ConfigError

    base = {"application.id": "a", "bootstrap.servers": "x:1"}
    assert StreamsConfig.from_mapping(base).class_data_sharing is True
    key = "streamtable.jvm.class.data.sharing"
    assert StreamsConfig.from_mapping({**base, key: "false"}).class_data_sharing is False
    assert StreamsConfig.from_mapping({**base, key: False}).class_data_sharing is False
    with pytest.raises(ConfigError, match=r"'streamtable.jvm.class.data.sharing' expects true or"):
        StreamsConfig.from_mapping({**base, key: "sometimes"})
