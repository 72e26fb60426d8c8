"""What a local session does ahead of its first micro-batch (``streamtable.runtime.warm_up``).

Each warm-up is best effort and its failure only logged, so these tests are what tells a Spark
upgrade that renamed a class it calls: the warm-up would otherwise stop silently.
"""

from __future__ import annotations

import tempfile

import pytest

from streamtable.runtime import warm_up

pytestmark = pytest.mark.integration

_PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def test_warm_state_store_loads_rocksdb_and_its_metadata_reader(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert spark.conf.get(_PROVIDER).endswith("RocksDBStateStoreProvider")
    assert warm_up.warm_state_store(spark) is True
    # the metadata file it wrote and read back is gone with its directory
    assert list(tmp_path.iterdir()) == []


def test_warm_state_store_does_nothing_for_another_provider(spark):
    rocksdb = spark.conf.get(_PROVIDER)
    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    spark.conf.set(_PROVIDER, hdfs)
    try:
        assert warm_up.warm_state_store(spark) is False
    finally:
        spark.conf.set(_PROVIDER, rocksdb)


def test_start_runs_both_warm_ups_in_daemon_threads(spark):
    threads = warm_up.start(spark)
    assert [t.name for t in threads] == [
        "streamtable-warm-up-state",
        "streamtable-warm-up-workers",
    ]
    for t in threads:
        assert t.daemon
        t.join(timeout=120)
        assert not t.is_alive(), f"{t.name} still running after 120 s"
