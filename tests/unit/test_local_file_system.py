"""Building the local file system jar (``streamtable.runtime.local_file_system``) without a JVM:
a stand-in ``javac`` writes the class files, or fails."""

from __future__ import annotations

import logging
import os
import stat
import zipfile

import pytest

from streamtable.runtime import local_file_system as lfs

pytestmark = pytest.mark.unit


def _spark_jars(tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "hadoop-client-api-3.5.0.jar").write_bytes(b"not read by the stand-in")
    return jars


def _javac(tmp_path, body: str):
    """An executable standing in for javac: ``$DIR`` is the folder after ``-d``."""
    script = tmp_path / "javac"
    script.write_text(
        "#!/bin/sh\n"
        'while [ "$#" -gt 0 ]; do if [ "$1" = "-d" ]; then DIR="$2"; fi; shift; done\n' + body
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


_WRITES_CLASSES = (
    'mkdir -p "$DIR/io/streamtable/hadoop"\n'
    'printf "\\312\\376" > "$DIR/io/streamtable/hadoop/ForklessLocalFileSystem.class"\n'
)


def test_the_jar_holds_what_javac_wrote_and_is_reused(tmp_path):
    jars = _spark_jars(tmp_path)
    javac = _javac(tmp_path, _WRITES_CLASSES)
    jar = lfs.forkless_jar(jars, tmp_path / "cache", javac)
    assert jar is not None and jar.is_file()
    with zipfile.ZipFile(jar) as z:
        assert "io/streamtable/hadoop/ForklessLocalFileSystem.class" in z.namelist()
        assert "META-INF/MANIFEST.MF" in z.namelist()
    # the cached jar is used: the same compiler, now failing, is not run
    assert _javac(tmp_path, "exit 3\n") == javac
    assert lfs.forkless_jar(jars, tmp_path / "cache", javac) == jar


def test_a_rebuild_gives_the_same_file_and_modification_time(tmp_path):
    # the class data sharing archive maps the driver's class path only if the jar is unchanged
    jars = _spark_jars(tmp_path)
    javac = _javac(tmp_path, _WRITES_CLASSES)
    first = lfs.forkless_jar(jars, tmp_path / "cache-1", javac)
    second = lfs.forkless_jar(jars, tmp_path / "cache-2", javac)
    assert first is not None and second is not None and first != second
    assert first.read_bytes() == second.read_bytes()
    assert os.stat(first).st_mtime == os.stat(second).st_mtime


def test_a_failed_compile_gives_no_jar_and_logs_javacs_error(tmp_path, caplog):
    jars = _spark_jars(tmp_path)
    javac = _javac(
        tmp_path, "echo 'error: package org.apache.hadoop.fs does not exist' >&2\nexit 1\n"
    )
    with caplog.at_level(logging.DEBUG, logger="streamtable"):
        assert lfs.forkless_jar(jars, tmp_path / "cache", javac) is None
    assert "javac failed (exit 1)" in caplog.text
    assert "package org.apache.hadoop.fs does not exist" in caplog.text


def test_a_failed_compile_is_not_tried_again_in_the_process(tmp_path, monkeypatch):
    jars = _spark_jars(tmp_path)
    monkeypatch.setattr(lfs, "_failed", set())
    calls = tmp_path / "calls"
    javac = _javac(tmp_path, f"echo x >> {calls}\nexit 1\n")
    monkeypatch.setattr(lfs, "javac_executable", lambda: javac)
    assert lfs.session_settings(jars, tmp_path / "cache") == {}  # the session keeps Hadoop's
    assert lfs.session_settings(jars, tmp_path / "cache") == {}
    assert calls.read_text().count("x") == 1


def test_another_javac_builds_a_jar_of_its_own(tmp_path):
    # another JDK may write other bytes: the class data sharing archive keys on the jar's path
    jars = _spark_jars(tmp_path)
    (tmp_path / "jdk-a").mkdir()
    (tmp_path / "jdk-b").mkdir()
    a = lfs.forkless_jar(jars, tmp_path / "cache", _javac(tmp_path / "jdk-a", _WRITES_CLASSES))
    b = lfs.forkless_jar(jars, tmp_path / "cache", _javac(tmp_path / "jdk-b", _WRITES_CLASSES))
    assert a is not None and b is not None and a.parent != b.parent


def test_an_unexpected_error_gives_no_jar_instead_of_failing_the_session(tmp_path, caplog):
    jars = _spark_jars(tmp_path)
    cache = tmp_path / "cache-is-a-file"
    cache.write_text("")
    with caplog.at_level(logging.DEBUG, logger="streamtable"):
        assert lfs.forkless_jar(jars, cache, _javac(tmp_path, _WRITES_CLASSES)) is None
    assert "not built" in caplog.text


def test_without_javac_the_session_keeps_hadoops_own_file_system(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(lfs, "javac_executable", lambda: None)
    jars = _spark_jars(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="streamtable"):
        assert lfs.session_settings(jars, tmp_path / "cache") == {}
    assert "no javac" in caplog.text


def test_with_a_jar_the_session_gets_it_on_the_class_path_and_the_class_for_file_paths(
    tmp_path, monkeypatch
):
    jars = _spark_jars(tmp_path)
    monkeypatch.setattr(lfs, "javac_executable", lambda: _javac(tmp_path, _WRITES_CLASSES))
    settings = lfs.session_settings(jars, tmp_path / "cache")
    assert settings["spark.hadoop.fs.file.impl"] == "io.streamtable.hadoop.ForklessLocalFileSystem"
    assert settings["spark.driver.extraClassPath"].endswith("streamtable-local-fs.jar")
    assert os.path.isfile(settings["spark.driver.extraClassPath"])


def test_a_spark_without_hadoops_api_jar_gives_no_jar(tmp_path, caplog):
    (tmp_path / "jars").mkdir()
    with caplog.at_level(logging.DEBUG, logger="streamtable"):
        assert lfs.forkless_jar(tmp_path / "jars", tmp_path / "cache", "/bin/false") is None
    assert "no hadoop-client-api-*.jar" in caplog.text
