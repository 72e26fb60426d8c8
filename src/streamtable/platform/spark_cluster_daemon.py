"""A Spark standalone cluster that runs in the background, for development
(``streamtable cluster``).

Unlike :class:`~streamtable.platform.spark_cluster.SparkStandaloneCluster` used as a context
manager, the cluster started by :func:`start_background` outlives the Python process that
started it.  Its pids, ports and folder are recorded in ``state.json`` under the cluster home:
``$STREAMTABLE_CLUSTER_HOME`` if set, else ``$XDG_CACHE_HOME/streamtable/spark-cluster``, else
``~/.cache/streamtable/spark-cluster``.  Logs and the workers' work folders are in
``<home>/cluster`` unless another folder is given.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import time
from datetime import timedelta
from typing import Any

from streamtable.platform._process import cache_home, pid_alive, read_state, write_state
from streamtable.platform.spark_cluster import (
    SparkStandaloneCluster,
    cluster_marker,
    master_status,
    stop_cluster_processes,
)

__all__ = ["cluster_home", "start_background", "status", "stop_background"]

_STATE = "state.json"


def cluster_home() -> pathlib.Path:
    """Return the folder holding the background cluster's state file.

    Returns
    -------
    pathlib.Path
        ``$STREAMTABLE_CLUSTER_HOME``, else ``$XDG_CACHE_HOME/streamtable/spark-cluster``, else
        ``~/.cache/streamtable/spark-cluster``.
    """
    return cache_home("STREAMTABLE_CLUSTER_HOME", "spark-cluster")


def _state_path() -> pathlib.Path:
    return cluster_home() / _STATE


def _master_alive(state: dict[str, Any]) -> bool:
    return pid_alive(int(state["master_pid"]), cluster_marker(pathlib.Path(state["directory"])))


def start_background(
    workers: int = 2,
    *,
    cores_per_worker: int = 1,
    memory_per_worker: str = "2g",
    directory: str | os.PathLike[str] | None = None,
    startup_timeout: timedelta = timedelta(seconds=120),
) -> dict[str, Any]:
    """Start the background cluster, or return the one already running.

    Parameters
    ----------
    workers : int
        Number of Worker JVMs (ignored when a cluster already runs).
    cores_per_worker : int
        Cores each worker offers.
    memory_per_worker : str
        Memory each worker offers to executors, e.g. ``"2g"``.
    directory : path-like, optional
        Folder for logs and work folders (kept); default ``<cluster home>/cluster``.
    startup_timeout : datetime.timedelta
        How long to wait for the master and all workers.

    Returns
    -------
    dict
        :meth:`SparkStandaloneCluster.describe` plus ``started_at`` (epoch seconds) and
        ``already_running`` (bool).

    Raises
    ------
    ConfigError
        If ``workers``, ``cores_per_worker`` or ``memory_per_worker`` is invalid.
    SparkClusterError
        If the master or a worker fails to start (the message names its log).
    EnvironmentSetupError
        If Java or PySpark's launcher is missing.
    """
    state = read_state(_state_path())
    if state and _master_alive(state):
        return {**state, "already_running": True}
    if state:  # its master is gone: stop any worker of it that is left
        stop_cluster_processes(
            None,
            [int(w["pid"]) for w in state.get("workers", []) if w.get("pid")],
            pathlib.Path(state["directory"]),
        )
    folder = pathlib.Path(directory).expanduser() if directory else cluster_home() / "cluster"
    cluster = SparkStandaloneCluster(
        workers,
        cores_per_worker=cores_per_worker,
        memory_per_worker=memory_per_worker,
        directory=folder.absolute(),
        keep=True,
        startup_timeout=startup_timeout,
    )
    cluster.start()
    info = {**cluster.detach(), "started_at": time.time()}
    write_state(_state_path(), info)
    return {**info, "already_running": False}


def stop_background(timeout: timedelta = timedelta(seconds=15)) -> dict[str, Any] | None:
    """Stop the background cluster: workers (and their executors) first, then the master.

    Parameters
    ----------
    timeout : datetime.timedelta
        Grace period of each JVM after SIGTERM before its process tree is killed.

    Returns
    -------
    dict or None
        The state of the cluster that was stopped, or ``None`` if none was running.
    """
    state = read_state(_state_path())
    if not state:
        return None
    was_running = stop_cluster_processes(
        state.get("master_pid"),
        [int(w["pid"]) for w in state.get("workers", []) if w.get("pid")],
        pathlib.Path(state["directory"]),
        grace=timeout.total_seconds(),
    )
    with contextlib.suppress(OSError):
        _state_path().unlink()
    return state if was_running else None


def status(*, timeout: float = 3.0) -> dict[str, Any]:
    """Describe the background cluster.

    Parameters
    ----------
    timeout : float
        Seconds to wait for the master's web UI.

    Returns
    -------
    dict
        ``running`` (the master process is alive), ``answers`` (its web UI answered),
        ``state_file`` and, when a cluster was started, the fields of
        :func:`start_background`, each of its ``workers`` with ``running`` (process alive),
        ``state`` (as the master lists it: ``ALIVE``, ``DEAD``... or ``NOT REGISTERED``),
        ``cores`` and ``memory_mib``; when the master answers, ``alive_workers`` and
        ``active_apps`` (names of the running applications).
    """
    state = read_state(_state_path())
    result: dict[str, Any] = {"running": False, "answers": False, "state_file": str(_state_path())}
    if not state:
        return result
    result.update(state)
    result["running"] = _master_alive(state)
    if not result["running"]:
        return result
    master = master_status(str(state["webui_url"]), timeout)
    listed: dict[int, dict[str, Any]] = {}
    if master is not None:
        result["answers"] = True
        result["alive_workers"] = int(master.get("aliveworkers", 0))
        result["active_apps"] = [a.get("name") for a in master.get("activeapps", [])]
        listed = {int(w.get("port", -1)): w for w in master.get("workers", [])}
    marker = cluster_marker(pathlib.Path(state["directory"]))
    result["workers"] = [
        {
            **w,
            "running": bool(w.get("pid")) and pid_alive(int(w["pid"]), marker),
            "state": listed.get(int(w["port"]), {}).get("state", "NOT REGISTERED"),
            "cores": listed.get(int(w["port"]), {}).get("cores"),
            "memory_mib": listed.get(int(w["port"]), {}).get("memory"),
        }
        for w in state.get("workers", [])
    ]
    return result
