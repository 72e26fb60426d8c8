"""What a local session does ahead of its first micro-batch (``streamtable.runtime.warm_up``).

Each warm-up is best effort and its failure only logged, so these tests are what tells a Spark
upgrade that renamed a class it calls: the warm-up would otherwise stop silently.
"""

from __future__ import annotations

import logging
import threading

import pytest

from streamtable.runtime import warm_up

pytestmark = pytest.mark.integration

_PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def _session_warm_up_done() -> None:
    """Wait for the warm-up the session fixture's get_spark started (it shares the JVM)."""
    for t in threading.enumerate():
        if t.name == "streamtable-warm-up":
            t.join(timeout=120)
            assert not t.is_alive(), f"{t.name} still running after 120 s"


def test_load_rocksdb_library_calls_this_sparks_loader(spark):
    assert spark.conf.get(_PROVIDER).endswith("RocksDBStateStoreProvider")
    assert warm_up.load_rocksdb_library(spark) is True


def test_load_rocksdb_library_does_nothing_for_another_provider(spark):
    _session_warm_up_done()  # its RocksDB step reads the setting changed here
    rocksdb = spark.conf.get(_PROVIDER)
    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    spark.conf.set(_PROVIDER, hdfs)
    try:
        assert warm_up.load_rocksdb_library(spark) is False
    finally:
        spark.conf.set(_PROVIDER, rocksdb)


def test_start_runs_the_warm_up_in_a_daemon_thread_without_failing(spark, caplog):
    _session_warm_up_done()
    caplog.set_level(logging.DEBUG, logger="streamtable")
    thread = warm_up.start(spark)
    assert thread.name == "streamtable-warm-up"
    assert thread.daemon
    thread.join(timeout=120)
    assert not thread.is_alive(), "the warm-up still running after 120 s"
    # each step logs its failure at debug level and carries on
    failed = [r.getMessage() for r in caplog.records if "ahead failed" in r.getMessage()]
    assert failed == []
