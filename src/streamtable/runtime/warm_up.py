"""Work a local session's first micro-batches would otherwise do, started ahead in the background.

While an application compiles its topology and its queries plan their first micro-batch, the
local executor (the driver's own JVM) is idle. Two pieces of a first micro-batch's work do not
depend on the query and are done then instead, each in a daemon thread of its own:

- :func:`start_python_workers`: the executor's Python worker daemon and a worker per core.
- :func:`warm_state_store`: RocksDB's native library, and the JSON reader of its checkpoint
  metadata, which every RocksDB state store uses when it loads a version.

Nothing depends on either: a failure is only logged (at debug level), and a micro-batch that
starts first does the same work itself, as it would without them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading

from pyspark.sql import SparkSession

log = logging.getLogger("streamtable")

_STATE = "org.apache.spark.sql.execution.streaming.state"
_ROCKSDB_PROVIDER = f"{_STATE}.RocksDBStateStoreProvider"
_PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


def start_python_workers(spark: SparkSession) -> None:
    """Start the local executor's Python worker daemon and a worker per core.

    The first tasks then find the daemon (with its preloaded modules) and idle workers ready
    instead of starting them (about 1 s of each first task on 2 cores). Runs a one-partition-
    per-core ``mapInArrow`` job described as ``streamtable: start Python workers``.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A session whose master is local (its executor is this JVM).
    """

    def same(batches):  # type: ignore[no-untyped-def]
        yield from batches

    sc = spark.sparkContext
    try:
        sc.setLocalProperty("spark.job.description", "streamtable: start Python workers")
        n = max(1, sc.defaultParallelism)
        spark.range(0, n, 1, n).mapInArrow(same, "id long").collect()
    except Exception as e:  # pragma: no cover - best effort
        log.debug("starting Python workers ahead failed: %s", e)
    finally:
        with contextlib.suppress(Exception):
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def warm_state_store(spark: SparkSession) -> bool:
    """Load RocksDB's native library and its checkpoint metadata reader in this JVM.

    A RocksDB state store's first load in a JVM extracts the native library from its jar
    (``RocksDBLoader.loadLibrary``), and reads the version's checkpoint metadata with
    Jackson's Scala module, whose first use builds its serializers: measured at 0.17 s and
    0.5 s in an idle session, and the largest parts of the ~1 s per state partition a
    restart's first stateful micro-batch spent opening its store (docs/deployment.md,
    "RocksDB warmed ahead"). Both are done here once, with an empty metadata file written and
    read back in a temporary directory (removed after).

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A session whose master is local (its executor is this JVM).

    Returns
    -------
    bool
        True when both were done; False when the session's state store provider is not
        RocksDB's (nothing to do) or a step failed (logged at debug level; the first store
        load then does it, as without this).
    """
    if spark.conf.get(_PROVIDER_KEY, "") != _ROCKSDB_PROVIDER:
        return False
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    state = jvm.org.apache.spark.sql.execution.streaming.state
    try:
        state.RocksDBLoader.loadLibrary()
        with tempfile.TemporaryDirectory(prefix="streamtable-warm-up-") as tmp:
            path = jvm.java.io.File(os.path.join(tmp, "metadata"))
            no_files = jvm.org.apache.spark.api.python.PythonUtils.toSeq(jvm.java.util.ArrayList())
            state.RocksDBCheckpointMetadata.apply(no_files, 0).writeToFile(path)
            state.RocksDBCheckpointMetadata.readFromFile(path)
        return True
    except Exception as e:  # best effort
        log.debug("warming RocksDB's state store ahead failed: %s", e)
        return False


def start(spark: SparkSession) -> list[threading.Thread]:
    """Start :func:`warm_state_store` and :func:`start_python_workers` in daemon threads.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A session whose master is local, with streamtable's worker daemon.

    Returns
    -------
    list of threading.Thread
        The started threads (``streamtable-warm-up-state``, ``streamtable-warm-up-workers``),
        for a caller that wants to wait for them; nobody has to.
    """
    threads = [
        threading.Thread(
            target=warm_state_store, args=(spark,), name="streamtable-warm-up-state", daemon=True
        ),
        threading.Thread(
            target=start_python_workers,
            args=(spark,),
            name="streamtable-warm-up-workers",
            daemon=True,
        ),
    ]
    for t in threads:
        t.start()
    return threads
