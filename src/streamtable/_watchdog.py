"""Stop the services a process started when that process dies without stopping them.

The embedded Kafka broker, PostgreSQL, Kafka Connect and Spark's standalone daemons run in
process groups of their own, so that a Ctrl-C in the terminal reaches the Python process first
and it stops them in order.  The price: a Python process killed with SIGKILL (or by the OOM
killer, or a crash) leaves them running, with parent 1.  Kafka Streams has no such problem
because it starts no services; its embedded test cluster (``EmbeddedKafkaCluster``) lives inside
the test JVM and dies with it.

:func:`guard` hands a service's process group to a small watchdog process, started on first use
with its standard input a pipe from this process.  When the pipe reaches end-of-file (every copy
of its write end is closed: the process has exited, whichever way), the watchdog sends each
still-guarded group its polite signal, waits the service's grace period, then sends SIGKILL to
what is left.  :func:`release` takes a group back (a stopped or detached service).

A process stopped in order has stopped and released its services before it exits, so the
watchdog then finds nothing to do.  This file uses the standard library only: the watchdog runs
it as a script (``python -I _watchdog.py``), without importing streamtable.

POSIX only; elsewhere :func:`guard` does nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import IO

__all__ = ["guard", "release"]

_LOG = logging.getLogger("streamtable.watchdog")
_LOCK = threading.Lock()
_POLL_S = 0.2


class _Channel:
    """The write end of the pipe to this process's watchdog."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.process = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C or a group kill of this process spares it
            close_fds=True,
        )
        assert self.process.stdin is not None
        self.pipe: IO[bytes] = self.process.stdin

    def send(self, line: str) -> bool:
        try:
            self.pipe.write(line.encode() + b"\n")
            self.pipe.flush()
            return True
        except OSError:  # the watchdog is gone: a new one is started on the next guard()
            return False


_channel: _Channel | None = None


def _start_time(pid: int) -> str:
    """Return the start time of ``pid`` in clock ticks since boot (``"-"`` without ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().decode(errors="replace").rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "-"


def guard(
    pid: int, *, first_signal: int = signal.SIGTERM, grace: timedelta = timedelta(seconds=10)
) -> None:
    """Stop process group ``pid`` if this process exits while the group still runs.

    Parameters
    ----------
    pid : int
        Leader of a process group (a service started with ``start_new_session=True``).
    first_signal : int
        The polite signal sent to the group first, e.g. ``signal.SIGTERM`` (a JVM's shutdown
        hooks: Kafka's controlled shutdown) or ``signal.SIGINT`` (PostgreSQL's fast shutdown).
    grace : datetime.timedelta
        How long the group has to exit after ``first_signal`` before it gets SIGKILL.

    Notes
    -----
    Best effort: if the watchdog cannot be started or has died, the service is not guarded and
    a debug line says so; nothing is raised.  The watchdog checks the process's start time
    (``/proc/<pid>/stat``) before it signals, so a reused pid is left alone.
    """
    global _channel
    if os.name != "posix":
        return
    line = f"+ {pid} {int(first_signal)} {grace.total_seconds():.3f} {_start_time(pid)}"
    with _LOCK:
        for _ in range(2):
            if _channel is None or _channel.owner != os.getpid():  # none yet, or a fork's copy
                try:
                    _channel = _Channel()
                except OSError as exc:
                    _LOG.debug("no watchdog for process %d: %s", pid, exc)
                    return
            if _channel.send(line):
                return
            _channel = None
        _LOG.debug("no watchdog for process %d: it exited", pid)


def release(pid: int) -> None:
    """Stop guarding process group ``pid`` (it was stopped, or detached on purpose).

    Parameters
    ----------
    pid : int
        A pid given to :func:`guard` before; unknown pids are ignored.
    """
    with _LOCK:
        if _channel is not None and _channel.owner == os.getpid():
            _channel.send(f"- {pid}")


# ---------------------------------------------------------------------- the watchdog process
def _alive(pid: int, started: str) -> bool:
    """Return whether ``pid`` runs (not a zombie) and is the process that was guarded."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
        return fields[0] not in ("Z", "X") and (started == "-" or fields[19] == started)
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _stop(guarded: dict[int, tuple[int, float, str]]) -> None:
    """Send each live group its polite signal, then SIGKILL after its grace period."""
    now = time.monotonic()
    deadlines: dict[int, float] = {}
    for pid, (sig, grace, started) in guarded.items():
        if _alive(pid, started):
            _signal_group(pid, sig)
            deadlines[pid] = now + grace
    while deadlines:
        time.sleep(_POLL_S)
        now = time.monotonic()
        for pid, deadline in list(deadlines.items()):
            if not _alive(pid, guarded[pid][2]):
                del deadlines[pid]
            elif now >= deadline:
                _signal_group(pid, signal.SIGKILL)
                del deadlines[pid]


def _main() -> None:
    """Read ``+ pid signal grace start`` and ``- pid`` lines until end-of-file, then stop."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals are for the app
        signal.signal(sig, signal.SIG_IGN)
    guarded: dict[int, tuple[int, float, str]] = {}
    for raw in sys.stdin.buffer:
        parts = raw.decode(errors="replace").split()
        try:
            if parts[0] == "+":
                guarded[int(parts[1])] = (int(parts[2]), float(parts[3]), parts[4])
            elif parts[0] == "-":
                guarded.pop(int(parts[1]), None)
        except (IndexError, ValueError):
            continue
    _stop(guarded)


if __name__ == "__main__":
    _main()
