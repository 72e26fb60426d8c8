"""A single-node Kafka broker that runs in the background, for development (``streamtable broker``).

Unlike :class:`~streamtable.broker.EmbeddedKafka`, the broker started by
:func:`start_background` outlives the Python process that started it (it runs in its own
session) and keeps its data between restarts.  Its pid, ports and data folder are recorded in
``state.json`` under the broker home: ``$STREAMTABLE_BROKER_HOME`` if set, else
``$XDG_CACHE_HOME/streamtable/broker``, else ``~/.cache/streamtable/broker``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import threading
import time
from datetime import timedelta
from typing import Any

from streamtable import _watchdog
from streamtable.broker._node import (
    KafkaNode,
    broker_classpath,
    default_settings,
    format_all,
    free_port,
    new_cluster_id,
    port_is_free,
    voters_string,
)
from streamtable.errors import BrokerError

__all__ = ["DEFAULT_PORT", "broker_home", "start_background", "status", "stop_background"]

#: Client port tried first when none is given (Kafka's usual port), if it is free.
DEFAULT_PORT = 9092

_STATE = "state.json"
_PORTS = "streamtable-ports.json"


def broker_home() -> pathlib.Path:
    """Return the folder holding the background broker's state file (and default data).

    Returns
    -------
    pathlib.Path
        ``$STREAMTABLE_BROKER_HOME``, else ``$XDG_CACHE_HOME/streamtable/broker``, else
        ``~/.cache/streamtable/broker``.
    """
    override = os.environ.get("STREAMTABLE_BROKER_HOME")
    if override:
        return pathlib.Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "streamtable" / "broker"


def _state_path() -> pathlib.Path:
    return broker_home() / _STATE


def _read_state() -> dict[str, Any] | None:
    try:
        return dict(json.loads(_state_path().read_text()))
    except (OSError, ValueError):
        return None


def _write_state(state: dict[str, Any]) -> None:
    path = _state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


def _pid_alive(pid: int) -> bool:
    """Return whether ``pid`` runs a Kafka broker (not a zombie, not a reused pid)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)  # reap if it is our own exited child
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = pathlib.Path(f"/proc/{pid}")
    if proc.exists():
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
            return b"kafka.Kafka" in (proc / "cmdline").read_bytes()
        except OSError:
            return False
    return True


def _answers(bootstrap: str, timeout: float) -> bool:
    from confluent_kafka.admin import AdminClient

    from streamtable.broker.embedded import _LOG

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}, logger=_LOG)
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception:  # noqa: BLE001 - KafkaException: no broker answered
        return False
    return bool(md.brokers)


def _wait(seconds: float) -> None:
    threading.Event().wait(seconds)


def start_background(
    port: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    startup_timeout: timedelta = timedelta(seconds=60),
) -> dict[str, Any]:
    """Start the background development broker, or return the one already running.

    Parameters
    ----------
    port : int, optional
        Client port on 127.0.0.1.  Default: the port used last time with this data folder,
        else 9092 if free, else a free port.
    data_dir : path-like, optional
        Folder for configuration, data and logs (kept between runs); default
        ``<broker home>/data``.
    startup_timeout : datetime.timedelta
        How long to wait for the broker to answer metadata requests.

    Returns
    -------
    dict
        ``pid``, ``bootstrap_servers``, ``port``, ``data_dir``, ``log_path``, ``started_at``
        (epoch seconds) and ``already_running`` (bool).

    Raises
    ------
    BrokerError
        If the requested port is taken, or the broker exits or does not answer in time; the
        message carries the tail of its log.
    EnvironmentSetupError
        If Java or Maven is missing, or the broker jars cannot be resolved.
    """
    state = _read_state()
    if state and _pid_alive(int(state["pid"])):
        return {**state, "already_running": True}

    folder = pathlib.Path(data_dir).expanduser() if data_dir else broker_home() / "data"
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    previous: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        previous = json.loads((folder / _PORTS).read_text())

    if port is None:
        candidates = [previous.get("port"), DEFAULT_PORT]
        port = next((p for p in candidates if p and port_is_free(int(p))), None) or free_port()
    elif not port_is_free(port):
        raise BrokerError(
            f"port {port} on 127.0.0.1 is in use; choose another with --port "
            "(or STREAMTABLE_BROKER_START_PORT)"
        )
    controller_port = previous.get("controller_port")
    if not controller_port or not port_is_free(int(controller_port)) or controller_port == port:
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()

    node = KafkaNode(0, folder, int(port), int(controller_port))
    node.write_config(voters_string([node]), default_settings(1))
    (folder / _PORTS).write_text(json.dumps({"port": port, "controller_port": controller_port}))
    classpath = broker_classpath()
    deadline = time.monotonic() + startup_timeout.total_seconds()
    format_all([node], classpath, new_cluster_id(), deadline)
    node.launch(classpath, detach=True)
    assert node.process is not None
    # stopped if this command dies before the broker is recorded (grace as stop_background)
    _watchdog.guard(node.process.pid, grace=timedelta(seconds=20))
    try:
        info = _await_started(node, folder, deadline, startup_timeout)
    except BaseException:  # an interrupted start stops its broker (kill() releases it)
        node.terminate()
        raise
    _watchdog.release(node.process.pid)
    return info


def _await_started(
    node: KafkaNode, folder: pathlib.Path, deadline: float, startup_timeout: timedelta
) -> dict[str, Any]:
    """Wait until the background broker answers, then record it in the state file."""
    assert node.process is not None
    while True:
        if node.process.poll() is not None:
            raise BrokerError(
                f"the background Kafka broker exited with code {node.process.returncode} "
                f"during startup.\n{node.describe_failure(40)}"
            )
        if _answers(node.bootstrap, timeout=1.0):
            break
        if time.monotonic() > deadline:
            node.kill()
            raise BrokerError(
                f"the background Kafka broker did not answer within "
                f"{startup_timeout.total_seconds():.0f} s.\n{node.describe_failure(40)}"
            )
        _wait(0.2)
    info = {
        "pid": node.process.pid,
        "bootstrap_servers": node.bootstrap,
        "port": node.port,
        "controller_port": node.controller_port,
        "data_dir": str(folder),
        "log_path": str(node.log_path),
        "started_at": time.time(),
    }
    _write_state(info)
    return {**info, "already_running": False}


def stop_background(timeout: timedelta = timedelta(seconds=20)) -> dict[str, Any] | None:
    """Stop the background broker (SIGTERM, then SIGKILL after ``timeout``); keep its data.

    Parameters
    ----------
    timeout : datetime.timedelta
        Grace period for a controlled shutdown.

    Returns
    -------
    dict or None
        The state of the broker that was stopped, or ``None`` if none was running.
    """
    state = _read_state()
    if not state:
        return None
    pid = int(state["pid"])
    was_running = _pid_alive(pid)
    if was_running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout.total_seconds()
        while _pid_alive(pid) and time.monotonic() < deadline:
            _wait(0.1)
        if _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10
            while _pid_alive(pid) and time.monotonic() < kill_deadline:
                _wait(0.1)
    with contextlib.suppress(OSError):
        _state_path().unlink()
    return state if was_running else None


def status(*, timeout: float = 3.0) -> dict[str, Any]:
    """Describe the background broker.

    Parameters
    ----------
    timeout : float
        Seconds to wait for a metadata answer.

    Returns
    -------
    dict
        ``running`` (process alive), ``answers`` (metadata request answered), and when a state
        file exists: ``pid``, ``bootstrap_servers``, ``port``, ``data_dir``, ``log_path``,
        ``started_at``; always ``state_file``.
    """
    state = _read_state()
    result: dict[str, Any] = {"running": False, "answers": False, "state_file": str(_state_path())}
    if not state:
        return result
    result.update(state)
    result["running"] = _pid_alive(int(state["pid"]))
    if result["running"]:
        result["answers"] = _answers(str(state["bootstrap_servers"]), timeout)
    return result
