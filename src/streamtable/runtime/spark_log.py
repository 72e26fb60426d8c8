"""Where the Spark JVM's output goes: a log file by default, the console on request.

PySpark starts the driver JVM as a child process that inherits the Python process's stdout
and stderr. Everything the JVM writes then reaches the user's terminal: Spark's log lines, the
JVM's own warnings, and the output of every Python worker process the JVM starts (PySpark's
"Streaming TransformWithStateInPandas Python worker ..." messages, librdkafka lines of the
task producers, ``print()`` calls in user functions), which Spark copies to its stderr.

A streamtable run shows results and what needs action, so when streamtable creates the
session it points the JVM's stdout and stderr at a log file for the JVM's whole life
(:func:`jvm_output_to`): the file descriptors are swapped only while the JVM is launched, so
the Python process keeps its own console. On a cluster, executors' output goes to the cluster
manager's executor logs as usual; this concerns the driver.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from streamtable.errors import EnvironmentSetupError

#: The value of ``streamtable.spark.log`` that keeps the JVM's output on the console.
CONSOLE = "stderr"

_current: str | None = None


def current_spark_log() -> str | None:
    """The log file this process's Spark JVM writes to, or None (console, or no session yet)."""
    return _current


def _open_log(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise EnvironmentSetupError(
            f"Cannot write Spark's log file {str(path)!r}: {exc.strerror or exc}. Set "
            "'streamtable.spark.log' to a writable path (or 'stderr' to keep Spark's output "
            "on the console)."
        ) from exc
    header = (
        f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: "
        "streamtable starts a Spark session ====\n"
    )
    os.write(fd, header.encode())
    return fd


@contextlib.contextmanager
def jvm_output_to(target: str | None) -> Iterator[None]:
    """While the block runs, stdout and stderr (fds 1 and 2) write to ``target``.

    A JVM launched inside the block inherits the file as its stdout and stderr and keeps it
    after the block; the Python process gets its own descriptors back on exit.

    Parameters
    ----------
    target : str or None
        A file path (created with its directories, appended to), or ``None`` / ``"stderr"``
        to change nothing.

    Raises
    ------
    EnvironmentSetupError
        If the log file cannot be created or opened for writing; the message names it.
    """
    global _current
    if target is None or target == CONSOLE:
        yield
        return
    path = Path(target).expanduser()
    fd = _open_log(path)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
        _current = str(path)
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for d in (*saved, fd):
            os.close(d)
