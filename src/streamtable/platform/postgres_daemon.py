"""A PostgreSQL server that runs in the background, for development (``streamtable postgres``).

Unlike :class:`~streamtable.platform.EmbeddedPostgres` used as a context manager, the server
started by :func:`start_background` outlives the Python process that started it and keeps its
data between restarts.  Its pid, port and folders are recorded in ``state.json`` under the
PostgreSQL home: ``$STREAMTABLE_POSTGRES_HOME`` if set, else
``$XDG_CACHE_HOME/streamtable/postgres``, else ``~/.cache/streamtable/postgres``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import time
from datetime import timedelta
from typing import Any

from streamtable.broker._node import free_port, port_is_free
from streamtable.platform._process import cache_home, pid_alive, read_state, stop_pid, write_state
from streamtable.platform.errors import PostgresError
from streamtable.platform.pg_binaries import server_user
from streamtable.platform.postgres import EmbeddedPostgres

__all__ = [
    "DEFAULT_PORT",
    "ROOT_DATA_DIR",
    "default_data_dir",
    "postgres_home",
    "start_background",
    "status",
    "stop_background",
]

#: Port tried first when none is given (PostgreSQL's usual port), if it is free.
DEFAULT_PORT = 5432
#: Default data folder when the caller is root: the server runs as the ``postgres`` user, which
#: cannot enter ``/root``.
ROOT_DATA_DIR = pathlib.Path("/var/tmp/streamtable-postgres")

_STATE = "state.json"
_PORT_FILE = "streamtable-port.json"


def postgres_home() -> pathlib.Path:
    """Return the folder holding the background server's state file.

    Returns
    -------
    pathlib.Path
        ``$STREAMTABLE_POSTGRES_HOME``, else ``$XDG_CACHE_HOME/streamtable/postgres``, else
        ``~/.cache/streamtable/postgres``.
    """
    return cache_home("STREAMTABLE_POSTGRES_HOME", "postgres")


def default_data_dir() -> pathlib.Path:
    """Return the default data folder of the background server.

    Returns
    -------
    pathlib.Path
        ``<postgres home>/data``; :data:`ROOT_DATA_DIR` when the caller is root (the server
        then runs as the ``postgres`` user, which must reach the folder).
    """
    return ROOT_DATA_DIR if server_user() is not None else postgres_home() / "data"


def _state_path() -> pathlib.Path:
    return postgres_home() / _STATE


def _marker(state: dict[str, Any]) -> bytes:
    return str(state["pgdata"]).encode()


def _answers(dsn: str, timeout: float) -> bool:
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def start_background(
    port: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    startup_timeout: timedelta = timedelta(seconds=60),
) -> dict[str, Any]:
    """Start the background PostgreSQL server, or return the one already running.

    Parameters
    ----------
    port : int, optional
        Port on 127.0.0.1.  Default: the port used last time with this data folder, else 5432
        if free, else a free port.
    data_dir : path-like, optional
        Folder for the cluster, socket and log (kept between runs); default
        :func:`default_data_dir`.
    startup_timeout : datetime.timedelta
        How long to wait for ``initdb`` and for the server to accept connections.

    Returns
    -------
    dict
        ``pid``, ``dsn``, ``port``, ``data_dir``, ``pgdata``, ``log_path``, ``started_at``
        (epoch seconds) and ``already_running`` (bool).

    Raises
    ------
    PostgresError
        If the requested port is in use, or the server fails to start (with its log tail).
    EnvironmentSetupError
        If the PostgreSQL programs are missing (the message says ``apt-get install
        postgresql``).
    """
    state = read_state(_state_path())
    if state and pid_alive(int(state["pid"]), _marker(state)):
        return {**state, "already_running": True}
    folder = pathlib.Path(data_dir).expanduser() if data_dir else default_data_dir()
    folder = folder.absolute()
    previous: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        previous = json.loads((folder / _PORT_FILE).read_text())
    if port is None:
        candidates = [previous.get("port"), DEFAULT_PORT]
        port = next((p for p in candidates if p and port_is_free(int(p))), None) or free_port()
    elif not port_is_free(port):
        raise PostgresError(
            f"port {port} on 127.0.0.1 is in use; choose another with --port "
            "(or STREAMTABLE_POSTGRES_START_PORT)"
        )
    pg = EmbeddedPostgres(
        port=int(port), data_dir=folder, keep=True, startup_timeout=startup_timeout
    )
    pg.start()
    info = {
        "pid": pg.pid,
        "dsn": pg.dsn,
        "port": pg.port,
        "data_dir": str(folder),
        "pgdata": str(pg.pgdata),
        "log_path": str(pg.log_path),
        "started_at": time.time(),
    }
    pg.detach()
    (folder / _PORT_FILE).write_text(json.dumps({"port": info["port"]}))
    write_state(_state_path(), info)
    return {**info, "already_running": False}


def stop_background(timeout: timedelta = timedelta(seconds=30)) -> dict[str, Any] | None:
    """Stop the background server (fast shutdown, SIGKILL after ``timeout``); keep its data.

    Parameters
    ----------
    timeout : datetime.timedelta
        Grace period for the fast shutdown (open sessions are ended).

    Returns
    -------
    dict or None
        The state of the server that was stopped, or ``None`` if none was running.
    """
    state = read_state(_state_path())
    if not state:
        return None
    was_running = stop_pid(
        int(state["pid"]),
        first_signal=signal.SIGINT,
        grace=timeout.total_seconds(),
        marker=_marker(state),
    )
    with contextlib.suppress(OSError):
        _state_path().unlink()
    return state if was_running else None


def status(*, timeout: float = 3.0) -> dict[str, Any]:
    """Describe the background server.

    Parameters
    ----------
    timeout : float
        Seconds to wait for a connection.

    Returns
    -------
    dict
        ``running`` (process alive), ``answers`` (a connection succeeded) and, when a state
        file exists, the fields of :func:`start_background`; always ``state_file``.
    """
    state = read_state(_state_path())
    result: dict[str, Any] = {"running": False, "answers": False, "state_file": str(_state_path())}
    if not state:
        return result
    result.update(state)
    result["running"] = pid_alive(int(state["pid"]), _marker(state))
    if result["running"]:
        result["answers"] = _answers(str(state["dsn"]), timeout)
    return result
