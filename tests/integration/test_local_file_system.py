"""The local file system of local sessions (``streamtable.runtime.local_file_system``): the
class is what the session uses for ``file:`` paths, it compiles against this Spark's Hadoop,
and every permission it sets is the one Hadoop's own ``LocalFileSystem`` sets."""

from __future__ import annotations

import os
import stat
import zipfile

import pytest
from py4j.protocol import Py4JJavaError

from streamtable.runtime import local_file_system as lfs
from streamtable.runtime.spark_home import installed_spark_home

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        lfs.javac_executable() is None, reason="no javac: sessions keep Hadoop's own class"
    ),
]


def test_a_local_session_uses_it_for_file_paths(spark, tmp_path):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri()).getFileSystem(conf)
    assert fs.getClass().getName() == lfs.CLASS_NAME
    assert fs.getRawFileSystem().getClass().getName() == lfs.CLASS_NAME + "$Raw"


def test_it_compiles_against_this_sparks_hadoop(tmp_path):
    jar = lfs.forkless_jar(installed_spark_home() / "jars", tmp_path)
    assert jar is not None
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert {
        "io/streamtable/hadoop/ForklessLocalFileSystem.class",
        "io/streamtable/hadoop/ForklessLocalFileSystem$Raw.class",
    } <= names


def _modes(spark, fs, root):
    """Create, make and change permissions under ``root`` through ``fs``; the modes that
    result, by relative path."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path
    perm = jvm.org.apache.hadoop.fs.permission.FsPermission
    base = root.as_uri()
    fs.create(path(f"{base}/created"), True).close()  # the default permission, less the umask
    fs.mkdirs(path(f"{base}/made"), perm(0o750))
    fs.create(path(f"{base}/private"), True).close()
    fs.setPermission(path(f"{base}/private"), perm(0o600))
    fs.mkdirs(path(f"{base}/shared"))
    fs.setPermission(path(f"{base}/shared"), perm(0o1777))  # the sticky bit: Hadoop's own code
    fs.setPermission(path(f"{base}/made"), perm(0o705))
    # a directory made under a set-group-ID one inherits the bit, and chmod keeps it
    (root / "group").mkdir()
    os.chmod(root / "group", 0o2775)
    fs.mkdirs(path(f"{base}/group/inherits"), perm(0o750))
    fs.create(path(f"{base}/group/inherits/file"), True).close()
    return {
        str(p.relative_to(root)): stat.S_IMODE(os.stat(p).st_mode) for p in sorted(root.rglob("*"))
    }


def test_the_permissions_it_sets_are_the_ones_hadoops_own_file_system_sets(spark, tmp_path):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    ours = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri()).getFileSystem(conf)
    assert ours.getClass().getName() == lfs.CLASS_NAME
    hadoops = jvm.org.apache.hadoop.fs.LocalFileSystem()
    hadoops.initialize(jvm.java.net.URI("file:///"), conf)
    (tmp_path / "ours").mkdir()
    (tmp_path / "hadoops").mkdir()
    got = _modes(spark, ours, tmp_path / "ours")
    want = _modes(spark, hadoops, tmp_path / "hadoops")
    assert got == want
    assert got["private"] == 0o600 and got["made"] == 0o705 and got["shared"] == 0o1777
    assert got["group/inherits"] & 0o2000
    assert ".created.crc" in got  # checksummed, as Hadoop's


def test_it_sets_permissions_without_a_chmod_process(spark, tmp_path):
    # Hadoop's chmod fails with its ExitCodeException; Java's call names the missing file
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri()).getFileSystem(conf)
    missing = jvm.org.apache.hadoop.fs.Path((tmp_path / "missing").as_uri())
    perm = jvm.org.apache.hadoop.fs.permission.FsPermission(0o644)
    with pytest.raises(Py4JJavaError) as raised:
        fs.setPermission(missing, perm)
    assert raised.value.java_exception.getClass().getName() == "java.nio.file.NoSuchFileException"
