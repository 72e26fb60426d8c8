"""Every Python runner of a local session shares one worker daemon: the one started ahead.

Spark keeps a daemon per distinct worker environment. Its Arrow runners (streamtable's record
stages) and its ``transformWithState`` runner differed by ``SPARK_SIMPLIFIED_TRACEBACK``, so the
first stateful batch of every start waited for a second daemon to start and import pandas,
pyarrow and streamtable (~1 s of a restart).
"""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.integration


def test_stage_and_state_processor_workers_are_forked_by_the_same_daemon(spark, tmp_path):
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    def parent(batches):
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"ppid": [os.getppid()]})

    stage_parents = {
        r.ppid for r in spark.range(0, 2, 1, 2).mapInArrow(parent, "ppid long").collect()
    }

    seen = tmp_path / "seen"
    seen.mkdir()
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text('{"k": "a"}\n{"k": "b"}\n')
    out = str(seen)

    class Parent(StatefulProcessor):
        def init(self, handle):
            from pyspark import TaskContext

            if TaskContext.get() is not None:  # a task's worker (not the driver's schema process)
                with open(os.path.join(out, f"{os.getpid()}.json"), "w") as f:
                    json.dump(os.getppid(), f)
            self.n = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key, rows, timerValues):
            n = sum(len(r) for r in rows)
            self.n.update((n,))
            yield pd.DataFrame({"k": [key[0]], "n": [n]})

        def close(self):
            pass

    query = (
        spark.readStream.schema("k string")
        .json(str(src))
        .groupBy("k")
        .transformWithStateInPandas(Parent(), "k string, n long", "update", "None")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    processor_parents = {json.loads(p.read_text()) for p in seen.iterdir()}
    assert processor_parents, "no task ran the state processor"
    assert processor_parents == stage_parents, (
        f"state processor workers forked by {processor_parents}, stage workers by {stage_parents}"
    )
    assert len(stage_parents) == 1
