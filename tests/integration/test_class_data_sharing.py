"""The class data sharing options work with this machine's Java: a JVM that records writes an
archive at its exit, and the next JVM maps it (``-Xshare:on`` fails the JVM if it cannot)."""

from __future__ import annotations

import subprocess

import pytest

from streamtable.runtime import class_data_sharing as cds
from streamtable.runtime.jars import java_executable
from streamtable.runtime.spark import current_archive_plan

pytestmark = pytest.mark.integration


def test_a_recorded_archive_is_mapped_by_the_next_jvm(tmp_path):
    java = java_executable()
    key = cds.driver_archive_key()
    if key is None:
        pytest.skip("this Java cannot share classes dynamically (not HotSpot 13+)")
    record = cds.plan_archive(key, tmp_path)
    assert record.recording is not None
    proc = subprocess.Popen(
        [java, *record.options, "-version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    record.register(proc.pid)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    use = cds.plan_archive(key, tmp_path)
    archive = tmp_path / f"{key}.jsa"
    assert archive.is_file() and archive.stat().st_size > 0
    assert use.recording is None
    proc = subprocess.run(
        [java, *[o for o in use.options if o != "-Xshare:auto"], "-Xshare:on", "-version"],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]


def test_the_sessions_key_changes_with_streamtable_s_session_defaults(monkeypatch):
    from streamtable.runtime import spark as spark_module

    before = spark_module.session_archive_key(None)
    if before is None:
        pytest.skip("this Java cannot share classes dynamically (not HotSpot 13+)")
    assert spark_module.session_archive_key(None) == before
    manager = "spark.sql.streaming.checkpointFileManagerClass"
    monkeypatch.setitem(spark_module._DEFAULTS, manager, "another.CheckpointFileManager")
    assert spark_module.session_archive_key(None) != before


def test_the_sessions_key_changes_with_the_jar_a_local_session_puts_on_its_class_path():
    # an archive maps only for the class path it was recorded with
    from streamtable.runtime import spark as spark_module

    plain = spark_module.session_archive_key(None)
    if plain is None:
        pytest.skip("this Java cannot share classes dynamically (not HotSpot 13+)")
    one = {"spark.driver.extraClassPath": "/cache/local-fs-1/streamtable-local-fs.jar"}
    other = {"spark.driver.extraClassPath": "/cache/local-fs-2/streamtable-local-fs.jar"}
    keys = {plain, *(spark_module.session_archive_key(None, e) for e in (one, other))}
    assert len(keys) == 3


def test_the_test_sessions_driver_jvm_takes_the_options_and_shares_classes(spark):
    plan = current_archive_plan()
    if plan is None or not plan.options:
        pytest.skip("this session's JVM was started without class data sharing options")
    jvm = spark.sparkContext._jvm
    args = set(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(plan.options) <= args
    vm_info = jvm.java.lang.System.getProperty("java.vm.info")
    if plan.recording is None:  # an archive exists: the JVM mapped it (else it says "mixed mode")
        assert "sharing" in vm_info, vm_info
