"""The client of :mod:`streamtable.runtime.fork_server`, run by the launcher as a script.

``python -I -S fork_client.py -m <module> [args...]``: hands the arguments, the environment,
the working folder and the standard streams to the server at ``$STREAMTABLE_FORK_SERVER``,
forwards ``SIGTERM``, ``SIGINT`` and ``SIGHUP`` to the process it forks (also those that came
while it was handing over), and exits with that process's status (1 when it was killed by a
signal). It becomes ``python -m <module> [args...]`` itself (``exec``), as Spark would have
started it, when no socket appears within 2 s, when the socket's folder or the server is not
this user's only, or when the server has not forked the process within 10 s. Standard library
only: it runs without ``site-packages``, before anything else is imported.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import sys
import time

#: Seconds to wait for the server's socket to appear before starting the process itself.
WAIT_S = 2.0
#: Seconds to hand the process over (connect, send, read its process id).
TIMEOUT_S = 10.0


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


def _trusted(path: str) -> bool:
    """Whether ``path`` is in a folder of this user only (a server there is this user's)."""
    try:
        info = os.stat(os.path.dirname(path), follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def main(argv: list[str]) -> int:
    """Run ``argv`` (``-m <module> ...``) in a process forked by the server; its exit status."""
    path = os.environ.get("STREAMTABLE_FORK_SERVER", "")
    # signals that come before the process is forked are passed on once it is
    pid: int | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if pid is None:
            pending.append(signum)
            return
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    # the daemon that forks the server starts with the session, in the background: a query
    # planned right after the session started waits for it (a fresh interpreter takes longer)
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(path) and time.monotonic() < deadline and not pending:
        time.sleep(0.01)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    head = None
    if _trusted(path) and not pending:
        try:
            conn.settimeout(TIMEOUT_S)
            conn.connect(path)
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", creds)[1] == os.getuid():
                payload = json.dumps(
                    {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
                ).encode()
                socket.send_fds(conn, [struct.pack(">I", len(payload))], [0, 1, 2])
                conn.sendall(payload)
                head = _recv_exact(conn, 8)
        except OSError:
            head = None
    if head is None:  # no server, or it could not fork: start the process as Spark would
        conn.close()
        waited = WAIT_S - max(0.0, deadline - time.monotonic())
        print(
            f"streamtable: no fork server answered at {path!r} (waited {waited:.2f} s); "
            f"starting {' '.join(argv)} as Spark would",
            file=sys.stderr,
            flush=True,
        )
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if pending:
            return 128 + pending[0]
        _fallback(argv)
    (pid,) = struct.unpack(">q", head)
    for signum in pending:
        forward(signum, None)
    conn.settimeout(None)
    try:
        status = _recv_exact(conn, 4)
    except OSError:
        status = None
    if status is None:  # killed before it could say
        return 1
    return struct.unpack(">i", status)[0] & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
