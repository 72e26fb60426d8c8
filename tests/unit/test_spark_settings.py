"""The session settings streamtable starts Spark with: its checkpoint-file defaults and how a
user's ``spark.*`` keys override them."""

from __future__ import annotations

import pytest

from streamtable.runtime.spark import _session_settings

pytestmark = pytest.mark.unit

MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FILE_IMPL = "spark.hadoop.fs.file.impl"


def test_checkpoints_go_through_hadoops_filesystem_on_its_local_filesystem_by_default():
    settings = _session_settings({})
    assert settings[MANAGER] == (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    )
    assert settings[FILE_IMPL] == "org.apache.hadoop.fs.LocalFileSystem"


def test_another_local_filesystem_falls_back_to_sparks_own_checkpoint_manager():
    # a filesystem whose rename may not replace files must not get the FileSystem manager
    settings = _session_settings({FILE_IMPL: "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem"})
    assert MANAGER not in settings
    assert settings[FILE_IMPL] == "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem"


def test_a_users_checkpoint_manager_is_kept_whatever_the_filesystem():
    mine = "com.example.MyCheckpointFileManager"
    assert _session_settings({MANAGER: mine})[MANAGER] == mine
    assert _session_settings({MANAGER: mine, FILE_IMPL: "com.example.Fs"})[MANAGER] == mine


def test_a_users_spark_keys_override_the_defaults():
    settings = _session_settings({"spark.master": "local[1]", "spark.driver.memory": "4g"})
    assert (settings["spark.master"], settings["spark.driver.memory"]) == ("local[1]", "4g")
    assert settings["spark.ui.enabled"] == "false"
