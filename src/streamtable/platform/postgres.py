"""A real PostgreSQL server on a free loopback port, for change-data-capture tests and demos.

:class:`EmbeddedPostgres` runs ``initdb`` into a private folder and starts ``postgres`` from
Debian's PostgreSQL packages with ``wal_level=logical``, so Debezium's PostgreSQL connector can
stream its changes; :mod:`streamtable.platform.postgres_daemon` keeps one running in the
background for the CLI (``streamtable postgres start|status|stop``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any

from streamtable import _watchdog
from streamtable.broker._node import free_port, port_is_free, tail_file
from streamtable.platform._process import pause
from streamtable.platform.errors import PostgresError
from streamtable.platform.pg_binaries import (
    PostgresBinaries,
    ServerUser,
    find_postgres_binaries,
    server_user,
    unreachable_ancestor,
)

__all__ = ["DEFAULT_SETTINGS", "EmbeddedPostgres"]

#: Server settings written to ``streamtable.conf`` (``settings=`` overrides them).  Logical
#: WAL and room for several replication slots for Debezium; durability is traded for speed
#: (``fsync=off``): an embedded server is for tests and development.
DEFAULT_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "max_connections": "50",
    "shared_buffers": "32MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] ",
    "timezone": "UTC",
}

_HBA = """\
# written by streamtable: trust on loopback and the private unix socket only
local   all          all                  trust
host    all          all    127.0.0.1/32  trust
host    all          all    ::1/128       trust
local   replication  all                  trust
host    replication  all    127.0.0.1/32  trust
host    replication  all    ::1/128       trust
"""
_INCLUDE = "include_if_exists = 'streamtable.conf'"
# sun_path is 108 bytes; PostgreSQL appends "/.s.PGSQL.<port>" to the socket folder
_MAX_SOCKET_DIR = 107 - len("/.s.PGSQL.65535")
_POLL_S = 0.1

_LIVE: weakref.WeakSet[EmbeddedPostgres] = weakref.WeakSet()


def _stop_all_at_exit() -> None:
    for pg in list(_LIVE):
        with contextlib.suppress(Exception):
            pg.stop()


atexit.register(_stop_all_at_exit)


def _quote(value: str) -> str:
    """Quote a postgresql.conf value (single quotes, embedded quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


class EmbeddedPostgres:
    """A PostgreSQL server (one ``postgres`` process tree) on 127.0.0.1, for CDC sources.

    :meth:`start` runs ``initdb`` (superuser ``postgres``, trust authentication, UTF-8, C locale)
    into ``<data_dir>/pgdata`` unless it is already initialised, writes the settings
    (:data:`DEFAULT_SETTINGS` plus ``settings``) and a loopback-only ``pg_hba.conf``, starts the
    server and waits until it accepts connections.  The unix socket is in ``<data_dir>/run``; the
    server log is ``<data_dir>/postgres.log``.  When the caller is root the server runs as the
    ``postgres`` user (see :func:`~streamtable.platform.pg_binaries.server_user`), which then owns
    ``data_dir``.

    Parameters
    ----------
    port : int, optional
        TCP port on 127.0.0.1; a free one if omitted.
    data_dir : str or pathlib.Path, optional
        Folder for the cluster, socket and log; a new temporary folder if omitted.  When running
        as root it must be reachable by the server user (not under ``/root``).
    keep : bool
        Keep the data after :meth:`stop`.  A temporary folder is deleted otherwise; a given
        ``data_dir`` loses its ``pgdata``, ``run`` and log.
    settings : Mapping[str, object], optional
        Extra ``postgresql.conf`` settings, e.g. ``{"fsync": "on"}``; they override the defaults.
    startup_timeout : datetime.timedelta
        How long :meth:`start` waits for ``initdb`` and for the server to accept connections.
    binaries : PostgresBinaries, optional
        Server programs to use; found by
        :func:`~streamtable.platform.pg_binaries.find_postgres_binaries` if omitted.

    Examples
    --------
    >>> with EmbeddedPostgres() as pg:  # doctest: +SKIP
    ...     pg.execute("CREATE TABLE t (id int PRIMARY KEY)")
    ...     pg.execute("INSERT INTO t VALUES (1), (2)")
    ...     pg.execute("SELECT count(*) FROM t")
    [(2,)]
    """

    #: Superuser created by ``initdb`` and used by :meth:`connect`.
    user = "postgres"
    #: Database that :meth:`connect` opens by default.
    database = "postgres"
    #: Interface the server listens on.
    host = "127.0.0.1"

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        settings: Mapping[str, object] | None = None,
        startup_timeout: timedelta = timedelta(seconds=60),
        binaries: PostgresBinaries | None = None,
    ) -> None:
        if port is not None and not 1 <= port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {port}")
        self._requested_port = port
        self._requested_dir = pathlib.Path(data_dir).absolute() if data_dir is not None else None
        self._keep = keep
        self._settings = {**DEFAULT_SETTINGS, **{k: str(v) for k, v in (settings or {}).items()}}
        self._timeout = startup_timeout.total_seconds()
        self._binaries = binaries
        self._dir: pathlib.Path | None = None
        self._owns_dir = False
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._user: ServerUser | None = None
        self._lock = threading.RLock()
        self._started = False
        #: Seconds the last :meth:`start` took (initdb + server start), or ``None``.
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> EmbeddedPostgres:
        """Initialise the cluster if needed, start the server and wait until it answers.

        Returns
        -------
        EmbeddedPostgres
            ``self``.

        Raises
        ------
        EnvironmentSetupError
            If the server programs are missing (the message says ``apt-get install
            postgresql``) or, as root, the ``postgres`` user does not exist.
        PostgresError
            If the requested port is in use, ``data_dir`` is unreachable for the server user or
            too deep for a unix socket path, ``initdb`` fails, or the server exits or does not
            accept connections within ``startup_timeout``; the message carries the tail of the
            ``initdb`` output or the server log.
        """
        with self._lock:
            if self._started:
                return self
            started_at = time.monotonic()
            deadline = started_at + self._timeout
            binaries = self._binaries or find_postgres_binaries()
            self._user = server_user()
            port = self._requested_port
            if port is not None and not port_is_free(port, self.host):
                raise PostgresError(
                    f"port {port} on {self.host} is in use; choose another port (or omit it to "
                    "get a free one)"
                )
            _LIVE.add(self)
            self._started = True
            try:
                self._prepare_dir()
                self._port = port if port is not None else free_port(self.host)
                if not (self.pgdata / "PG_VERSION").is_file():
                    self._initdb(binaries, deadline)
                self._write_config()
                self._launch(binaries)
                self._wait_ready(deadline)
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - started_at
            return self

    def stop(self, grace: float = 20.0) -> None:
        """Stop the server (fast shutdown: SIGINT, SIGKILL after ``grace`` seconds).

        The data is deleted unless ``keep`` was given.  Safe to call more than once.

        Parameters
        ----------
        grace : float
            Seconds to wait for the fast shutdown before killing the process group.
        """
        with self._lock:
            if not self._started:
                return
            proc = self._process
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=10)
            if proc is not None:
                _watchdog.release(proc.pid)
            self._process = None
            self._started = False
            _LIVE.discard(self)
            if not self._keep and self._dir is not None:
                if self._owns_dir:
                    shutil.rmtree(self._dir, ignore_errors=True)
                else:
                    for name in ("pgdata", "run", "postgres.log", "initdb.log"):
                        target = self._dir / name
                        if target.is_dir():
                            shutil.rmtree(target, ignore_errors=True)
                        else:
                            target.unlink(missing_ok=True)

    def detach(self) -> int:
        """Leave the running server alone: :meth:`stop` and interpreter exit no longer stop it.

        Used by the background server of ``streamtable postgres start``.

        Returns
        -------
        int
            The process id of the server (the postmaster).

        Raises
        ------
        PostgresError
            If the server is not running.
        """
        with self._lock:
            self._require_started()
            assert self._process is not None
            pid = self._process.pid
            _watchdog.release(pid)
            self._process = None
            self._started = False
            _LIVE.discard(self)
            return pid

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self._started else "stopped"
        return f"EmbeddedPostgres({state}, port={self._port}, data_dir={str(self._dir)!r})"

    # ------------------------------------------------------------------ start steps
    def _prepare_dir(self) -> None:
        if self._requested_dir is not None:
            self._dir = self._requested_dir
            self._dir.mkdir(parents=True, exist_ok=True)
            self._owns_dir = False
        else:
            self._dir = pathlib.Path(tempfile.mkdtemp(prefix="streamtable-pg-"))
            self._owns_dir = True
        run = self._dir / "run"
        if len(str(run)) > _MAX_SOCKET_DIR:
            raise PostgresError(
                f"data_dir {self._dir} is too deep: the unix socket path under it would exceed "
                f"the 107-byte limit; choose a data_dir shorter than {_MAX_SOCKET_DIR - 4} "
                "characters"
            )
        run.mkdir(exist_ok=True)
        if self._user is not None:
            blocked = unreachable_ancestor(self._dir, self._user)
            if blocked is not None:
                raise PostgresError(
                    f"PostgreSQL runs as user {self._user.name!r} (it refuses root), and that "
                    f"user cannot enter {blocked}, so it cannot reach data_dir {self._dir}; "
                    "choose a data_dir elsewhere (e.g. under /tmp or /var/tmp)"
                )
            # only what is ours: a given data_dir may hold other files, left as they are
            pgdata = self._dir / "pgdata"
            ours = [self._dir, run, *run.rglob("*")]
            if pgdata.is_dir():
                ours += [pgdata, *pgdata.rglob("*")]
            for path in ours:
                os.chown(path, self._user.uid, self._user.gid, follow_symlinks=False)

    def _popen_user(self) -> dict[str, Any]:
        """``Popen`` arguments that drop root to the server user (nothing when not root)."""
        if self._user is None:
            return {}
        return {"user": self._user.uid, "group": self._user.gid, "extra_groups": []}

    def _child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if self._user is not None:
            env["HOME"] = str(self._dir)
            env["USER"] = env["LOGNAME"] = self._user.name
        return env

    def _initdb(self, binaries: PostgresBinaries, deadline: float) -> None:
        assert self._dir is not None
        log = self._dir / "initdb.log"
        cmd = [
            str(binaries.initdb),
            "-D",
            str(self.pgdata),
            "-U",
            self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        with open(log, "wb") as out:
            try:
                rc = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self._dir,
                    env=self._child_env(),
                    timeout=max(1.0, deadline - time.monotonic()),
                    check=False,
                    **self._popen_user(),
                ).returncode
            except subprocess.TimeoutExpired:
                raise PostgresError(
                    f"initdb did not finish within {self._timeout:.0f} s; its output:\n"
                    + "\n".join(tail_file(log, 30))
                ) from None
        if rc != 0:
            raise PostgresError(
                f"initdb failed (exit {rc}) for {self.pgdata}; its output:\n"
                + "\n".join(tail_file(log, 30))
            )

    def _write_config(self) -> None:
        assert self._dir is not None and self._port is not None
        settings = {
            **self._settings,
            "listen_addresses": self.host,
            "port": str(self._port),
            "unix_socket_directories": str(self.socket_dir),
        }
        lines = ["# written by streamtable at every start; edit settings= instead"]
        lines += [f"{k} = {_quote(v)}" for k, v in settings.items()]
        files = {
            self.pgdata / "streamtable.conf": "\n".join(lines) + "\n",
            self.pgdata / "pg_hba.conf": _HBA,
        }
        main_conf = self.pgdata / "postgresql.conf"
        text = main_conf.read_text()
        if _INCLUDE not in text:
            files[main_conf] = text.rstrip("\n") + f"\n\n{_INCLUDE}\n"
        for path, content in files.items():
            path.write_text(content)
            if self._user is not None:
                os.chown(path, self._user.uid, self._user.gid)

    def _launch(self, binaries: PostgresBinaries) -> None:
        assert self._dir is not None
        cmd = [str(binaries.postgres), "-D", str(self.pgdata)]
        with open(self.log_path, "ab") as out:
            self._process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                env=self._child_env(),
                start_new_session=True,
                close_fds=True,
                **self._popen_user(),
            )
        # if this process dies without stop(): fast shutdown, as stop() does
        _watchdog.guard(self._process.pid, first_signal=signal.SIGINT, grace=timedelta(seconds=20))

    def _wait_ready(self, deadline: float) -> None:
        import psycopg

        assert self._process is not None
        last: Exception | None = None
        while True:
            rc = self._process.poll()
            if rc is not None:
                raise PostgresError(
                    f"the PostgreSQL server exited with code {rc} during startup.\n"
                    + self._describe_log()
                )
            if time.monotonic() > deadline:
                raise PostgresError(
                    f"the PostgreSQL server did not accept connections on {self.host}:"
                    f"{self._port} within {self._timeout:.0f} s (last error: {last}).\n"
                    + self._describe_log()
                )
            try:
                with psycopg.connect(self.dsn, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                last = exc
            pause(_POLL_S)

    def _describe_log(self, n: int = 30) -> str:
        lines = tail_file(self.log_path, n)
        if not lines:
            return f"(no output in {self.log_path})"
        return f"--- last {len(lines)} lines of {self.log_path} ---\n" + "\n".join(lines)

    def _require_started(self) -> None:
        if not self._started:
            raise PostgresError(
                "EmbeddedPostgres is not running; call start() or use it as a context manager"
            )

    # ------------------------------------------------------------------ properties
    @property
    def port(self) -> int:
        """TCP port on 127.0.0.1.

        Raises
        ------
        PostgresError
            If the server was never started.
        """
        if self._port is None:
            raise PostgresError("EmbeddedPostgres has not been started; no port yet")
        return self._port

    @property
    def dsn(self) -> str:
        """The connection URI of :attr:`database` (libpq form).

        For example ``postgresql://postgres@127.0.0.1:5433/postgres``.
        """
        return self.dsn_for(self.database)

    def dsn_for(self, database: str) -> str:
        """Return the libpq connection URI of ``database`` on this server (as :attr:`user`)."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    @property
    def data_dir(self) -> pathlib.Path | None:
        """Folder holding ``pgdata``, the socket folder and the log (``None`` before start)."""
        return self._dir

    @property
    def pgdata(self) -> pathlib.Path:
        """The cluster folder (``PGDATA``): ``<data_dir>/pgdata``."""
        self._require_dir()
        assert self._dir is not None
        return self._dir / "pgdata"

    @property
    def socket_dir(self) -> pathlib.Path:
        """Folder of the server's unix socket: ``<data_dir>/run``."""
        self._require_dir()
        assert self._dir is not None
        return self._dir / "run"

    @property
    def log_path(self) -> pathlib.Path:
        """The server log: ``<data_dir>/postgres.log``."""
        self._require_dir()
        assert self._dir is not None
        return self._dir / "postgres.log"

    @property
    def pid(self) -> int | None:
        """Process id of the server (the postmaster), or ``None`` when not running."""
        proc = self._process
        return proc.pid if proc is not None and proc.poll() is None else None

    def log_tail(self, n: int = 40) -> str:
        """Return the last ``n`` lines of the server log."""
        return "\n".join(tail_file(self.log_path, n))

    def _require_dir(self) -> None:
        if self._dir is None:
            raise PostgresError("EmbeddedPostgres has not been started")

    # ------------------------------------------------------------------ SQL
    def connect(self, database: str | None = None, *, autocommit: bool = True) -> Any:
        """Open a ``psycopg.Connection`` to ``database`` as the superuser.

        Parameters
        ----------
        database : str, optional
            Database name; :attr:`database` (``"postgres"``) if omitted.
        autocommit : bool
            Commit every statement at once (the default), as ``psql`` does.

        Returns
        -------
        psycopg.Connection
            A new connection; close it (or use it in a ``with`` block).

        Raises
        ------
        PostgresError
            If the server is not running.
        """
        import psycopg

        self._require_started()
        return psycopg.connect(
            self.dsn_for(database or self.database), autocommit=autocommit, connect_timeout=10
        )

    def execute(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        database: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run one SQL statement (or several, without ``params``) in autocommit mode.

        Parameters
        ----------
        sql : str
            The statement; placeholders ``%s`` / ``%(name)s`` as in psycopg.
        params : sequence or mapping, optional
            Values for the placeholders.
        database : str, optional
            Database to run in; :attr:`database` if omitted.

        Returns
        -------
        list of tuple
            The rows of the last statement's result; ``[]`` for a statement without one.

        Raises
        ------
        PostgresError
            If the server is not running.
        psycopg.Error
            If PostgreSQL rejects the statement.
        """
        with self.connect(database) as conn:
            cur = conn.execute(sql, params)
            return list(cur.fetchall()) if cur.description is not None else []

    def create_database(self, name: str) -> str:
        """Create database ``name`` (if it does not exist) and return its connection URI.

        Parameters
        ----------
        name : str
            Database name (an SQL identifier; quoted as needed).

        Returns
        -------
        str
            :meth:`dsn_for` ``name``.
        """
        from psycopg import sql

        exists = self.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if not exists:
            self.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)).as_string())
        return self.dsn_for(name)
