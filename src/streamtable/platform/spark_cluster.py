"""A Spark standalone cluster on this machine: Spark's own Master and Workers, from PySpark.

:class:`SparkStandaloneCluster` starts ``org.apache.spark.deploy.master.Master`` and N
``org.apache.spark.deploy.worker.Worker`` JVMs with the ``bin/spark-class`` launcher of the
installed PySpark (nothing is downloaded), on 127.0.0.1 and ports chosen free, and waits until
the master's web UI (``/json/``) lists every worker ``ALIVE``.  An application reaches it with
``spark.master`` set to :attr:`SparkStandaloneCluster.master_url`.  It is meant for development
and tests (scale-out and executor-loss tests); production uses any ``spark.master``.

:mod:`streamtable.platform.spark_cluster_daemon` keeps one running in the background for the
command line (``streamtable cluster start|status|stop``).

Executors are started by the workers and inherit the environment of the process that started
the cluster (``PYTHONPATH``, the virtual environment): an application's Python functions and
streamtable itself must be importable there, as on any Spark cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any

from streamtable import _watchdog
from streamtable.broker._node import free_ports, port_is_free, tail_file
from streamtable.errors import ConfigError, EnvironmentSetupError
from streamtable.platform._process import descendants, kill_tree, pause, pid_alive, stop_pid
from streamtable.platform.errors import SparkClusterError

__all__ = [
    "MASTER_CLASS",
    "WORKER_CLASS",
    "SparkStandaloneCluster",
    "cluster_marker",
    "master_status",
    "parse_memory",
    "spark_home",
    "stop_cluster_processes",
]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: Heap of each Master/Worker daemon JVM (``SPARK_DAEMON_MEMORY``); executors get their own
#: ``spark.executor.memory`` from the application.
DAEMON_MEMORY = "512m"
_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_MIB = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}
_POLL_S = 0.2

_LIVE: weakref.WeakSet[SparkStandaloneCluster] = weakref.WeakSet()


def _stop_all_at_exit() -> None:
    for cluster in list(_LIVE):
        with contextlib.suppress(Exception):
            cluster.stop()


atexit.register(_stop_all_at_exit)


def spark_home() -> pathlib.Path:
    """Return the Spark installation the cluster runs: the installed PySpark package.

    Returns
    -------
    pathlib.Path
        ``$SPARK_HOME`` when it holds ``bin/spark-class``, else the folder of the ``pyspark``
        package (PySpark's wheel ships ``bin/spark-class`` and ``jars/``).

    Raises
    ------
    EnvironmentSetupError
        If neither holds an executable ``bin/spark-class`` (e.g. PySpark is not installed).
    """
    candidates: list[pathlib.Path] = []
    if os.environ.get("SPARK_HOME"):
        candidates.append(pathlib.Path(os.environ["SPARK_HOME"]))
    try:
        import pyspark

        candidates.append(pathlib.Path(pyspark.__file__).parent)
    except ImportError:
        pass
    for home in candidates:
        launcher = home / "bin" / "spark-class"
        if launcher.is_file() and os.access(launcher, os.X_OK):
            return home
    looked = ", ".join(str(c / "bin" / "spark-class") for c in candidates) or "nowhere"
    raise EnvironmentSetupError(
        f"Spark's launcher bin/spark-class was not found (looked at {looked}); install PySpark "
        "in this environment (pip install pyspark) or point SPARK_HOME at a Spark distribution."
    )


def parse_memory(value: str) -> int:
    """Return a Spark memory size such as ``"2g"`` or ``"512m"`` in MiB.

    Parameters
    ----------
    value : str
        Digits with an optional unit ``k``, ``m`` (the default), ``g`` or ``t``, as Spark's
        ``--memory`` option takes them.

    Returns
    -------
    int
        Mebibytes (at least 1).

    Raises
    ------
    ConfigError
        If ``value`` is not such a size or is below 1 MiB.

    Examples
    --------
    >>> parse_memory("2g"), parse_memory("512m"), parse_memory("1024")
    (2048, 512, 1024)
    """
    match = _MEMORY.match(str(value))
    mib = int(match.group(1)) * _MIB[match.group(2).lower()] if match else 0
    if mib < 1:
        raise ConfigError(
            f"memory per worker must be a size such as '2g' or '512m' (at least 1m); got {value!r}"
        )
    return int(mib)


def master_status(webui_url: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """Return the master's state from its web UI (``<webui_url>/json/``), or ``None``.

    Parameters
    ----------
    webui_url : str
        E.g. ``http://127.0.0.1:8080``.
    timeout : float
        Seconds to wait for the answer.

    Returns
    -------
    dict or None
        Spark's JSON: ``url``, ``status``, ``aliveworkers``, ``workers`` (each with ``host``,
        ``port``, ``state``, ``cores``, ``memory``), ``activeapps``...; ``None`` if the master
        does not answer.
    """
    try:
        with urllib.request.urlopen(webui_url.rstrip("/") + "/json/", timeout=timeout) as resp:
            return dict(json.loads(resp.read().decode("utf-8")))
    except (OSError, ValueError, urllib.error.URLError):
        return None


def cluster_marker(directory: pathlib.Path) -> bytes:
    """Return the command-line mark of a cluster's JVMs: the system property
    ``-Dstreamtable.cluster=<directory>``, so a reused pid is not taken for one of them.
    """
    return f"-Dstreamtable.cluster={directory}".encode()


def stop_cluster_processes(
    master_pid: int | None, worker_pids: list[int], directory: pathlib.Path, grace: float = 15.0
) -> bool:
    """Stop a cluster's workers (and their executors), then its master; SIGKILL stragglers.

    Parameters
    ----------
    master_pid : int or None
        The Master JVM.
    worker_pids : list of int
        The Worker JVMs.
    directory : pathlib.Path
        The cluster's folder (it marks its JVMs' command lines, so a reused pid is left alone).
    grace : float
        Seconds each JVM gets to exit after SIGTERM (a Worker stops its executors on SIGTERM).

    Returns
    -------
    bool
        Whether any of the processes was running.
    """
    marker = cluster_marker(directory)
    running = False
    pids = [p for p in worker_pids if p] + ([master_pid] if master_pid else [])
    for pid in pids:
        if not pid_alive(pid, marker):
            continue
        tree = descendants(pid)  # the executors and their Python workers
        running |= stop_pid(pid, first_signal=signal.SIGTERM, grace=grace, marker=marker)
        for child in tree:
            if pid_alive(child):
                kill_tree(child)
    return running


@dataclass
class _Worker:
    index: int
    port: int
    webui_port: int
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None


class SparkStandaloneCluster:
    """Spark's standalone Master and ``workers`` Workers on 127.0.0.1, started from PySpark.

    :meth:`start` launches the master, then every worker (``--cores``, ``--memory``, a work
    folder of its own), and returns once the master lists all of them ``ALIVE``.  Logs go to
    ``master.log`` and ``worker-<i>.log`` in :attr:`directory`; each worker's executors keep
    theirs under ``work-<i>/<app id>/<executor id>/``.

    Parameters
    ----------
    workers : int
        Number of Worker JVMs (at least 1).
    cores_per_worker : int
        Cores each worker offers to applications (at least 1).
    memory_per_worker : str
        Memory each worker offers to executors, e.g. ``"2g"``: an executor's
        ``spark.executor.memory`` (Spark's default 1g) must fit in it.
    directory : path-like, optional
        Folder for logs and work folders; a new temporary folder (deleted by :meth:`stop`
        unless ``keep``) when omitted.
    keep : bool
        Keep ``directory`` after :meth:`stop`.
    master_port, webui_port : int, optional
        The master's RPC port and web UI port on 127.0.0.1; free ports when omitted.
    startup_timeout : datetime.timedelta
        How long :meth:`start` waits for the master and every worker.
    env : Mapping[str, str], optional
        Extra environment variables for the JVMs (and so for executors and their Python
        workers), on top of this process's environment.

    Raises
    ------
    ConfigError
        If ``workers`` or ``cores_per_worker`` is below 1 or ``memory_per_worker`` is not a size.

    Examples
    --------
    >>> with SparkStandaloneCluster(workers=2) as cluster:  # doctest: +SKIP
    ...     app = KafkaStreams(topology, {**config, "spark.master": cluster.master_url})
    """

    #: Interface every JVM binds to.
    host = "127.0.0.1"

    def __init__(
        self,
        workers: int = 2,
        *,
        cores_per_worker: int = 1,
        memory_per_worker: str = "2g",
        directory: str | os.PathLike[str] | None = None,
        keep: bool = False,
        master_port: int | None = None,
        webui_port: int | None = None,
        startup_timeout: timedelta = timedelta(seconds=120),
        env: Mapping[str, str] | None = None,
    ) -> None:
        if workers < 1:
            raise ConfigError(f"a Spark cluster needs at least 1 worker; got workers={workers}")
        if cores_per_worker < 1:
            raise ConfigError(f"cores_per_worker must be at least 1; got {cores_per_worker}")
        self._memory_mib = parse_memory(memory_per_worker)
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self._requested_dir = pathlib.Path(directory).absolute() if directory is not None else None
        self._keep = keep
        self._requested_ports = (master_port, webui_port)
        self._timeout = startup_timeout.total_seconds()
        self._extra_env = dict(env or {})
        self._dir: pathlib.Path | None = None
        self._owns_dir = False
        self._master: subprocess.Popen[bytes] | None = None
        self._master_pid: int | None = None
        self._port: int | None = None
        self._webui_port: int | None = None
        self._workers: list[_Worker] = []
        self._lock = threading.RLock()
        self._started = False
        #: Seconds the last :meth:`start` took, or ``None``.
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SparkStandaloneCluster:
        """Start the master and the workers; return once all workers are ``ALIVE``.

        Returns
        -------
        SparkStandaloneCluster
            ``self``.

        Raises
        ------
        EnvironmentSetupError
            If Java (17+) or PySpark's ``bin/spark-class`` is missing.
        SparkClusterError
            If a requested port is in use, or the master or a worker exits during startup or is
            not ready within ``startup_timeout``; the message names it, its log file and the
            log's last lines.
        """
        from streamtable.runtime.jars import check_java

        with self._lock:
            if self._started:
                return self
            started_at = time.monotonic()
            deadline = started_at + self._timeout
            home = spark_home()
            check_java()
            names = ("master_port", "webui_port")
            for name, port in zip(names, self._requested_ports, strict=True):
                if port is not None and not port_is_free(port, self.host):
                    raise SparkClusterError(
                        f"{name} {port} on {self.host} is in use; choose another (or omit it "
                        "to get a free one)"
                    )
            _LIVE.add(self)
            self._started = True
            try:
                self._prepare_dir()
                ports = free_ports(2 + 2 * self.workers, self.host)
                self._port = self._requested_ports[0] or ports[0]
                self._webui_port = self._requested_ports[1] or ports[1]
                self._master = self._launch(home, "master", self._master_args())
                self._master_pid = self._master.pid
                self._wait_master(deadline)
                self._workers = [
                    _Worker(i, ports[2 + 2 * i], ports[3 + 2 * i]) for i in range(self.workers)
                ]
                for worker in self._workers:
                    self._launch_worker(home, worker)
                self._wait_workers(deadline, self._timeout)
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - started_at
            return self

    def stop(self, grace: float = 15.0) -> None:
        """Stop the workers (and their executors), then the master; safe to call twice.

        The folder is deleted unless it was given or ``keep`` is set.

        Parameters
        ----------
        grace : float
            Seconds each JVM gets after SIGTERM before its process tree is killed.
        """
        with self._lock:
            if not self._started:
                return
            if self._dir is not None:
                stop_cluster_processes(
                    self._master_pid, [w.pid for w in self._workers if w.pid], self._dir, grace
                )
            for proc in [self._master, *(w.process for w in self._workers)]:
                if proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
                    _watchdog.release(proc.pid)
            self._master = None
            self._master_pid = None
            self._workers = []
            self._started = False
            _LIVE.discard(self)
            if self._owns_dir and not self._keep and self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    def detach(self) -> dict[str, Any]:
        """Leave the running cluster alone: :meth:`stop` and interpreter exit no longer stop it.

        Used by the background cluster of ``streamtable cluster start``.

        Returns
        -------
        dict
            :meth:`describe` of the cluster (pids, ports, URLs, folder and logs).

        Raises
        ------
        SparkClusterError
            If the cluster is not running.
        """
        with self._lock:
            self._require_started()
            info = self.describe()
            for proc in [self._master, *(w.process for w in self._workers)]:
                if proc is not None:
                    _watchdog.release(proc.pid)
            self._master = None
            for worker in self._workers:
                worker.process = None
            self._started = False
            _LIVE.discard(self)
            return info

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {self.master_url}" if self._started else "stopped"
        return f"SparkStandaloneCluster({state}, workers={self.workers})"

    # ------------------------------------------------------------------ failures (tests)
    def kill_worker(self, index: int) -> list[int]:
        """SIGKILL worker ``index``: its Worker JVM, its executor JVMs and their Python workers.

        A crash of a whole machine's Spark processes, without any orderly shutdown.  The
        master and the applications' drivers notice the lost connections; drivers re-run the
        lost tasks on the executors that remain.

        Parameters
        ----------
        index : int
            Worker number, ``0`` to ``workers - 1``.

        Returns
        -------
        list of int
            The processes killed (the Worker JVM first).

        Raises
        ------
        SparkClusterError
            If the cluster is not running or the worker is not running.
        IndexError
            If there is no worker ``index``.
        """
        with self._lock:
            self._require_started()
            worker = self._workers[index]
            if worker.pid is None or not pid_alive(worker.pid):
                raise SparkClusterError(f"Spark worker {index} is not running")
            killed = kill_tree(worker.pid)
            if worker.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.process.wait(timeout=10)
            worker.pid = None
            return killed

    def restart_worker(self, index: int, *, timeout: timedelta = timedelta(seconds=60)) -> None:
        """Start worker ``index`` again (after :meth:`kill_worker`) and wait until it is ALIVE.

        It registers with the master on a new port, as a new worker; running applications get
        executors on it again.

        Parameters
        ----------
        index : int
            Worker number, ``0`` to ``workers - 1``.
        timeout : datetime.timedelta
            How long to wait for the master to list it ``ALIVE``.

        Raises
        ------
        SparkClusterError
            If the cluster is not running, the worker is still running, or it does not start
            in time (with its log).
        """
        with self._lock:
            self._require_started()
            worker = self._workers[index]
            if worker.pid is not None and pid_alive(worker.pid):
                raise SparkClusterError(f"Spark worker {index} is still running (pid {worker.pid})")
            worker.port, worker.webui_port = free_ports(2, self.host)
            self._launch_worker(spark_home(), worker)
            self._wait_workers(time.monotonic() + timeout.total_seconds(), timeout.total_seconds())

    def executor_pids(self, index: int) -> list[int]:
        """Return the executor JVMs worker ``index`` runs now (one per application).

        Parameters
        ----------
        index : int
            Worker number, ``0`` to ``workers - 1``.

        Returns
        -------
        list of int
            Process ids of ``CoarseGrainedExecutorBackend`` JVMs below the Worker JVM.
        """
        worker = self._workers[index]
        if worker.pid is None:
            return []
        found = []
        for pid in descendants(worker.pid):
            with contextlib.suppress(OSError):
                if EXECUTOR_CLASS.encode() in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
        return found

    def executor_logs(self, index: int) -> list[pathlib.Path]:
        """Return the stderr logs of the executors worker ``index`` has run, oldest first.

        Spark's executors log there (``Running task ...``, ``Finished task ...``), under
        ``<directory>/work-<index>/<app id>/<executor id>/stderr``.

        Parameters
        ----------
        index : int
            Worker number, ``0`` to ``workers - 1``.

        Returns
        -------
        list of pathlib.Path
            Existing files, ordered by modification time.
        """
        self._require_dir()
        assert self._dir is not None
        found = list((self._dir / f"work-{index}").glob("*/*/stderr"))
        return sorted(found, key=lambda path: path.stat().st_mtime)

    # ------------------------------------------------------------------ state
    def status(self, timeout: float = 3.0) -> dict[str, Any] | None:
        """Return the master's JSON state (see :func:`master_status`), or ``None`` if it does
        not answer.
        """
        return master_status(self.webui_url, timeout)

    def alive_workers(self) -> int:
        """Return how many of this cluster's workers the master lists ``ALIVE`` now."""
        state = self.status()
        return len(self._alive(state)) if state else 0

    def describe(self) -> dict[str, Any]:
        """Return pids, ports, URLs, folder and log files of the running cluster.

        Returns
        -------
        dict
            ``master_url``, ``webui_url``, ``master_pid``, ``directory``, ``master_log``,
            ``workers`` (each ``index``, ``pid``, ``port``, ``webui_port``, ``log``,
            ``work_dir``), ``cores_per_worker``, ``memory_per_worker``.
        """
        self._require_started()
        assert self._dir is not None
        return {
            "master_url": self.master_url,
            "webui_url": self.webui_url,
            "master_pid": self._master_pid,
            "directory": str(self._dir),
            "master_log": str(self._dir / "master.log"),
            "cores_per_worker": self.cores_per_worker,
            "memory_per_worker": self.memory_per_worker,
            "workers": [
                {
                    "index": w.index,
                    "pid": w.pid,
                    "port": w.port,
                    "webui_port": w.webui_port,
                    "log": str(self.worker_log(w.index)),
                    "work_dir": str(self._dir / f"work-{w.index}"),
                }
                for w in self._workers
            ],
        }

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``: the ``spark.master`` of applications.

        Raises
        ------
        SparkClusterError
            If the cluster was never started.
        """
        if self._port is None:
            raise SparkClusterError("SparkStandaloneCluster has not been started; no master yet")
        return f"spark://{self.host}:{self._port}"

    @property
    def webui_url(self) -> str:
        """``http://127.0.0.1:<port>``: the master's web UI (JSON state under ``/json/``)."""
        if self._webui_port is None:
            raise SparkClusterError("SparkStandaloneCluster has not been started; no web UI yet")
        return f"http://{self.host}:{self._webui_port}"

    @property
    def directory(self) -> pathlib.Path | None:
        """Folder of the logs and work folders (``None`` before :meth:`start`)."""
        return self._dir

    @property
    def master_pid(self) -> int | None:
        """Process id of the Master JVM, or ``None`` when not running."""
        return self._master_pid

    @property
    def worker_pids(self) -> list[int | None]:
        """Process ids of the Worker JVMs (``None`` for a killed one)."""
        return [w.pid for w in self._workers]

    @property
    def master_log(self) -> pathlib.Path:
        """The master's log file, ``<directory>/master.log``."""
        self._require_dir()
        assert self._dir is not None
        return self._dir / "master.log"

    def worker_log(self, index: int) -> pathlib.Path:
        """Return the log file of worker ``index``, ``<directory>/worker-<index>.log``."""
        self._require_dir()
        assert self._dir is not None
        return self._dir / f"worker-{index}.log"

    # ------------------------------------------------------------------ internals
    def _prepare_dir(self) -> None:
        if self._requested_dir is not None:
            self._dir = self._requested_dir
            self._dir.mkdir(parents=True, exist_ok=True)
            self._owns_dir = False
        else:
            self._dir = pathlib.Path(tempfile.mkdtemp(prefix="streamtable-spark-cluster-"))
            self._owns_dir = True

    def _master_args(self) -> list[str]:
        return [
            MASTER_CLASS,
            "--host",
            self.host,
            "--port",
            str(self._port),
            "--webui-port",
            str(self._webui_port),
        ]

    def _child_env(self) -> dict[str, str]:
        assert self._dir is not None
        env = dict(os.environ)
        env.update(self._extra_env)
        env["SPARK_LOCAL_IP"] = self.host
        env.setdefault("SPARK_DAEMON_MEMORY", DAEMON_MEMORY)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        marker = cluster_marker(self._dir).decode()
        env["SPARK_DAEMON_JAVA_OPTS"] = f"{env.get('SPARK_DAEMON_JAVA_OPTS', '')} {marker}".strip()
        # no REST submission server (unauthenticated, and on the fixed port 6066)
        rest_off = "-Dspark.master.rest.enabled=false"
        env["SPARK_MASTER_OPTS"] = f"{env.get('SPARK_MASTER_OPTS', '')} {rest_off}".strip()
        env.pop("SPARK_HOME", None)  # spark-class finds its own installation
        # the JVMs run in the cluster's folder: relative PYTHONPATH entries must not move
        if env.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.pathsep.join(
                os.path.abspath(entry) if entry else entry
                for entry in env["PYTHONPATH"].split(os.pathsep)
            )
        return env

    def _launch(self, home: pathlib.Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        assert self._dir is not None
        log = self._dir / f"{name}.log"
        with open(log, "ab") as out:
            out.write(
                f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} streamtable starts {name}\n".encode()
            )
            out.flush()
            process = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                env=self._child_env(),
                start_new_session=True,  # a group of its own: stop() reaches its children
                close_fds=True,
            )
        # stopped as stop() does if this process dies first (detach() releases it)
        _watchdog.guard(process.pid, grace=timedelta(seconds=15))
        return process

    def _launch_worker(self, home: pathlib.Path, worker: _Worker) -> None:
        assert self._dir is not None
        args = [
            WORKER_CLASS,
            self.master_url,
            "--host",
            self.host,
            "--port",
            str(worker.port),
            "--webui-port",
            str(worker.webui_port),
            "--cores",
            str(self.cores_per_worker),
            "--memory",
            f"{self._memory_mib}m",
            "--work-dir",
            str(self._dir / f"work-{worker.index}"),
        ]
        worker.process = self._launch(home, f"worker-{worker.index}", args)
        worker.pid = worker.process.pid

    def _wait_master(self, deadline: float) -> None:
        assert self._master is not None
        while True:
            rc = self._master.poll()
            if rc is not None:
                raise SparkClusterError(
                    f"the Spark master exited with code {rc} during startup; read "
                    f"{self.master_log}.\n" + _describe_log(self.master_log)
                )
            state = self.status(timeout=2)
            if state and state.get("status") == "ALIVE":
                return
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"the Spark master at {self.master_url} did not answer on its web UI "
                    f"{self.webui_url}/json/ within {self._timeout:.0f} s; read "
                    f"{self.master_log}.\n" + _describe_log(self.master_log)
                )
            pause(_POLL_S)

    def _alive(self, state: dict[str, Any]) -> set[int]:
        """Indices of our workers the master lists ALIVE (matched by their RPC port)."""
        by_port = {w.port: w.index for w in self._workers if w.pid is not None}
        return {
            by_port[int(w["port"])]
            for w in state.get("workers", [])
            if w.get("state") == "ALIVE"
            and w.get("host") == self.host
            and int(w.get("port", -1)) in by_port
        }

    def _wait_workers(self, deadline: float, timeout_s: float) -> None:
        expected = {w.index for w in self._workers if w.pid is not None}
        while True:
            for worker in self._workers:
                rc = worker.process.poll() if worker.process is not None else None
                if rc is not None:
                    log = self.worker_log(worker.index)
                    worker.pid = None
                    raise SparkClusterError(
                        f"Spark worker {worker.index} exited with code {rc} during startup "
                        f"(master {self.master_url}); read {log}.\n" + _describe_log(log)
                    )
            if self._master is not None and self._master.poll() is not None:
                raise SparkClusterError(
                    f"the Spark master exited with code {self._master.poll()} while its workers "
                    f"started; read {self.master_log}.\n" + _describe_log(self.master_log)
                )
            state = self.status(timeout=2)
            alive = self._alive(state) if state else set()
            if expected <= alive:
                return
            if time.monotonic() > deadline:
                missing = sorted(expected - alive)
                logs = ", ".join(str(self.worker_log(i)) for i in missing)
                tails = "\n".join(_describe_log(self.worker_log(i)) for i in missing)
                raise SparkClusterError(
                    f"Spark worker(s) {', '.join(map(str, missing))} did not register with the "
                    f"master {self.master_url} within {timeout_s:.0f} s (the master lists "
                    f"{len(alive)} of {len(expected)} ALIVE); read {logs} and "
                    f"{self.master_log}.\n{tails}"
                )
            pause(_POLL_S)

    def _require_started(self) -> None:
        if not self._started:
            raise SparkClusterError(
                "SparkStandaloneCluster is not running; call start() or use it as a context manager"
            )

    def _require_dir(self) -> None:
        if self._dir is None:
            raise SparkClusterError("SparkStandaloneCluster has not been started")


def _describe_log(path: pathlib.Path, n: int = 15) -> str:
    """The ERROR lines of a JVM's log (first five) and its last ``n`` lines, for a message."""
    lines = tail_file(path, 400)
    if not lines:
        return f"(no output in {path})"
    errors = [line for line in lines if " ERROR " in line][:5]
    out = [f"--- errors in {path} ---", *errors] if errors else []
    out += [f"--- last {min(n, len(lines))} lines of {path} ---", *lines[-n:]]
    return "\n".join(out)
