"""The Spark session streamtable runs on: one per process, created with the Kafka connector jars.

Defaults suit a laptop (``local[2]``, UI off, few shuffle partitions) and follow the design's
state choices from the first run: RocksDB state store with changelog checkpointing. (Avro state
encoding, the only one that allows state schema evolution, is chosen per query by the runtime:
Spark accepts it for ``transformWithState`` but not for its built-in aggregations.) Any
``spark.*`` key of the application config overrides them, e.g. ``spark.master`` for a cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from streamtable.errors import EnvironmentSetupError
from streamtable.platform._process import cache_home
from streamtable.runtime import class_data_sharing as cds
from streamtable.runtime import fork_server, local_file_system, warm_up
from streamtable.runtime.jars import check_java, resolve_jars
from streamtable.runtime.spark_home import installed_spark_home, launched_with, local_spark_home
from streamtable.runtime.spark_log import jvm_output_to

log = logging.getLogger("streamtable")

_FILE_SYSTEM_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
_LOCAL_FILE_SYSTEM = "org.apache.hadoop.fs.LocalFileSystem"
_DEFAULTS: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "streamtable",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    # Spark refuses a stateful operator after a streaming aggregation in update mode, in case
    # the global watermark drops the aggregation's output as late. No streamtable plan lets
    # Spark drop late rows: lateness is decided by streamtable's own operators, from record
    # timestamps (Spark's watermark only fires their timers).
    "spark.sql.streaming.statefulOperator.checkCorrectness.enabled": "false",
    # Spark keeps one Python worker daemon per distinct worker environment. Its Arrow runners
    # (streamtable's stages, mapInArrow) add SPARK_SIMPLIFIED_TRACEBACK=1 when this is on, its
    # transformWithState runner does not: two daemons, and the first stateful batch of every
    # start (a restart too) waited ~1 s for the second one to start and import pandas, pyarrow
    # and streamtable's stages. Off, every runner shares the daemon started ahead (see
    # warm_up.start_python_workers); a Python error's traceback keeps PySpark's worker frames.
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    # Checkpoint files (offset and commit logs, every state store version) are written to a
    # temporary file and renamed. Spark's default manager renames through Hadoop's FileContext,
    # which on a local filesystem without Hadoop's native library runs `readlink` in a child
    # process for each side of each rename, .crc files included: a fork of the JVM each time.
    # bench/latency.py, keyed reduce over 4 state partitions: a micro-batch's state commit took
    # 353-390 ms with it and 30-36 ms with Hadoop's FileSystem rename (docs/deployment.md,
    # "Checkpoint files"). The rename rules are the same on a local filesystem: a file that
    # must not be replaced (an offset log entry) is refused when it exists, as FileContext's
    # local rename also checked before renaming; a state version written again replaces the
    # old file in one rename(2) (FileContext deleted it first). Only with Hadoop's own
    # LocalFileSystem below (see _session_settings).
    "spark.sql.streaming.checkpointFileManagerClass": _FILE_SYSTEM_MANAGER,
    # Hadoop's own local filesystem for file: paths. PySpark's hive-exec jar lists Hive's
    # ProxyLocalFileSystem after it in its FileSystem service file, so Hive's provides file:;
    # its rename refuses an existing destination, and the FileSystem manager above would keep
    # a stale state file when a re-run micro-batch writes its version again. A local session
    # gets a subclass of it instead, whose permission changes start no `chmod` process
    # (local_session_extras, streamtable.runtime.local_file_system).
    "spark.hadoop.fs.file.impl": _LOCAL_FILE_SYSTEM,
}
#: Local sessions only: Python workers forked with pandas, pyarrow and streamtable's stages
#: already imported (see streamtable.runtime.worker_daemon). Not on a cluster, where the daemon
#: would need streamtable installed on every executor before any task runs (a job that ships
#: it with --py-files would fail).
_LOCAL_DEFAULTS: dict[str, str] = {
    "spark.python.daemon.module": "streamtable.runtime.worker_daemon",
}
#: A standalone master on loopback, e.g. the one of ``streamtable cluster start``.
_LOOPBACK_MASTER = re.compile(r"^spark://(127\.0\.0\.1|localhost)(:\d+)?$")
_lock = threading.Lock()
_archive_plan: cds.ArchivePlan | None = None
_KAFKA_SOURCE = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
#: Overrides the folder of the Python launchers (see _fork_server_launcher).
_LAUNCHER_ENV_VAR = "STREAMTABLE_LAUNCHER_HOME"


def _has_kafka(spark: SparkSession) -> bool:
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    try:
        jvm.java.lang.Class.forName(
            _KAFKA_SOURCE, False, jvm.Thread.currentThread().getContextClassLoader()
        )
        return True
    except Exception:
        return "spark-sql-kafka" in spark.sparkContext.getConf().get("spark.jars", "")


def current_archive_plan() -> cds.ArchivePlan | None:
    """What the driver JVM started by :func:`get_spark` does with the class data sharing
    archive (None: no JVM started by streamtable, or sharing off).
    """
    return _archive_plan


def session_archive_key(
    spark_home: Path | None, extra: Mapping[str, str] | None = None
) -> str | None:
    """The class data sharing archive key of the driver JVM :func:`get_spark` starts.

    Parameters
    ----------
    spark_home : pathlib.Path or None
        The JVM's Spark home (None: ``$SPARK_HOME``, else the installed ``pyspark``).
    extra : Mapping[str, str], optional
        :func:`local_session_extras` when the session is local: the jar they put on the class
        path is part of what an archive maps.

    Returns
    -------
    str or None
        :func:`~streamtable.runtime.class_data_sharing.driver_archive_key` with this
        streamtable's version and default session settings; None when this Java cannot share
        classes dynamically. A user's own settings are not part of it: an archive recorded
        with other defaults in effect (say another ``fs.file.impl``) maps, and only misses
        the classes they bring.
    """
    defaults = cds.defaults_digest({**_DEFAULTS, **_LOCAL_DEFAULTS, **(extra or {})})
    return cds.driver_archive_key(str(spark_home) if spark_home else None, defaults)


def _single_jvm(master: str) -> bool:
    """Whether ``master`` runs the executors in the driver's JVM (``local``, ``local[...]``;
    not ``local-cluster``, whose executors are JVMs of their own).
    """
    return master == "local" or master.startswith("local[")


def wants_local_file_system(
    settings: Mapping[str, str], conf: Mapping[str, str], *, jvm_launched: bool
) -> bool:
    """Whether the session :func:`get_spark` starts gets :func:`local_session_extras`.

    Only a driver JVM about to be launched (an existing one keeps its class path, which would
    lack the jar) of a ``local`` or ``local[...]`` master (``local-cluster`` executors are JVMs
    of their own, without it), and only when neither ``conf`` names ``fs.file.impl`` nor
    ``PYSPARK_SUBMIT_ARGS`` sets a driver class path (PySpark's launcher would put it in place
    of ours).

    >>> s = {"spark.master": "local[2]"}
    >>> wants_local_file_system(s, {}, jvm_launched=False)
    True
    >>> wants_local_file_system(s, {}, jvm_launched=True)
    False
    >>> wants_local_file_system({"spark.master": "local-cluster[2,1,1024]"}, {}, jvm_launched=False)
    False
    >>> wants_local_file_system(s, {"spark.hadoop.fs.file.impl": "my.Fs"}, jvm_launched=False)
    False
    """
    if jvm_launched or not _single_jvm(settings["spark.master"]):
        return False
    if "spark.hadoop.fs.file.impl" in conf:
        return False
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return "--driver-class-path" not in submit_args and "extraClassPath" not in submit_args


def with_class_path(extras: Mapping[str, str], settings: Mapping[str, str]) -> dict[str, str]:
    """``extras`` with its jar put before the driver class path ``settings`` already name.

    >>> with_class_path({"spark.driver.extraClassPath": "/a.jar"}, {})
    {'spark.driver.extraClassPath': '/a.jar'}
    >>> with_class_path({"spark.driver.extraClassPath": "/a.jar"},
    ...                 {"spark.driver.extraClassPath": "/mine.jar"})
    {'spark.driver.extraClassPath': '/a.jar:/mine.jar'}
    >>> with_class_path({}, {"spark.driver.extraClassPath": "/mine.jar"})
    {}
    """
    merged = dict(extras)
    key = "spark.driver.extraClassPath"
    if key in merged and settings.get(key):
        merged[key] = os.pathsep.join([merged[key], settings[key]])
    return merged


def session_extras(conf: Mapping[str, str], spark_home: Path | None) -> dict[str, str]:
    """What :func:`get_spark` (``conf``) adds to a session it launches besides its defaults:
    :func:`local_session_extras` when :func:`wants_local_file_system`, else nothing.

    Parameters
    ----------
    conf : Mapping[str, str]
        The ``conf`` of :func:`get_spark`.
    spark_home : pathlib.Path or None
        The JVM's Spark home (None: ``$SPARK_HOME``, else the installed ``pyspark``).
    """
    launched = SparkContext._gateway is not None  # type: ignore[attr-defined]
    if not wants_local_file_system(_session_settings(conf), conf, jvm_launched=launched):
        return {}
    return local_session_extras(spark_home)


def local_session_extras(spark_home: Path | None) -> dict[str, str]:
    """Settings a local session gets besides :data:`_LOCAL_DEFAULTS`: the local file system
    of :mod:`streamtable.runtime.local_file_system` (its jar on the driver's class path), or
    nothing when it cannot be built.

    Parameters
    ----------
    spark_home : pathlib.Path or None
        The JVM's Spark home (None: ``$SPARK_HOME``, else the installed ``pyspark``).
    """
    if spark_home is None:
        env = os.environ.get("SPARK_HOME")
        spark_home = Path(env) if env else installed_spark_home()
    return local_file_system.session_settings(spark_home / "jars")


def _fork_server_launcher(settings: dict[str, str]) -> str | None:
    """Give a local session's Python processes the fork server of its worker daemon.

    The daemon forks :mod:`streamtable.runtime.fork_server` on a new socket path
    (``spark.executorEnv.STREAMTABLE_FORK_SERVER``, added to ``settings``), and the returned
    launcher, Spark's Python for the session, hands it the processes Spark starts on the driver
    at a query start (a stateful query's schema process, a Python streaming source's runner:
    ``fork_server.FORKED_MODULES``). None (nothing changed): not a local master (``local``,
    ``local[...]``; ``local-cluster`` has executors of its own), streamtable's daemon not in
    use, Spark's Python chosen by the user (``spark.pyspark.python`` set, or
    ``$PYSPARK_PYTHON`` naming another interpreter), the server turned off
    (``spark.executorEnv.STREAMTABLE_FORK_SERVER`` set, e.g. to ``""``), or no launcher
    could be written.
    """
    key = f"spark.executorEnv.{fork_server.ENV_VAR}"
    chosen = os.environ.get("PYSPARK_PYTHON")
    if (
        not _single_jvm(settings["spark.master"])
        or settings.get("spark.python.daemon.module")
        != _LOCAL_DEFAULTS["spark.python.daemon.module"]
        or "spark.pyspark.python" in settings
        or (chosen and os.path.abspath(chosen) != os.path.abspath(sys.executable))
        or key in settings
        or not (hasattr(socket, "send_fds") and hasattr(socket, "SO_PEERCRED"))  # Linux
    ):
        return None
    try:
        path = fork_server.launcher(sys.executable, cache_home(_LAUNCHER_ENV_VAR, "launcher"))
    except OSError as e:
        log.debug("no Python launcher for the fork server: %s", e)
        return None
    settings[key] = fork_server.socket_path()
    return str(path)


@contextlib.contextmanager
def query_start_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set session ``settings`` that a streaming query reads when it starts, and give the
    session back its own values afterwards.

    Spark gives a query a copy of the session's settings when ``start()`` is called; later
    changes to the session do not reach it. An application's choice for its queries (the state
    store encoding, ``avro`` for ``transformWithState``) then does not leak into the queries
    a user starts later in the same session: Spark refuses a built-in aggregation under
    ``avro`` ("State store encoding format as avro is not supported for
    operator=aggregation").

    Parameters
    ----------
    spark : SparkSession
        The session.
    settings : Mapping[str, str]
        Spark SQL settings for the queries started inside the block.

    Notes
    -----
    streamtable's own query starts (applications sharing the session, a failed query started
    again by its monitor thread) take turns; a query the user starts from another thread at
    that very moment may still see the settings.
    """
    with _QUERY_START:
        before = {key: spark.conf.get(key, None) for key in settings}
        try:
            for key, value in settings.items():
                spark.conf.set(key, value)
            yield
        finally:
            for key, value in before.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


#: held while streamtable starts a query with settings of its own (:func:`query_start_conf`)
_QUERY_START = threading.Lock()


@contextlib.contextmanager
def _python_exec(launcher: str | None) -> Iterator[None]:
    """``$PYSPARK_PYTHON`` is ``launcher`` while the session starts (PySpark reads it once, into
    ``SparkContext.pythonExec``); processes the application starts later keep the interpreter.
    """
    if launcher is None:
        yield
        return
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = launcher
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def _session_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """The session defaults of streamtable, overridden by ``conf``.

    The FileSystem-based checkpoint manager is kept only on Hadoop's own ``LocalFileSystem``
    (or when ``conf`` names a manager itself): with another ``fs.file.impl`` Spark's default
    manager is used, since a filesystem whose rename does not replace an existing file would
    keep stale state files under it. (The subclass a local session gets afterwards, see
    :func:`local_session_extras`, renames as Hadoop's own.)

    >>> key = "spark.sql.streaming.checkpointFileManagerClass"
    >>> _session_settings({})[key].endswith("FileSystemBasedCheckpointFileManager")
    True
    >>> key in _session_settings({"spark.hadoop.fs.file.impl": "com.example.MyLocalFs"})
    False
    """
    settings = dict(_DEFAULTS)
    settings.update(conf)
    manager = "spark.sql.streaming.checkpointFileManagerClass"
    if settings["spark.hadoop.fs.file.impl"] != _LOCAL_FILE_SYSTEM and manager not in conf:
        del settings[manager]
    return settings


def get_spark(
    conf: Mapping[str, str] | None = None,
    log_to: str | None = None,
    class_data_sharing: bool = True,
) -> SparkSession:
    """The process's Spark session, created on first use with the Kafka connector on its classpath.

    Parameters
    ----------
    conf : Mapping[str, str], optional
        ``spark.*`` settings; applied when the session is created (later calls cannot change
        JVM-level settings such as ``spark.master``, as in Spark itself).
    log_to : str, optional
        Where the Spark JVM's output goes when this call creates the session (the config key
        ``streamtable.spark.log``): a file path, appended to; ``"stderr"`` for the console.
        Default: ``<tempdir>/streamtable/logs/spark.log``. See
        :mod:`streamtable.runtime.spark_log`.
    class_data_sharing : bool, default True
        When this call creates the session: map the driver JVM's classes from the archive of
        :mod:`streamtable.runtime.class_data_sharing`, or record it (config key
        ``streamtable.jvm.class.data.sharing``).

    Raises
    ------
    EnvironmentSetupError
        If Java is missing, the connector jars cannot be resolved, or an existing session lacks
        the Kafka connector.
    """
    global _archive_plan
    log_target = log_to
    with _lock:
        active = SparkSession.getActiveSession()
        if active is None:  # the active session is per thread: one made in another thread
            made = SparkSession._instantiatedSession
            if made is not None and made._sc._jsc is not None:
                active = made
        if active is not None:
            if not _has_kafka(active):
                raise EnvironmentSetupError(
                    "A Spark session is already running without Spark's Kafka connector. Let "
                    "streamtable create the session (stop yours first), or add the jars from "
                    "streamtable.runtime.jars.resolve_jars('spark-kafka') to 'spark.jars'."
                )
            return active
        check_java()
        jars = resolve_jars("spark-kafka")
        settings = _session_settings(conf or {})
        if "spark.driver.extraJavaOptions" not in settings:
            log_config = Path(__file__).with_name("log4j2.properties")
            settings["spark.driver.extraJavaOptions"] = (
                f"-Dlog4j2.configurationFile=file:{log_config}"
            )
        if settings["spark.master"].startswith("local"):
            for k, v in _LOCAL_DEFAULTS.items():
                settings.setdefault(k, v)
            # a local session talks only to itself: keep its RPC and block manager on loopback
            settings.setdefault("spark.driver.host", "127.0.0.1")
            settings.setdefault("spark.driver.bindAddress", "127.0.0.1")
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        elif _LOOPBACK_MASTER.match(settings["spark.master"]):
            # a cluster on this machine's loopback (``streamtable cluster``): its executors
            # reach the driver there too
            settings.setdefault("spark.driver.host", "127.0.0.1")
            settings.setdefault("spark.driver.bindAddress", "127.0.0.1")
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # local: Spark's Python processes import the installed pyspark (with bytecode)
        workers_python = settings.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
        home = (
            local_spark_home(python=workers_python)
            if settings["spark.master"].startswith("local")
            else None
        )
        extras = session_extras(conf or {}, home)
        settings.update(with_class_path(extras, settings))
        plan = None
        own_options = settings["spark.driver.extraJavaOptions"]
        key = (
            session_archive_key(home, extras)
            if class_data_sharing and not cds.user_manages_sharing(own_options)
            else None
        )
        if key is not None:
            plan = cds.plan_archive(key)
            if plan.options:
                settings["spark.driver.extraJavaOptions"] = " ".join(
                    [settings["spark.driver.extraJavaOptions"], *plan.options]
                )
        extra = settings.get("spark.jars", "")
        settings["spark.jars"] = ",".join([str(j) for j in jars] + ([extra] if extra else []))
        # Python workers must run the same interpreter as the driver (same packages).
        launcher = _fork_server_launcher(settings)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = SparkSession.builder
        for k, v in settings.items():
            builder = builder.config(k, v)
        log.info("starting Spark (%s) with %d connector jars", settings["spark.master"], len(jars))
        if log_target is None:
            log_target = os.path.join(tempfile.gettempdir(), "streamtable", "logs", "spark.log")
        with jvm_output_to(log_target), launched_with(home), _python_exec(launcher):
            spark = builder.getOrCreate()
        if plan is not None and plan.recording is not None:
            try:
                jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[attr-defined]
            except Exception:  # pragma: no cover - the recording stays keyed to this process
                jvm_pid = os.getpid()
            plan.register(jvm_pid)
        _archive_plan = plan
        if (
            settings.get("spark.python.daemon.module")
            == _LOCAL_DEFAULTS["spark.python.daemon.module"]
        ):
            warm_up.start(spark)
        spark.sparkContext.setLogLevel(settings.get("spark.log.level", "WARN"))
        return spark
