"""Spark's Python worker daemon, with the modules every streamtable task needs imported once.

Spark starts one daemon per executor (``python -m <spark.python.daemon.module>``) and forks a
worker from it for each concurrent Python task; a forked worker imports what its task needs
(pandas and pyarrow for Arrow stages, streamtable's stages and processors) on its own. With
``pyspark.daemon`` as the daemon, measured on the flights × planes join, a third of the
workers' CPU time went to those imports, compiled from source because Spark puts its
``pyspark.zip`` (no bytecode) first on the workers' path, and another seventh to
``importlib.invalidate_caches()``, which PySpark then called for every task and which re-reads the
zip archive's directory (1,485 entries) once per zip importer. Spark also puts the jar that
holds its own ``PythonUtils`` (``spark-core``, 16 MB, 5,973 entries) on the workers' path, for
a PySpark packaged inside it: PySpark 4's worker re-reads every zip importer's directory
(``importlib.invalidate_caches()``) on the first task of each new worker, when it adds the
session's file folder to ``sys.path``. With that jar it took 210-300 ms per new worker (three
importers: the jar and its ``org`` and ``google`` folders, for namespace packages).

This module, set as ``spark.python.daemon.module`` by
:func:`~streamtable.runtime.spark.get_spark`, imports those modules once, from the installed
``pyspark`` package (with bytecode caches) when it is the same version as Spark's zip, without
Spark's ``spark-core`` jar on the path when that package is found without it, and then runs
``pyspark.daemon``'s manager unchanged: forked workers inherit the imports. With
``$STREAMTABLE_FORK_SERVER`` set, it first forks :mod:`streamtable.runtime.fork_server`, which
gives the same imports to the Python processes Spark starts on the driver at a query start (a
stateful query's schema process, a Python streaming source's runner).

The inherited objects (some 83,000 after these imports) are frozen (:func:`gc.freeze`) before
each fork: PySpark's worker runs a full ``gc.collect()`` after every task, which otherwise walks
all of them, about 26 ms each time on an idle core and, in a forked worker, writes to every
object's header and so copies the pages they share with the daemon. A profile of the keyed
latency benchmark (py-spy ``--gil``, 5,000 records/s) found 86 % of the workers' GIL time in
that call. A frozen object is never collected: the daemon's modules live as long as it does,
and in a worker an inherited object that becomes part of a garbage cycle stays (once per
worker, bounded by what it inherited); objects freed by reference counting are freed as ever.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.machinery
import os
import sys
import zipfile
from collections.abc import Callable

from streamtable.runtime import fork_server

#: Imported before forking: the Arrow/pandas machinery of PySpark's worker and streamtable's
#: Python stages and stateful processors. Each worker still imported three of them on its first
#: task before they were listed (a keyed run, ``sys.modules`` of its workers against the
#: daemon's): the state API's protobuf messages (``StateMessage_pb2``, 16 ms), the changelog
#: writer (``changelog``, 15 ms) and pyarrow's pandas bridge (``pandas_compat``).
PRELOAD = (
    "pyarrow",
    "pandas",
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.streaming.stateful_processor_api_client",
    "pyspark.sql.streaming.proto.StateMessage_pb2",
    "pyarrow.pandas_compat",
    "streamtable.compiler.changelog",
    "streamtable.compiler.record_stage",
    "streamtable.compiler.aggregate_processor",
    "streamtable.compiler.pack_stage",
    "streamtable.compiler.paged.pack",
    "streamtable.compiler.paged.processor",
    "streamtable.compiler.paged.stages",
    "streamtable.compiler.paged.table_kernels",
    "streamtable.compiler.paged.join_kernels",
    "streamtable.compiler.paged.fk_join_kernels",
    "confluent_kafka",
    "streamtable.runtime.task_output",
)


def zip_version_file(path: str) -> bytes | None:
    """The bytes of ``pyspark/version.py`` inside Spark's ``pyspark.zip``."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.read("pyspark/version.py")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _installed_version_file(path: list[str]) -> bytes | None:
    """The bytes of ``version.py`` of the ``pyspark`` package found on ``path``."""
    spec = importlib.machinery.PathFinder.find_spec("pyspark", path)
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py"), "rb") as f:
            return f.read()
    except OSError:
        return None


def _is_spark_zip(name: str) -> bool:
    """Spark's own archives: ``pyspark.zip`` and ``py4j-<version>-src.zip``."""
    return name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))


def prefer_installed_pyspark() -> bool:
    """Drop Spark's ``pyspark.zip`` and ``py4j-*.zip`` from ``sys.path`` when the installed
    ``pyspark`` and ``py4j`` packages can stand in for them (same pyspark version).

    Returns whether the path was changed. Nothing is changed on a machine whose Python lacks
    the packages or has another pyspark version (a cluster with its own ``SPARK_HOME``).
    """
    zips = [p for p in sys.path if _is_spark_zip(os.path.basename(p))]
    spark_zip = next((p for p in zips if os.path.basename(p) == "pyspark.zip"), None)
    if spark_zip is None or "pyspark" in sys.modules:
        return False
    rest = [p for p in sys.path if p not in zips]
    if importlib.machinery.PathFinder.find_spec("py4j", rest) is None:
        return False
    zip_version = zip_version_file(spark_zip)
    if zip_version is None or zip_version != _installed_version_file(rest):
        return False
    _leave_path(zips)
    return True


def without_spark_jars(path: list[str]) -> list[str]:
    """``path`` without Spark's ``spark-core`` jar when the ``pyspark`` package is found on the
    rest.

    Spark lists the jar of its ``PythonUtils`` class (``spark-core``) on its Python processes'
    path, for a PySpark packaged inside that jar. An installed ``pyspark`` package needs none
    of it, and each zip importer of the jar costs a read of its 5,973-entry directory whenever
    ``importlib.invalidate_caches()`` runs (see the module docstring).

    Parameters
    ----------
    path : list of str
        A module search path (``sys.path``).

    Returns
    -------
    list of str
        ``path`` without its ``spark-core_*.jar`` entries, or ``path`` itself when it has
        none or when ``pyspark`` is not found without them. Other jars (a user's, of Python
        code) stay.

    Examples
    --------
    >>> without_spark_jars(["/nowhere/spark-core_2.13-4.3.0.jar"])  # no pyspark on the rest
    ['/nowhere/spark-core_2.13-4.3.0.jar']
    """
    rest = [p for p in path if not _is_spark_core_jar(os.path.basename(p))]
    if len(rest) == len(path) or importlib.machinery.PathFinder.find_spec("pyspark", rest) is None:
        return path
    return rest


def _is_spark_core_jar(name: str) -> bool:
    """Spark's ``spark-core_<scala>-<version>.jar``."""
    return name.startswith("spark-core_") and name.endswith(".jar")


def _drop_spark_jars() -> None:
    """Apply :func:`without_spark_jars` to ``sys.path`` (see :func:`_leave_path`)."""
    kept = without_spark_jars(sys.path)
    if kept is not sys.path:
        _leave_path([p for p in sys.path if p not in kept])


def _leave_path(dropped: list[str]) -> None:
    """Take the archives ``dropped`` off ``sys.path``, with their zip importers (their
    folders' too) and the namespace packages found only in them (``org``: the standard
    library's ``copy`` and ``pickle`` try ``from org.python.core import ...`` for Jython,
    which made one from the ``org`` folder of Spark's jar; a namespace package keeps its old
    folders when none is found on the new path, and would re-create the importer).
    """
    sys.path[:] = [p for p in sys.path if p not in dropped]

    def inside(entry: str) -> bool:
        return any(entry == d or entry.startswith(d + os.sep) for d in dropped)

    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if spec is None or spec.origin is not None or spec.submodule_search_locations is None:
            continue  # not a namespace package
        folders = list(spec.submodule_search_locations)
        if folders and all(inside(f) for f in folders):
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent in sys.modules:
                with contextlib.suppress(AttributeError):
                    delattr(sys.modules[parent], child)
    for key in list(sys.path_importer_cache):
        if inside(key):
            del sys.path_importer_cache[key]


def main() -> None:
    """Preload, then run PySpark's daemon manager."""
    prefer_installed_pyspark()
    _drop_spark_jars()
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional module of another PySpark version: load it lazily
            pass
    from pyspark import daemon

    gc.collect()  # the imports' garbage is not frozen with them
    server = os.environ.get(fork_server.ENV_VAR)
    if server:
        # PySpark's manager makes its own process group (and sends it SIGHUP when it shuts
        # down): make it now, so that the fork server is in it
        os.setpgid(0, 0)
        fork_server.start(server)
    # frozen in the daemon right before each worker's fork (what the manager made since too);
    # not in a worker that forks itself (the hook is inherited): its objects stay collectable
    os.register_at_fork(before=_freeze_in(os.getpid()))
    daemon.manager()


def _freeze_in(daemon_pid: int) -> Callable[[], None]:
    """A fork hook that freezes the objects of process ``daemon_pid`` only."""

    def freeze() -> None:
        if os.getpid() == daemon_pid:
            gc.freeze()

    return freeze


if __name__ == "__main__":
    main()
