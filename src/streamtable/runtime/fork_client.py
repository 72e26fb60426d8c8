"""The client of :mod:`streamtable.runtime.fork_server`, run by the launcher as a script.

``python -I -S fork_client.py -m <module> [args...]``: hands the arguments, the environment,
the working folder and the standard streams to the server at ``$STREAMTABLE_FORK_SERVER``,
forwards ``SIGTERM``, ``SIGINT`` and ``SIGHUP`` to the process it forks, and exits with that
process's status. When no server answers, it becomes ``python -m <module> [args...]`` itself
(``exec``), as Spark would have started it; it waits up to 2 s for the server's socket to
appear first. Standard library only: it runs without
``site-packages``, before anything else is imported.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

#: Seconds to wait for the server's socket to appear before starting the process itself.
WAIT_S = 2.0


def _fallback(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main(argv: list[str]) -> int:
    """Run ``argv`` (``-m <module> ...``) in a process forked by the server; its exit status."""
    path = os.environ.get("STREAMTABLE_FORK_SERVER", "")
    # the daemon that forks the server starts with the session, in the background: a query
    # planned right after the session started waits for it (a fresh interpreter takes longer)
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        payload = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [struct.pack(">I", len(payload))], [0, 1, 2])
        conn.sendall(payload)
        head = _recv_exact(conn, 8)
    except OSError:
        head = None
    if head is None:  # no server, or it could not fork: start the process as Spark would
        conn.close()
        _fallback(argv)
    (pid,) = struct.unpack(">q", head)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            status = _recv_exact(conn, 4)
            break
        except InterruptedError:  # pragma: no cover - retried by Python itself (PEP 475)
            continue
        except OSError:
            status = None
            break
    if status is None:  # killed before it could say
        return 1
    return struct.unpack(">i", status)[0] & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
