"""Python tasks of a local session run in workers forked from streamtable's daemon
(``streamtable.runtime.worker_daemon``): its modules already imported, and the objects they
inherit frozen, so the full ``gc.collect()`` PySpark's worker runs after every task does not
walk them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def _worker_facts(batches):  # runs in a Spark Python worker
    import gc
    import sys

    import pyarrow as pa

    from streamtable.runtime.worker_daemon import PRELOAD  # imports none of them

    for _ in batches:
        yield pa.RecordBatch.from_pydict(
            {
                "frozen": [gc.get_freeze_count()],
                "missing": [",".join(m for m in PRELOAD if m not in sys.modules)],
            }
        )


def test_workers_inherit_the_preloaded_modules_frozen(spark):
    rows = spark.range(0, 2, 1, 2).mapInArrow(_worker_facts, "frozen long, missing string")
    facts = rows.collect()
    assert len(facts) == 2
    for row in facts:
        assert row.missing == "", f"not preloaded in the worker: {row.missing}"
        # the daemon's imports (pandas, pyarrow, pyspark's worker, streamtable's stages) are
        # tens of thousands of objects; a worker without the freeze has none frozen
        assert row.frozen > 20_000, row
