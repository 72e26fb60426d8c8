"""Checkpoint files are written through Hadoop's FileSystem on its own local filesystem (or
streamtable's subclass of it, see ``streamtable.runtime.local_file_system``), and keep the two
rename rules Spark's checkpoints rely on.

The session's default (``streamtable.runtime.spark``) replaces Spark's FileContext manager,
whose renames fork ``readlink`` processes. Spark writes every checkpoint file to a temporary
file and renames it: an offset log entry must never replace an existing one (a second writer
is an error), a state store version may be written again when a micro-batch is re-run and must
then replace the old file.
"""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError

from streamtable.runtime import local_file_system as lfs

pytestmark = pytest.mark.integration

_MANAGERS = "org.apache.spark.sql.execution.streaming.checkpointing"


def _manager(spark, directory):
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    path = jvm.org.apache.hadoop.fs.Path(str(directory))
    manager = getattr(jvm, _MANAGERS).CheckpointFileManager.create(path, conf)
    return manager, path


def _write(spark, manager, path, name: str, data: bytes, overwrite: bool) -> None:
    jvm = spark.sparkContext._jvm
    out = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(path, name), overwrite)
    out.write(bytearray(data))
    out.close()


def _read(spark, manager, path, name: str) -> bytes:
    """The file's bytes read through the manager: Hadoop checks them against the .crc file."""
    jvm = spark.sparkContext._jvm
    stream = manager.open(jvm.org.apache.hadoop.fs.Path(path, name))
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def test_the_session_writes_checkpoints_through_hadoops_local_filesystem(spark, tmp_path):
    manager, path = _manager(spark, tmp_path)
    assert manager.getClass().getName() == f"{_MANAGERS}.FileSystemBasedCheckpointFileManager"
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fs = path.getFileSystem(conf).getClass()
    # streamtable's subclass, whose permission changes start no process (local_file_system),
    # where a javac could compile it
    assert fs.getName() == (
        lfs.CLASS_NAME if lfs.javac_executable() else "org.apache.hadoop.fs.LocalFileSystem"
    )
    local = spark.sparkContext._jvm.java.lang.Class.forName("org.apache.hadoop.fs.LocalFileSystem")
    assert local.isAssignableFrom(fs)


def test_a_checkpoint_file_that_may_not_be_replaced_is_refused_and_kept(spark, tmp_path):
    manager, path = _manager(spark, tmp_path)
    _write(spark, manager, path, "0", b"first writer", overwrite=False)
    with pytest.raises(Py4JJavaError) as raised:
        _write(spark, manager, path, "0", b"second writer", overwrite=False)
    error = raised.value.java_exception
    hadoop_exists = spark.sparkContext._jvm.java.lang.Class.forName(
        "org.apache.hadoop.fs.FileAlreadyExistsException"
    )
    # Spark's offset log treats exactly this exception as "another query wrote this batch"
    assert hadoop_exists.isInstance(error), error.getClass().getName()
    assert _read(spark, manager, path, "0") == b"first writer"


def test_a_state_version_written_again_replaces_the_old_file(spark, tmp_path):
    manager, path = _manager(spark, tmp_path)
    _write(spark, manager, path, "3.changelog", b"first attempt", overwrite=True)
    _write(spark, manager, path, "3.changelog", b"re-run batch", overwrite=True)
    assert _read(spark, manager, path, "3.changelog") == b"re-run batch"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".crc")) == [
        "3.changelog"
    ]
