"""Small helpers shared by the platform services: process liveness, state files, waiting."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import threading
import time
from typing import Any

__all__ = [
    "cache_home",
    "descendants",
    "kill_tree",
    "pid_alive",
    "pause",
    "read_state",
    "signal_group",
    "stop_pid",
    "write_state",
]


def cache_home(env_var: str, name: str) -> pathlib.Path:
    """Return the home folder of a background service.

    Parameters
    ----------
    env_var : str
        Environment variable that overrides the folder, e.g. ``"STREAMTABLE_POSTGRES_HOME"``.
    name : str
        Last path component under the cache root, e.g. ``"postgres"``.

    Returns
    -------
    pathlib.Path
        ``$<env_var>``, else ``$XDG_CACHE_HOME/streamtable/<name>``, else
        ``~/.cache/streamtable/<name>`` (not created).
    """
    override = os.environ.get(env_var)
    if override:
        return pathlib.Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "streamtable" / name


def read_state(path: pathlib.Path) -> dict[str, Any] | None:
    """Return the JSON object stored at ``path``, or ``None`` if it is missing or unreadable."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def write_state(path: pathlib.Path, state: dict[str, Any]) -> None:
    """Write ``state`` as JSON to ``path`` atomically (write a sibling, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


def pid_alive(pid: int, marker: bytes | None = None) -> bool:
    """Return whether process ``pid`` runs (not a zombie) and, if given, has ``marker`` in its
    command line (so that a reused pid is not taken for the service).

    Parameters
    ----------
    pid : int
        Process id.
    marker : bytes, optional
        A byte string expected in ``/proc/<pid>/cmdline``, e.g. ``b"ConnectStandalone"``.

    Returns
    -------
    bool
        ``True`` if the process exists (and matches).
    """
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    proc = pathlib.Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
            if marker is not None:
                return marker in (proc / "cmdline").read_bytes()
        except OSError:
            return False
    return True


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (ignored if it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def pause(seconds: float) -> None:
    """Wait ``seconds`` between polls of a condition (library-side polling with a deadline)."""
    if seconds > 0:
        threading.Event().wait(seconds)


def stop_pid(pid: int, *, first_signal: int, grace: float, marker: bytes | None = None) -> bool:
    """Stop process ``pid``: ``first_signal`` to it, then SIGKILL to its group after ``grace`` s.

    Parameters
    ----------
    pid : int
        Leader of the process group (the service was started in a session of its own).
    first_signal : int
        The polite signal, e.g. ``signal.SIGTERM`` (Kafka Connect) or ``signal.SIGINT``
        (PostgreSQL's fast shutdown).
    grace : float
        Seconds to wait for an orderly exit before SIGKILL.
    marker : bytes, optional
        Command-line marker passed to :func:`pid_alive`.

    Returns
    -------
    bool
        Whether the process was running when called.
    """
    if not pid_alive(pid, marker):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, first_signal)
    deadline = time.monotonic() + grace
    while pid_alive(pid, marker) and time.monotonic() < deadline:
        pause(0.1)
    if pid_alive(pid, marker):
        signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(pid, marker) and time.monotonic() < deadline:
            pause(0.1)
    return True


def descendants(root: int) -> list[int]:
    """Return every process below ``root`` (children, their children, ...), read from ``/proc``.

    Parameters
    ----------
    root : int
        Process id whose descendants are wanted.

    Returns
    -------
    list of int
        Process ids at the time of the call, parents before their children; ``[]`` when
        ``root`` has none or ``/proc`` cannot be read.
    """
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().decode(errors="replace").rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int, *, timeout: float = 30.0) -> list[int]:
    """SIGKILL process ``pid``, its process group and all its descendants; wait until gone.

    Descendants are collected first, so processes that put themselves in a group of their own
    (Spark's Python worker daemon does) are killed too.

    Parameters
    ----------
    pid : int
        Root of the tree (its group is killed too when it leads one).
    timeout : float
        Seconds to wait for the processes to disappear (zombies of other parents count as
        gone).

    Returns
    -------
    list of int
        The processes that were signalled (``pid`` first), alive when called.
    """
    tree = [p for p in [pid, *descendants(pid)] if pid_alive(p)]
    for target in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)
    signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in tree) and time.monotonic() < deadline:
        pause(0.05)
    return tree
