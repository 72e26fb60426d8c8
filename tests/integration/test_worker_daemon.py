"""Python tasks of a local session run in workers forked from streamtable's daemon
(``streamtable.runtime.worker_daemon``): its modules already imported, and the objects they
inherit frozen, so the full ``gc.collect()`` PySpark's worker runs after every task does not
walk them; and they talk to the executor over Unix domain sockets."""

from __future__ import annotations

import functools

import pytest

pytestmark = pytest.mark.integration


def _worker_facts(preload, batches):  # runs in a Spark Python worker
    import sys

    present = set(sys.modules)  # before this function imports anything
    import gc

    import pyarrow as pa

    jars = [p for p in (*sys.path, *sys.path_importer_cache) if ".jar" in p]
    for _ in batches:
        yield pa.RecordBatch.from_pydict(
            {
                "frozen": [gc.get_freeze_count()],
                "missing": [",".join(m for m in preload if m not in present)],
                "jars": [",".join(jars)],
            }
        )


def test_workers_inherit_the_preloaded_modules_frozen(spark):
    from streamtable.runtime.worker_daemon import PRELOAD

    # the task itself needs pyarrow and PySpark's worker; streamtable's stages and the state
    # API's messages are there only if the daemon preloaded them
    facts_of = functools.partial(_worker_facts, PRELOAD)
    rows = spark.range(0, 2, 1, 2).mapInArrow(facts_of, "frozen long, missing string, jars string")
    facts = rows.collect()
    assert len(facts) == 2
    for row in facts:
        assert row.missing == "", f"not preloaded in the worker: {row.missing}"
        # the daemon's imports (pandas, pyarrow, pyspark's worker, streamtable's stages) are
        # tens of thousands of objects; a worker without the freeze has none frozen
        assert row.frozen > 20_000, row
        # Spark lists spark-core's jar on the workers' path; left there, PySpark's
        # importlib.invalidate_caches() on each new worker's first task re-read its directory
        assert row.jars == "", f"Spark's jars on the worker's path or importer cache: {row.jars}"


def _connection_families(batches):  # runs in a Spark Python worker
    import os
    import stat

    import pyarrow as pa

    def inodes(table):
        with open(table) as f:
            next(f)  # the header
            return {line.split()[9 if "tcp" in table else 6] for line in f}

    unix = inodes("/proc/net/unix")
    tcp = inodes("/proc/net/tcp") | inodes("/proc/net/tcp6")
    kinds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not stat.S_ISSOCK(os.fstat(int(fd)).st_mode):
                continue
            inode = os.readlink(f"/proc/self/fd/{fd}")[len("socket:[") : -1]
        except OSError:
            continue
        kinds.add("unix" if inode in unix else "tcp" if inode in tcp else "other")
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"kinds": [",".join(sorted(kinds))]})


def test_workers_talk_to_the_jvm_over_unix_domain_sockets(spark):
    # streamtable's local default spark.python.unix.domain.socket.enabled: the worker's
    # connection to its executor is a Unix domain socket, not loopback TCP
    assert spark.conf.get("spark.python.unix.domain.socket.enabled") == "true"
    rows = spark.range(0, 2, 1, 2).mapInArrow(_connection_families, "kinds string").collect()
    assert [r.kinds for r in rows] == ["unix", "unix"]
