"""Python tasks of a local session run in workers forked from streamtable's daemon
(``streamtable.runtime.worker_daemon``): its modules already imported, and the objects they
inherit frozen, so the full ``gc.collect()`` PySpark's worker runs after every task does not
walk them."""

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
