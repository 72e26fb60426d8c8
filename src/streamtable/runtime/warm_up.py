"""Work a local session's first micro-batches would otherwise do, started ahead in the background.

While an application compiles its topology and its queries plan their first micro-batch, the
local executor (the driver's own JVM) is idle. :func:`start` uses that time, in one daemon
thread, for two pieces of a first micro-batch's work that do not depend on the query:

- :func:`start_python_workers`: the executor's Python worker daemon and a worker per core;
- then :func:`load_rocksdb_library`: RocksDB's native library.

Nothing depends on either: a failure is only logged (at debug level), and a micro-batch that
starts first does the same work itself, as it would without them.

Both were measured against the restart they serve; docs/deployment.md ("Python workers
started ahead") has the figures, and a RocksDB warm-up of its own that was tried and not kept.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from pyspark.sql import SparkSession

log = logging.getLogger("streamtable")

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


def load_rocksdb_library(spark: SparkSession) -> bool:
    """Load RocksDB's native library in this JVM (``RocksDBLoader.loadLibrary``).

    A RocksDB state store's first load in a JVM otherwise extracts it from its jar (0.17 s in
    an idle session). Concurrent loads wait for one another (the loader is synchronized).

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A session whose master is local (its executor is this JVM).

    Returns
    -------
    bool
        True when it is loaded; False when the session's state store provider has no
        ``RocksDB`` in its class name (nothing to do) or the load failed (logged at debug
        level; the first store load then tries, as without this).
    """
    try:
        if "RocksDB" not in spark.conf.get(_PROVIDER_KEY, ""):
            return False
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
        jvm.org.apache.spark.sql.execution.streaming.state.RocksDBLoader.loadLibrary()
        return True
    except Exception as e:  # best effort
        log.debug("loading RocksDB ahead failed: %s", e)
        return False


def _warm_up(spark: SparkSession) -> None:
    start_python_workers(spark)
    load_rocksdb_library(spark)


def start(spark: SparkSession) -> threading.Thread:
    """Run :func:`start_python_workers`, then :func:`load_rocksdb_library`, in a daemon thread.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A session whose master is local, with streamtable's worker daemon.

    Returns
    -------
    threading.Thread
        The started thread (``streamtable-warm-up``), for a caller that wants to wait for it;
        nobody has to.
    """
    thread = threading.Thread(
        target=_warm_up, args=(spark,), name="streamtable-warm-up", daemon=True
    )
    thread.start()
    return thread
