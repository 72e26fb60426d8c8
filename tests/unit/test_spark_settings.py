"""The session settings streamtable starts Spark with: its checkpoint-file defaults and how a
user's ``spark.*`` keys override them."""

from __future__ import annotations

import pytest

from streamtable.runtime import spark as spark_module
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


def test_a_local_session_gets_the_forkless_file_system_unless_the_user_chose_one(monkeypatch):
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setattr(spark_module.SparkContext, "_gateway", None)  # no JVM launched yet
    ours = {"spark.driver.extraClassPath": "/cache/lfs.jar", FILE_IMPL: "io.example.Fs"}
    monkeypatch.setattr(spark_module, "local_session_extras", lambda home: dict(ours))
    assert spark_module.session_extras({}, None) == ours
    assert spark_module.session_extras({"spark.master": "local"}, None) == ours
    assert spark_module.session_extras({FILE_IMPL: "com.example.Fs"}, None) == {}
    # executors of their own, which lack the jar
    assert spark_module.session_extras({"spark.master": "local-cluster[2,1,1024]"}, None) == {}
    assert spark_module.session_extras({"spark.master": "spark://127.0.0.1:7077"}, None) == {}


def test_a_jvm_already_launched_keeps_its_file_system(monkeypatch):
    # its class path lacks the jar: naming the class would break every file: path
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setattr(spark_module, "local_session_extras", lambda home: {FILE_IMPL: "x"})
    monkeypatch.setattr(spark_module.SparkContext, "_gateway", object())
    assert spark_module.session_extras({}, None) == {}


def test_a_driver_class_path_in_pyspark_submit_args_keeps_hadoops_file_system(monkeypatch):
    # PySpark's launcher would put the user's class path in place of the jar's
    monkeypatch.setattr(spark_module, "local_session_extras", lambda home: {FILE_IMPL: "x"})
    monkeypatch.setattr(spark_module.SparkContext, "_gateway", None)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-class-path /opt/my.jar pyspark-shell")
    assert spark_module.session_extras({}, None) == {}
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.driver.extraClassPath=/x pyspark-shell")
    assert spark_module.session_extras({}, None) == {}
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 4g pyspark-shell")
    assert spark_module.session_extras({}, None) == {FILE_IMPL: "x"}


def test_a_users_driver_class_path_comes_after_the_jar():
    extras = {"spark.driver.extraClassPath": "/cache/lfs.jar", FILE_IMPL: "io.example.Fs"}
    merged = spark_module.with_class_path(extras, {"spark.driver.extraClassPath": "/mine.jar"})
    assert merged["spark.driver.extraClassPath"] == "/cache/lfs.jar:/mine.jar"
    assert merged[FILE_IMPL] == "io.example.Fs"
