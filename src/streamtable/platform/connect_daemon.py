"""A Kafka Connect worker that runs in the background, for development (``streamtable connect``).

The worker started by :func:`start_background` outlives the Python process that started it and
keeps its source offsets between restarts.  Its pid, REST URL and folders are recorded in
``state.json`` under the Connect home: ``$STREAMTABLE_CONNECT_HOME`` if set, else
``$XDG_CACHE_HOME/streamtable/connect``, else ``~/.cache/streamtable/connect``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from streamtable.errors import ConfigError
from streamtable.platform._process import cache_home, pid_alive, read_state, stop_pid, write_state
from streamtable.platform.connect import MAIN_CLASS, KafkaConnect, _prop_value, rest_request
from streamtable.platform.errors import ConnectError

__all__ = [
    "connect_home",
    "load_connector_file",
    "start_background",
    "status",
    "stop_background",
]

_STATE = "state.json"
_MARKER = MAIN_CLASS.encode()


def connect_home() -> pathlib.Path:
    """Return the folder holding the background worker's state file (and default data).

    Returns
    -------
    pathlib.Path
        ``$STREAMTABLE_CONNECT_HOME``, else ``$XDG_CACHE_HOME/streamtable/connect``, else
        ``~/.cache/streamtable/connect``.
    """
    return cache_home("STREAMTABLE_CONNECT_HOME", "connect")


def _state_path() -> pathlib.Path:
    return connect_home() / _STATE


def load_connector_file(path: str | os.PathLike[str]) -> tuple[str, dict[str, str]]:
    """Read a connector definition from a JSON file.

    Two shapes are accepted: Kafka Connect's REST form ``{"name": ..., "config": {...}}``, or a
    flat configuration object that has a ``"name"`` key.

    Parameters
    ----------
    path : path-like
        The JSON file.

    Returns
    -------
    tuple of (str, dict of str to str)
        The connector name and its configuration (values as strings; ``name`` removed).

    Raises
    ------
    ConfigError
        If the file cannot be read, is not a JSON object, or has no connector name.
    """
    path = pathlib.Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read connector file {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"connector file {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"connector file {path} must hold a JSON object")
    config = data.get("config", data)
    if not isinstance(config, dict):
        raise ConfigError(f'"config" in connector file {path} must be a JSON object')
    name = data.get("name") or config.get("name")
    if not name or not isinstance(name, str):
        raise ConfigError(
            f'connector file {path} has no "name"; give {{"name": ..., "config": {{...}}}}'
        )
    out = {str(k): _prop_value(v) for k, v in config.items() if k != "name"}
    return name, out


def _default_bootstrap() -> str:
    from streamtable.broker import daemon

    info = daemon.status(timeout=2.0)
    if not info["running"]:
        raise ConnectError(
            "no bootstrap servers given and no background Kafka broker runs; start one with "
            "`streamtable broker start`, or give --bootstrap-servers"
        )
    return str(info["bootstrap_servers"])


def start_background(
    connectors: Sequence[tuple[str, Mapping[str, object]]] = (),
    *,
    bootstrap_servers: str | None = None,
    rest_port: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    startup_timeout: timedelta = timedelta(seconds=120),
) -> dict[str, Any]:
    """Start the background worker (or reuse the running one) and create or update connectors.

    Parameters
    ----------
    connectors : sequence of (str, Mapping[str, object])
        ``(name, config)`` pairs, e.g. from :func:`load_connector_file`; each is created, or
        its configuration replaced if it exists (``PUT /connectors/<name>/config``).
    bootstrap_servers : str, optional
        Kafka cluster for a newly started worker; default: the background broker of
        ``streamtable broker start``.  Ignored when a worker already runs.
    rest_port : int, optional
        REST port on 127.0.0.1 for a newly started worker; a free one if omitted.
    data_dir : path-like, optional
        Folder for the worker's configuration, offsets and logs (kept between runs); default
        ``<connect home>/data``.
    startup_timeout : datetime.timedelta
        How long to wait for the REST API to answer.

    Returns
    -------
    dict
        ``pid``, ``rest_url``, ``bootstrap_servers``, ``data_dir``, ``log_path``,
        ``started_at``, ``already_running`` (bool) and ``connectors`` (the names put).

    Raises
    ------
    ConnectError
        If no broker is known, the worker fails to start (with its log tail), or Connect
        refuses a connector configuration (with its message).
    EnvironmentSetupError
        If Java or Maven is missing, or the jars cannot be resolved.
    """
    state = read_state(_state_path())
    if state and pid_alive(int(state["pid"]), _MARKER):
        info = {**state, "already_running": True}
    else:
        bootstrap = bootstrap_servers or _default_bootstrap()
        folder = pathlib.Path(data_dir).expanduser() if data_dir else connect_home() / "data"
        worker = KafkaConnect(
            bootstrap,
            rest_port=rest_port,
            data_dir=folder,
            keep=True,
            startup_timeout=startup_timeout,
        )
        worker.start()
        info = {
            "pid": worker.pid,
            "rest_url": worker.rest_url,
            "bootstrap_servers": bootstrap,
            "data_dir": str(folder.absolute()),
            "log_path": str(worker.log_path),
            "started_at": time.time(),
        }
        worker.detach()
        write_state(_state_path(), info)
        info = {**info, "already_running": False}
    for name, config in connectors:
        body = {k: _prop_value(v) for k, v in config.items()}
        rest_request(str(info["rest_url"]), "PUT", f"/connectors/{_quote(name)}/config", body)
    info["connectors"] = [name for name, _ in connectors]
    return info


def _quote(name: str) -> str:
    import urllib.parse

    return urllib.parse.quote(name, safe="")


def stop_background(timeout: timedelta = timedelta(seconds=30)) -> dict[str, Any] | None:
    """Stop the background worker (SIGTERM, SIGKILL after ``timeout``); keep its offsets.

    Returns
    -------
    dict or None
        The state of the worker that was stopped, or ``None`` if none was running.
    """
    state = read_state(_state_path())
    if not state:
        return None
    was_running = stop_pid(
        int(state["pid"]),
        first_signal=signal.SIGTERM,
        grace=timeout.total_seconds(),
        marker=_MARKER,
    )
    with contextlib.suppress(OSError):
        _state_path().unlink()
    return state if was_running else None


def status(*, timeout: float = 3.0) -> dict[str, Any]:
    """Describe the background worker and its connectors.

    Parameters
    ----------
    timeout : float
        Seconds to wait for each REST answer.

    Returns
    -------
    dict
        ``running`` (process alive), ``answers`` (REST API answered), ``connectors`` (name →
        status as from ``GET /connectors/<name>/status``) and, when a state file exists, the
        fields of :func:`start_background`; always ``state_file``.
    """
    state = read_state(_state_path())
    result: dict[str, Any] = {
        "running": False,
        "answers": False,
        "connectors": {},
        "state_file": str(_state_path()),
    }
    if not state:
        return result
    result.update(state)
    result["running"] = pid_alive(int(state["pid"]), _MARKER)
    if not result["running"]:
        return result
    url = str(state["rest_url"])
    try:
        names = rest_request(url, "GET", "/connectors", timeout=timeout)
        result["answers"] = True
        for name in sorted(names):
            with contextlib.suppress(ConnectError, OSError):
                result["connectors"][name] = rest_request(
                    url, "GET", f"/connectors/{_quote(name)}/status", timeout=timeout
                )
    except (ConnectError, OSError):
        result["answers"] = False
    return result
