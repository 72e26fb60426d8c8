"""Stop the services a process started when that process dies without stopping them.

The embedded Kafka broker, PostgreSQL, Kafka Connect and Spark's standalone daemons run in
process groups of their own, so that a Ctrl-C in the terminal reaches the Python process first
and it stops them in order.  The price: a Python process killed with SIGKILL (or by the OOM
killer, or a crash) leaves them running, with parent 1.  Kafka Streams has no such problem
because it starts no services; its embedded test cluster (``EmbeddedKafkaCluster``) lives inside
the test JVM and dies with it.

:func:`guard` hands a service's process group to a small watchdog process, started on first use
with its standard input a pipe from this process.  When the pipe reaches end-of-file (the process
has exited, whichever way; a child forked from it closes its copy of the pipe at once), the
watchdog sends each still-guarded group its polite signal, waits the service's grace period,
then sends SIGKILL to what is left of the group.  :func:`release` takes a group back (a
stopped or detached service).

A process stopped in order has stopped and released its services before it exits, so the
watchdog then finds nothing to do.  This file uses the standard library only: the watchdog runs
it as a script (``python -I _watchdog.py``), without importing streamtable.

POSIX only (``os.posix_spawn``); elsewhere :func:`guard` does nothing.  Without ``/proc``
(macOS) a reused pid cannot be told from the service, and only live groups are signalled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from datetime import timedelta

__all__ = ["guard", "release"]

_LOG = logging.getLogger("streamtable.watchdog")
_POLL_S = 0.2
_HAS_PROC = os.path.isdir("/proc/self")


class _Channel:
    """The watchdog process and the write end of the pipe to its standard input.

    Spawned with ``os.posix_spawn`` rather than ``subprocess.Popen``: a ``Popen`` object alive
    at interpreter exit warns that its process still runs, and this one must.
    """

    def __init__(self) -> None:
        read_end, self.fd = os.pipe()  # both close-on-exec: no service inherits the write end
        try:
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_end, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,  # a Ctrl-C or a group kill of this process spares it
            )
        except BaseException:
            os.close(self.fd)
            raise
        finally:
            os.close(read_end)

    def send(self, line: str) -> bool:
        """Write ``line``; False (and the channel closed for good) if the watchdog is gone."""
        if self.fd < 0:
            return False
        try:
            os.write(self.fd, line.encode() + b"\n")  # one short write: never split
            return True
        except OSError:  # the watchdog is gone: reap it; the caller starts a new one
            self.close()
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, os.WNOHANG)
            return False

    def close(self) -> None:
        """Close the write end once (its number may be reused by the next ``open()``)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


_LOCK = threading.Lock()
_channel: _Channel | None = None
_guarded: dict[int, str] = {}  # pid -> its "+" line, replayed to a new watchdog


def _after_fork_in_child() -> None:
    """A forked child must not keep its parent's pipe open (the parent's watchdog would wait
    for the child's exit too) nor guard its parent's services.
    """
    global _channel, _guarded
    if _channel is not None:
        _channel.close()
    _channel, _guarded = None, {}
    _LOCK.release()


if hasattr(os, "register_at_fork"):
    # the lock is held across a fork, so that no fork happens while a watchdog is spawned
    # (its pipe not yet in _channel, where the child could close it); posix_spawn, called
    # under the lock, runs no fork handlers
    os.register_at_fork(
        before=_LOCK.acquire, after_in_parent=_LOCK.release, after_in_child=_after_fork_in_child
    )


def _start_time(pid: int) -> str:
    """Return the start time of ``pid`` in clock ticks since boot (``"-"`` without ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().decode(errors="replace").rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "-"


def _send(line: str) -> bool:
    """Send ``line`` (one of ``_guarded``'s) to the watchdog; a new watchdog is sent them all.

    The caller holds ``_LOCK``.
    """
    global _channel
    for _ in range(2):
        if _channel is not None:
            if _channel.send(line):
                return True
        else:
            try:
                _channel = _Channel()
            except Exception as exc:  # noqa: BLE001 - best effort: never fail a service's start
                _LOG.debug("no watchdog: %s", exc)
                return False
            if all(_channel.send(g) for g in _guarded.values()):
                return True
        _channel = None
    return False


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
    The group is stopped once every copy of the pipe's write end is closed: when this process
    has exited, whichever way.  A child forked from it closes its copy at once
    (``os.register_at_fork``).  Best effort: if no watchdog can be started, the service is not
    guarded and a debug line of the ``streamtable.watchdog`` logger says so; nothing is
    raised.  A watchdog that died is replaced by one told of every guarded group.  The
    watchdog compares the leader's start time (``/proc/<pid>/stat``) before it signals, so a
    reused pid is left alone.
    """
    if os.name != "posix" or not sys.executable or not hasattr(os, "posix_spawn"):
        return
    if getattr(sys, "frozen", False) or pid <= 1:  # sys.executable is the app; no group
        return
    started = _start_time(pid)
    if _HAS_PROC and started == "-":  # it has already exited
        return
    line = f"+ {pid} {int(first_signal)} {grace.total_seconds():.3f} {started}"
    with _LOCK:
        _guarded[pid] = line
        if not _send(line):
            _LOG.debug("process group %d is not guarded: no watchdog runs", pid)


def release(pid: int) -> None:
    """Stop guarding process group ``pid`` (it was stopped, or detached on purpose).

    Parameters
    ----------
    pid : int
        A pid given to :func:`guard` before; unknown pids are ignored.
    """
    global _channel
    with _LOCK:
        if _guarded.pop(pid, None) is not None and _channel is not None:
            if not _channel.send(f"- {pid}"):
                _channel = None  # the next guard() starts a new watchdog


# ---------------------------------------------------------------------- the watchdog process
def _running(pid: int, started: str) -> bool:
    """Return whether the guarded group still has a process to stop.

    Its leader counts if it runs (not a zombie) and started at ``started``; a leader that
    exited first (a Python app whose JVM is in its group) leaves the group to be stopped as
    long as the group exists: its id cannot be reused while it has members.  A pid now held
    by another process is not ours.
    """
    if _HAS_PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
            if started not in ("-", fields[19]):
                return False  # the pid was reused
            if fields[0] not in ("Z", "X"):
                return True
        except (OSError, IndexError):
            pass
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _stop(guarded: dict[int, tuple[int, float, str]]) -> None:
    """Send each running group its polite signal, then SIGKILL after its grace period."""
    now = time.monotonic()
    deadlines: dict[int, float] = {}
    for pid, (sig, grace, started) in guarded.items():
        if _running(pid, started):
            _signal_group(pid, sig)
            deadlines[pid] = now + grace
    while deadlines:
        time.sleep(_POLL_S)
        now = time.monotonic()
        for pid, deadline in list(deadlines.items()):
            if not _running(pid, guarded[pid][2]):
                del deadlines[pid]
            elif now >= deadline:
                _signal_group(pid, signal.SIGKILL)
                del deadlines[pid]


def _main() -> None:
    """Read ``+ pid signal grace start`` and ``- pid`` lines until end-of-file, then stop."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals are for the app
        signal.signal(sig, signal.SIG_IGN)
    # posix_spawn passed on the owner's inheritable descriptors: a pipe or socket of the owner
    # must close when the owner exits, not when this process does
    with contextlib.suppress(OSError, ValueError):
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    guarded: dict[int, tuple[int, float, str]] = {}
    for raw in sys.stdin.buffer:
        parts = raw.decode(errors="replace").split()
        try:
            if parts[0] == "+" and int(parts[1]) > 1:  # killpg(0 or 1) would reach far more
                guarded[int(parts[1])] = (int(parts[2]), float(parts[3]), parts[4])
            elif parts[0] == "-":
                guarded.pop(int(parts[1]), None)
        except (IndexError, ValueError):
            continue
    _stop(guarded)


if __name__ == "__main__":
    _main()
