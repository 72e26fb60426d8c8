"""The local session's Python processes import the installed ``pyspark``, not Spark's archive,
and every Python runner's workers come from the one daemon streamtable starts ahead.

Spark starts a fresh Python process on the driver while planning a ``transformWithStateInPandas``
query's first micro-batch (to learn its state schemas); with ``$SPARK_HOME/python/lib/pyspark.zip``
first on its path it would compile PySpark from the archive on every start.
"""

from __future__ import annotations

import json
import os

import pyspark
import pytest

from streamtable.runtime.spark_home import local_spark_home

pytestmark = pytest.mark.integration


def test_the_driver_jvm_runs_from_the_local_spark_home_without_archives(spark):
    home = local_spark_home()
    if home is None:
        pytest.skip("PySpark here is not a pip install with its own archives, or SPARK_HOME is set")
    jvm = spark.sparkContext._jvm
    assert jvm.System.getenv("SPARK_HOME") == str(home)
    python_path = jvm.org.apache.spark.api.python.PythonUtils.sparkPythonPath().split(os.pathsep)
    assert [p for p in python_path if p.endswith(".zip") and os.path.exists(p)] == []
    assert "SPARK_HOME" not in os.environ  # only the JVM keeps it


def _worker_parents(spark):
    """The parent process ids of the Python workers of a two-task ``mapInArrow`` job: the
    worker daemon's (the function is local, so Spark pickles it by value; the workers do not
    have the tests folder on their path)."""
    import pyarrow as pa

    def parent(batches):
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"ppid": [os.getppid()]})

    return {r.ppid for r in spark.range(0, 2, 1, 2).mapInArrow(parent, "ppid long").collect()}


@pytest.fixture(scope="module")
def state_processor_processes(spark, tmp_path_factory):
    """Run a ``transformWithStateInPandas`` query once; per Python process that ran the
    processor's ``init()``: ``where`` (``driver``: Spark's schema process, or ``task``), the
    ``pyspark`` it imported and its parent process id."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    from _support import wait_until
    from streamtable.runtime.fork_server import ENV_VAR

    # the worker daemon (started in the background with the session) forks the fork server
    server = spark.sparkContext.environment.get(ENV_VAR)
    if server:
        wait_until(lambda: os.path.exists(server), 60, f"the fork server's socket {server}")
    tmp_path = tmp_path_factory.mktemp("state-processor")
    seen = tmp_path / "seen"
    seen.mkdir()
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text('{"k": "a"}\n{"k": "b"}\n')
    out = str(seen)

    class Count(StatefulProcessor):
        def init(self, handle):
            import pyspark as p
            from pyspark import TaskContext

            # the driver's schema process (no task) and each task's worker both run init()
            where = "driver" if TaskContext.get() is None else "task"
            with open(os.path.join(out, f"{os.getpid()}.json"), "w") as f:
                ppid = os.getppid()
                with open(f"/proc/{ppid}/stat") as stat:  # its parent's parent: field 4
                    grandparent = int(stat.read().rsplit(")", 1)[1].split()[1])
                facts = {"pyspark": p.__file__, "ppid": ppid, "grandparent": grandparent}
                json.dump({"where": where, **facts}, f)
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
        .transformWithStateInPandas(Count(), "k string, n long", "update", "None")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    return [json.loads(p.read_text()) for p in seen.iterdir()]


def test_state_schema_and_task_processes_import_the_installed_pyspark(state_processor_processes):
    if local_spark_home() is None:
        pytest.skip("PySpark here is not a pip install with its own archives, or SPARK_HOME is set")
    imported = {p["where"]: p["pyspark"] for p in state_processor_processes}
    # the driver's process compiled PySpark from Spark's archive before (tasks' workers are
    # forked by streamtable's daemon, which already imported the installed package)
    assert imported == {"driver": pyspark.__file__, "task": pyspark.__file__}, (
        state_processor_processes
    )


def test_stage_and_state_processor_workers_are_forked_by_the_same_daemon(
    spark, state_processor_processes
):
    """Spark keeps a worker daemon per distinct worker environment. Its Arrow runners
    (streamtable's record stages) and its ``transformWithState`` runner differed by
    ``SPARK_SIMPLIFIED_TRACEBACK``, so the first stateful batch of every start waited for a
    second daemon to start and import pandas, pyarrow and streamtable (~1 s of a restart)."""

    stages = _worker_parents(spark)
    processors = {p["ppid"] for p in state_processor_processes if p["where"] == "task"}
    assert processors, "no task ran the state processor"
    assert processors == stages, f"processor workers forked by {processors}, stages' by {stages}"
    assert len(stages) == 1


def test_the_driver_schema_process_is_forked_by_the_daemons_fork_server(
    spark, state_processor_processes
):
    """The process Spark starts on the driver to learn a ``transformWithStateInPandas``
    processor's state variables comes from the fork server (``streamtable.runtime.fork_server``)
    the daemon forks with its modules imported, not from a fresh interpreter that imports
    PySpark, pandas, pyarrow and streamtable (~1.5 s of every start and restart)."""

    from streamtable.runtime.fork_server import ENV_VAR

    if not spark.sparkContext.environment.get(ENV_VAR):
        pytest.skip("no fork server in this session (not Linux, or turned off)")

    daemons = _worker_parents(spark)
    drivers = [p for p in state_processor_processes if p["where"] == "driver"]
    assert len(drivers) == 1, state_processor_processes
    assert drivers[0]["ppid"] not in daemons, "the schema process was forked by the daemon itself"
    # forked by the server, which the daemon forked
    assert {drivers[0]["grandparent"]} == daemons, (drivers, daemons)


def test_a_python_streaming_sources_runner_is_forked_by_the_daemons_fork_server(spark, tmp_path):
    """Spark runs a Python streaming data source's reader (its offsets and partitions) in a
    process it starts itself at every query start (``python -m
    pyspark.sql.streaming.python_streaming_source_runner``; the TopologyTestDriver's topics are
    such a source): it comes from the fork server the daemon forks with its modules imported,
    not from a fresh interpreter that imports PySpark, pandas and pyarrow (~1 s of each query
    start of a driver)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from _support import wait_until
    from streamtable.runtime.fork_server import ENV_VAR

    server = spark.sparkContext.environment.get(ENV_VAR)
    if not server:
        pytest.skip("no fork server in this session (not Linux, or turned off)")
    wait_until(lambda: os.path.exists(server), 60, f"the fork server's socket {server}")
    out = str(tmp_path / "runner.json")

    class Reader(DataSourceStreamReader):
        def initialOffset(self):  # noqa: N802 - runs in the runner process
            ppid = os.getppid()
            with open(f"/proc/{ppid}/stat") as stat:  # its parent's parent: field 4
                grandparent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(out, "w") as f:
                json.dump({"pid": os.getpid(), "ppid": ppid, "grandparent": grandparent}, f)
            return {"n": 0}

        def latestOffset(self):  # noqa: N802
            return {"n": 1}

        def partitions(self, start, end):
            return [InputPartition(0)]

        def read(self, partition):
            yield (1,)

    class Probe(DataSource):
        @classmethod
        def name(cls):
            return "streamtable_runner_probe"

        def schema(self):
            return "n long"

        def streamReader(self, schema):  # noqa: N802
            return Reader()

    spark.dataSource.register(Probe)
    query = (
        spark.readStream.format("streamtable_runner_probe")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    runner = json.loads(open(out).read())

    daemons = _worker_parents(spark)
    assert runner["ppid"] not in daemons, "the runner was forked by the daemon itself"
    assert {runner["grandparent"]} == daemons, (runner, daemons)  # by the server it forked
