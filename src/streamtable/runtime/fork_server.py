"""A fork server for the Python processes Spark starts on the driver at each query start.

While planning the first micro-batch of a ``transformWithStateInPandas`` query (every start,
every restart), Spark runs the processor's ``init()`` on the driver to learn its state
variables: it starts ``<python> -m pyspark.sql.streaming.transform_with_state_driver_worker``
with ``ProcessBuilder``, never through the worker daemon (``StreamingPythonRunner``). That
process imports PySpark's worker, pandas, pyarrow and, to unpickle the processor,
streamtable's compiler: 1.5 s on an idle core (``python -c "import
pyspark.sql.streaming.transform_with_state_driver_worker, streamtable.compiler.aggregate_processor,
pandas, pyarrow"``, 2 runs), more on a restart, where the JVM's start-up shares the 2 cores.

A Python streaming data source (the TopologyTestDriver's in-memory topics, or a user's) is
the other such process: Spark runs its reader's offsets and partitions in ``<python> -m
pyspark.sql.streaming.python_streaming_source_runner``, one process per source and query
start, which imports PySpark, pandas and pyarrow afresh (forked, the first record of a
TopologyTestDriver comes out 0.7–0.9 s sooner on 2 cores: ``docs/deployment.md``).

In a local session the executor's worker daemon (:mod:`streamtable.runtime.worker_daemon`)
has imported all of them already. It forks one more process, this server, which listens on a
Unix socket (``$STREAMTABLE_FORK_SERVER``). Spark's Python interpreter for the session is a
small launcher (:func:`launcher`): for those two modules it runs
:mod:`streamtable.runtime.fork_client`, which hands its arguments, environment, working
folder and standard streams to the server; the server forks a child that takes them over and
runs the module as ``python -m`` would.
Anything else the launcher starts (the daemon itself, a data source's other planners) execs the
interpreter unchanged, and so does the client when no server answers: without the server,
Spark's behaviour is unchanged.

Protocol (one connection per process): the client sends a 4-byte big-endian length with its
file descriptors 0, 1 and 2 (``SCM_RIGHTS``), then that many bytes of JSON ``{"argv": [...],
"env": {...}, "cwd": "..."}``; the child answers with its process id (8 bytes) and, when the
module returns or exits, its exit status (4 bytes, signed). A client that reads end of file
instead of a status exits 1.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import tempfile
import threading
import traceback
import uuid
from pathlib import Path
from typing import Any

from streamtable.platform._process import pid_alive

#: The environment variable with the server's socket path (set for Spark's Python processes
#: through ``spark.executorEnv``); empty or unset: no server.
ENV_VAR = "STREAMTABLE_FORK_SERVER"
#: The modules the launcher hands to the server: Spark's driver-side process of
#: ``transformWithStateInPandas`` and the runner of a Python streaming data source's reader,
#: the Python processes of a local session that Spark starts without its daemon at every
#: query start.
FORKED_MODULES = (
    "pyspark.sql.streaming.transform_with_state_driver_worker",
    "pyspark.sql.streaming.python_streaming_source_runner",
)
#: Seconds between checks that the daemon that forked the server still runs.
_PARENT_CHECK_S = 0.5
#: Seconds a client has to send its request.
_REQUEST_TIMEOUT_S = 5.0


def socket_path() -> str:
    """A new socket path for one session's server (Unix socket paths are short: ≤ 107 bytes).

    ``<tempdir>/streamtable-fork-<uid>/<driver pid>-<random>.sock``. The sockets of driver
    processes that are gone (a server killed with its daemon cannot remove its own) are
    removed.

    >>> p = socket_path()
    >>> p.endswith(".sock") and len(p.encode()) <= 107
    True
    """
    folder = os.path.join(tempfile.gettempdir(), f"streamtable-fork-{os.getuid()}")
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            pid, _, rest = name.partition("-")
            if rest.endswith(".sock") and pid.isdigit() and not pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))
    return os.path.join(folder, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.sock")


def launcher(python: str, folder: Path, modules: tuple[str, ...] = FORKED_MODULES) -> Path:
    """The launcher script for Spark's Python processes (written on first use).

    Parameters
    ----------
    python : str
        The interpreter it runs (the driver's ``sys.executable``).
    folder : pathlib.Path
        Where launchers are kept; one file per interpreter, client path and modules.
    modules : tuple of str
        The modules handed to the server (default :data:`FORKED_MODULES`).

    Returns
    -------
    pathlib.Path
        An executable ``/bin/sh`` script: ``<script> -m <module> ...`` runs
        :mod:`streamtable.runtime.fork_client` with the same arguments when ``<module>`` is one
        of ``modules`` and ``$STREAMTABLE_FORK_SERVER`` is set, else execs ``python`` with its
        arguments unchanged.

    Raises
    ------
    OSError
        If the folder or the script cannot be written, or the script cannot be executed there
        (a ``noexec`` mount).
    """
    client = str(Path(__file__).with_name("fork_client.py"))
    for s in (python, client, *modules):
        if any(c in s for c in "'\n|)*?[ "):
            raise OSError(f"cannot quote {s!r} in a launcher script")
    cases = "|".join(modules)
    text = (
        "#!/bin/sh\n"
        "# streamtable: Spark's Python for a local session (streamtable.runtime.fork_server)\n"
        f'if [ "$1" = -m ] && [ -n "${ENV_VAR}" ]; then\n'
        f"  case \"$2\" in {cases}) exec '{python}' -I -S '{client}' \"$@\" ;; esac\n"
        "fi\n"
        f"exec '{python}' \"$@\"\n"
    )
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = folder / f"python-{digest}"
    if not (path.is_file() and os.access(path, os.X_OK)):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}"
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)
        if not os.access(path, os.X_OK):
            raise OSError(f"{path} cannot be executed (a noexec mount?)")
    return path


def start(path: str) -> int | None:
    """Fork the server from the calling process (the worker daemon, its modules imported).

    The server runs until the process that forked it exits (checked every 0.5 s) or it gets
    ``SIGHUP`` (PySpark's daemon sends it to its process group when it shuts down). Returns
    the server's process id in the caller, None when the socket cannot be made (the launcher
    then starts processes as Spark would). Never raises.
    """
    try:
        # only this user may connect (a request runs code as this user): a folder of its own
        folder = os.path.dirname(path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder, follow_symlinks=False)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise OSError(f"{folder} is not a folder of this user only (mode 0700)")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(16)
        made = _identity(path)
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
    except OSError as e:
        print(f"streamtable: no fork server at {path}: {e}", file=sys.stderr)
        return None
    if pid:
        listener.close()
        return pid
    code = 0
    try:
        _serve(listener, path, made, parent)
    except SystemExit:
        pass
    except BaseException:  # pragma: no cover - a crash of the server: clients fall back
        traceback.print_exc()
        code = 1
    finally:
        # not a socket another daemon's server bound at the same path since (Spark keeps a
        # daemon per worker environment: each forks a server)
        if _identity(path) == made:
            with contextlib.suppress(OSError):
                os.unlink(path)
    os._exit(code)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _serve(listener: socket.socket, path: str, made: tuple[int, int] | None, parent: int) -> None:
    signal.signal(signal.SIGHUP, _stop)  # as the daemon's workers: its shutdown ends the server
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # (not the forked modules themselves: run as __main__, an imported one would be run twice,
    # with runpy's warning; the daemon imported most of what they import)
    gc.collect()
    gc.freeze()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    while os.getppid() == parent and _identity(path) == made:
        if sel.select(_PARENT_CHECK_S):
            conn, _ = listener.accept()
            conn.settimeout(_REQUEST_TIMEOUT_S)  # a stalled client does not stop the others
            try:
                _check_peer(conn)
                _fork_child(conn, listener)
            except OSError as e:  # a client gone before its request was read: it falls back
                print(f"streamtable: fork server: {e}", file=sys.stderr)
            finally:
                conn.close()
        _reap()


def _check_peer(conn: socket.socket) -> None:
    """Refuse a client of another user (the folder's mode already keeps them out)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    if uid != os.getuid():
        raise OSError(f"refused a client of user {uid}")


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("the client closed its connection mid-request")
        data += chunk
    return bytes(data)


def _fork_child(conn: socket.socket, listener: socket.socket) -> None:
    head, fds, _, _ = socket.recv_fds(conn, 4, 3)
    try:
        if len(head) != 4 or len(fds) != 3:
            raise OSError("a request without its length and three file descriptors")
        (size,) = struct.unpack(">I", head)
        request = json.loads(_recv_exact(conn, size))
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            conn.settimeout(None)
            code = _run(conn, fds, request)
            os._exit(code)
    finally:
        for fd in fds:
            os.close(fd)


def _run(conn: socket.socket, fds: list[int], request: dict[str, Any]) -> int:
    """In the child: become the process the client would have started, run the module."""
    code = 1
    try:
        atexit._clear()  # the server's (none of this process's own)
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it at start
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        conn.sendall(struct.pack(">q", os.getpid()))
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        argv = list(request["argv"])
        module, args = argv[1], argv[2:]
        # as `python -m`: the working folder first, then $PYTHONPATH's entries
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        rest = [p for p in sys.path[1:] if p not in extra]
        sys.path[:] = [os.getcwd(), *extra, *rest]
        sys.argv = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int | None):
                print(e.code, file=sys.stderr)
        # as the interpreter's exit: wait for the threads it started, run its exit functions
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon:
                t.join()
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall(struct.pack(">i", code))
    return code
