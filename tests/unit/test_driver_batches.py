"""``TopologyTestDriver.batches_run`` from Spark progress reports (stand-ins, no JVM)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streamtable.testing.driver import TopologyTestDriver

pytestmark = pytest.mark.unit


def report(batch: int, *, executed: bool = True) -> SimpleNamespace:
    durations = {"addBatch": 5, "triggerExecution": 9} if executed else {"triggerExecution": 1}
    return SimpleNamespace(batchId=batch, durationMs=durations)


def test_batches_run_leaves_out_the_batch_an_idle_report_announces():
    """Spark 4.3's idle report carries the id of the batch that comes next."""
    queries = [
        SimpleNamespace(lastProgress=None),  # nothing reported yet
        SimpleNamespace(lastProgress=report(0, executed=False)),  # idle before batch 0
        SimpleNamespace(lastProgress=report(2)),  # batches 0, 1, 2
        SimpleNamespace(lastProgress=report(3, executed=False)),  # idle after batch 2
    ]
    driver = SimpleNamespace(_queries=queries)
    assert TopologyTestDriver.batches_run(driver) == [0, 0, 3, 3]  # type: ignore[arg-type]
