"""Apache Kafka Connect (standalone worker) as a JVM child process, driven over its REST API.

:class:`KafkaConnect` starts ``org.apache.kafka.connect.cli.ConnectStandalone`` with the
``"connect"`` jar set (Kafka Connect and Debezium's PostgreSQL connector, resolved with Maven;
see :func:`streamtable.runtime.jars.resolve_jars`), its REST API on a free loopback port and its
source offsets in a file.  Connectors are created and watched through the REST API.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any

from streamtable import _watchdog
from streamtable.broker._node import free_port, port_is_free, tail_file
from streamtable.platform._process import pause
from streamtable.platform.errors import ConnectError
from streamtable.runtime.jars import java_executable, resolve_jars

__all__ = ["JSON_CONVERTER", "MAIN_CLASS", "KafkaConnect", "connect_classpath", "worker_config"]

MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
#: Kafka Connect's JSON converter; with ``schemas.enable=false`` it writes plain JSON.
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
JVM_OPTS: tuple[str, ...] = (
    "-Xms64m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dlog4j2.shutdownHookEnabled=false",
)
_LOG4J2 = """\
status = warn
name = streamtable-kafka-connect
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %X{{connector.context}}%m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""
_POLL_S = 0.2

_LIVE: weakref.WeakSet[KafkaConnect] = weakref.WeakSet()


def _stop_all_at_exit() -> None:
    for connect in list(_LIVE):
        with contextlib.suppress(Exception):
            connect.stop()


atexit.register(_stop_all_at_exit)


def connect_classpath() -> list[pathlib.Path]:
    """Return the Kafka Connect + Debezium jars (resolved once with Maven).

    Raises
    ------
    EnvironmentSetupError
        If Java or Maven is missing, or the jars cannot be resolved.
    """
    return resolve_jars("connect")


def worker_config(
    bootstrap_servers: str,
    rest_port: int,
    offsets_file: pathlib.Path,
    extra: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """Return the properties of a standalone Connect worker.

    Converters default to JSON without schemas (plain JSON keys and values); connectors may
    override them.  The REST API listens on ``127.0.0.1:<rest_port>`` only.  Connectors are
    found on the worker's classpath (``plugin.discovery=service_load``: the jars' service
    manifests, no class scan).

    Parameters
    ----------
    bootstrap_servers : str
        Kafka ``bootstrap.servers``.
    rest_port : int
        Port of the REST API on 127.0.0.1.
    offsets_file : pathlib.Path
        File where the standalone worker keeps source offsets (``offset.storage.file.filename``).
    extra : Mapping[str, object], optional
        More worker properties; they override the defaults.

    Returns
    -------
    dict of str to str
        Property name to value.

    Examples
    --------
    >>> cfg = worker_config("127.0.0.1:9092", 8083, pathlib.Path("/tmp/o"))
    >>> cfg["listeners"], cfg["value.converter.schemas.enable"]
    ('http://127.0.0.1:8083', 'false')
    """
    props: dict[str, object] = {
        "bootstrap.servers": bootstrap_servers,
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": False,
        "value.converter.schemas.enable": False,
        "offset.storage.file.filename": str(offsets_file),
        "offset.flush.interval.ms": 1000,
        "listeners": f"http://127.0.0.1:{rest_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": rest_port,
        "plugin.discovery": "service_load",
        "topic.creation.enable": True,
    }
    props.update(extra or {})
    return {k: _prop_value(v) for k, v in props.items()}


def _prop_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _escape_property(text: str) -> str:
    """Escape a key or value for a Java ``.properties`` file."""
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return out.replace("=", "\\=").replace(":", "\\:").replace("#", "\\#").replace("!", "\\!")


class KafkaConnect:
    """A standalone Kafka Connect worker with Debezium's PostgreSQL connector on its classpath.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.  The worker's log goes
    to ``<data_dir>/connect.log`` and the JVM's console to ``<data_dir>/console.log``; nothing is
    printed.  Source offsets are kept in ``<data_dir>/connect.offsets``, so a restarted worker
    with the same ``data_dir`` resumes its connectors where they were.

    Parameters
    ----------
    bootstrap_servers : str
        The Kafka cluster the connectors write to (and Connect's own clients use).
    rest_port : int, optional
        Port of the REST API on 127.0.0.1; a free one if omitted.
    data_dir : str or pathlib.Path, optional
        Folder for the worker configuration, offsets and logs; a temporary folder if omitted.
    keep : bool
        Keep the data after :meth:`stop` (deleted by default).
    worker_config : Mapping[str, object], optional
        Extra worker properties (see :func:`worker_config`).
    startup_timeout : datetime.timedelta
        How long :meth:`start` waits for the REST API to answer.
    heap : str
        Maximum JVM heap, e.g. ``"512m"``.

    Examples
    --------
    >>> with KafkaConnect("127.0.0.1:9092") as connect:  # doctest: +SKIP
    ...     connect.create_connector("players", config)
    ...     connect.wait_for_connector("players")["connector"]["state"]
    'RUNNING'
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        rest_port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        worker_config: Mapping[str, object] | None = None,
        startup_timeout: timedelta = timedelta(seconds=120),
        heap: str = "512m",
    ) -> None:
        if not bootstrap_servers:
            raise ValueError("bootstrap_servers must not be empty")
        self._bootstrap = bootstrap_servers
        self._requested_port = rest_port
        self._requested_dir = pathlib.Path(data_dir).absolute() if data_dir is not None else None
        self._keep = keep
        self._extra = dict(worker_config or {})
        self._timeout = startup_timeout.total_seconds()
        self._heap = heap
        self._dir: pathlib.Path | None = None
        self._owns_dir = False
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self._started = False
        #: Seconds the last :meth:`start` took (JVM start until the REST API answered).
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KafkaConnect:
        """Start the worker JVM and wait until its REST API lists connectors.

        Returns
        -------
        KafkaConnect
            ``self``.

        Raises
        ------
        ConnectError
            If the REST port is in use, or the worker exits or does not answer within
            ``startup_timeout``; the message carries the tail of the worker log.
        EnvironmentSetupError
            If Java or Maven is missing, or the jars cannot be resolved.
        """
        with self._lock:
            if self._started:
                return self
            started_at = time.monotonic()
            port = self._requested_port
            if port is not None and not port_is_free(port):
                raise ConnectError(
                    f"REST port {port} on 127.0.0.1 is in use; choose another (or omit it to get "
                    "a free one)"
                )
            classpath = connect_classpath()
            _LIVE.add(self)
            self._started = True
            try:
                self._prepare_dir()
                self._port = port if port is not None else free_port()
                self._write_config()
                self._launch(classpath)
                self._wait_ready(started_at + self._timeout)
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - started_at
            return self

    def stop(self, grace: float = 20.0) -> None:
        """Stop the worker (SIGTERM, SIGKILL after ``grace`` seconds); delete data unless kept.

        Connectors stop with the worker; their offsets stay in the offsets file.  Safe to call
        more than once.

        Parameters
        ----------
        grace : float
            Seconds to wait for an orderly shutdown.
        """
        import signal

        with self._lock:
            if not self._started:
                return
            proc = self._process
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    proc.send_signal(signal.SIGTERM)
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
                    for name in _FILES:
                        (self._dir / name).unlink(missing_ok=True)

    def detach(self) -> int:
        """Leave the running worker alone: :meth:`stop` and interpreter exit no longer stop it.

        Used by the background worker of ``streamtable connect start``.

        Returns
        -------
        int
            The process id of the worker JVM.

        Raises
        ------
        ConnectError
            If the worker is not running.
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

    def __enter__(self) -> KafkaConnect:
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
        return f"KafkaConnect({state}, rest_url={self._url_or_none()!r})"

    # ------------------------------------------------------------------ start steps
    def _prepare_dir(self) -> None:
        if self._requested_dir is not None:
            self._dir = self._requested_dir
            self._dir.mkdir(parents=True, exist_ok=True)
            self._owns_dir = False
        else:
            self._dir = pathlib.Path(tempfile.mkdtemp(prefix="streamtable-connect-"))
            self._owns_dir = True

    def _write_config(self) -> None:
        assert self._dir is not None and self._port is not None
        props = worker_config(
            self._bootstrap, self._port, self._dir / "connect.offsets", self._extra
        )
        lines = [f"{_escape_property(k)}={_escape_property(v)}" for k, v in props.items()]
        (self._dir / "worker.properties").write_text("\n".join(lines) + "\n")
        (self._dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_path))

    def _launch(self, classpath: Sequence[pathlib.Path]) -> None:
        assert self._dir is not None
        cmd = [
            java_executable(),
            *JVM_OPTS,
            f"-Xmx{self._heap}",
            f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self._dir}",
            "-cp",
            os.pathsep.join(str(p) for p in classpath),
            MAIN_CLASS,
            str(self._dir / "worker.properties"),
        ]
        with open(self._dir / "console.log", "ab") as out:
            self._process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                start_new_session=True,
                close_fds=True,
            )
        # if this process dies without stop(): SIGTERM, SIGKILL 20 s later, as stop() does
        _watchdog.guard(self._process.pid, grace=timedelta(seconds=20))

    def _wait_ready(self, deadline: float) -> None:
        assert self._process is not None
        last: Exception | None = None
        while True:
            rc = self._process.poll()
            if rc is not None:
                raise ConnectError(
                    f"Kafka Connect exited with code {rc} during startup.\n"
                    + self.describe_failure()
                )
            if time.monotonic() > deadline:
                raise ConnectError(
                    f"Kafka Connect's REST API at {self.rest_url} did not answer within "
                    f"{self._timeout:.0f} s (last error: {last}).\n" + self.describe_failure()
                )
            try:
                self._request("GET", "/connectors", timeout=2.0)
                return
            except (ConnectError, OSError) as exc:
                last = exc
            pause(_POLL_S)

    def describe_failure(self, n: int = 40) -> str:
        """Return the tail of the worker log and console output, for an error message."""
        if self._dir is None:
            return "(Kafka Connect was not started)"
        parts = []
        log = tail_file(self.log_path, n)
        if log:
            parts.append(f"--- last {len(log)} lines of {self.log_path} ---\n" + "\n".join(log))
        console_path = self._dir / "console.log"
        console = [ln for ln in tail_file(console_path, 20) if ln.strip()]
        if console:
            parts.append(f"--- {console_path} ---\n" + "\n".join(console))
        return "\n".join(parts) if parts else f"(no log output in {self._dir})"

    def _require_started(self) -> None:
        if not self._started:
            raise ConnectError(
                "KafkaConnect is not running; call start() or use it as a context manager"
            )

    # ------------------------------------------------------------------ properties
    def _url_or_none(self) -> str | None:
        return f"http://127.0.0.1:{self._port}" if self._port is not None else None

    @property
    def rest_url(self) -> str:
        """Base URL of the REST API, e.g. ``"http://127.0.0.1:40111"``.

        Raises
        ------
        ConnectError
            If the worker was never started.
        """
        url = self._url_or_none()
        if url is None:
            raise ConnectError("KafkaConnect has not been started; no REST URL yet")
        return url

    @property
    def rest_port(self) -> int:
        """Port of the REST API on 127.0.0.1."""
        if self._port is None:
            raise ConnectError("KafkaConnect has not been started; no REST port yet")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """The Kafka cluster the worker writes to."""
        return self._bootstrap

    @property
    def data_dir(self) -> pathlib.Path | None:
        """Folder of the worker configuration, offsets and logs (``None`` before start)."""
        return self._dir

    @property
    def log_path(self) -> pathlib.Path:
        """The worker's log file: ``<data_dir>/connect.log``."""
        if self._dir is None:
            raise ConnectError("KafkaConnect has not been started")
        return self._dir / "connect.log"

    @property
    def pid(self) -> int | None:
        """Process id of the worker JVM, or ``None`` when not running."""
        proc = self._process
        return proc.pid if proc is not None and proc.poll() is None else None

    def log_tail(self, n: int = 40) -> str:
        """Return the last ``n`` lines of the worker log."""
        return "\n".join(tail_file(self.log_path, n))

    # ------------------------------------------------------------------ REST
    def _request(
        self, method: str, path: str, body: object = None, *, timeout: float = 30.0
    ) -> Any:
        return rest_request(self.rest_url, method, path, body, timeout=timeout)

    def connectors(self) -> list[str]:
        """Return the names of the connectors, sorted (``GET /connectors``)."""
        self._require_started()
        return sorted(self._request("GET", "/connectors"))

    def create_connector(self, name: str, config: Mapping[str, object]) -> dict[str, Any]:
        """Create connector ``name`` (``POST /connectors``).

        Parameters
        ----------
        name : str
            Connector name (unique in the worker).
        config : Mapping[str, object]
            Connector configuration; values are sent as strings (``True`` → ``"true"``).

        Returns
        -------
        dict
            Connect's answer: ``name``, ``config``, ``tasks``, ``type``.

        Raises
        ------
        ConnectError
            If Connect refuses it (e.g. HTTP 409: a connector of that name exists; HTTP 400:
            invalid configuration, with Connect's message).
        """
        self._require_started()
        body = {"name": name, "config": {k: _prop_value(v) for k, v in config.items()}}
        return dict(self._request("POST", "/connectors", body))

    def put_connector_config(self, name: str, config: Mapping[str, object]) -> dict[str, Any]:
        """Create connector ``name`` or replace its configuration (``PUT .../config``).

        Raises
        ------
        ConnectError
            If Connect refuses the configuration.
        """
        self._require_started()
        body = {k: _prop_value(v) for k, v in config.items()}
        return dict(self._request("PUT", f"/connectors/{_q(name)}/config", body))

    def connector_status(self, name: str) -> dict[str, Any]:
        """Return the status of connector ``name`` (``GET /connectors/<name>/status``).

        Returns
        -------
        dict
            ``{"name", "connector": {"state", "worker_id", ["trace"]}, "tasks": [{"id",
            "state", "worker_id", ["trace"]}], "type"}``; states are ``UNASSIGNED``,
            ``RUNNING``, ``PAUSED``, ``FAILED``, ``RESTARTING`` or ``STOPPED``.

        Raises
        ------
        ConnectError
            If there is no such connector (HTTP 404).
        """
        self._require_started()
        return dict(self._request("GET", f"/connectors/{_q(name)}/status"))

    def wait_for_connector(
        self, name: str, timeout: timedelta = timedelta(seconds=60)
    ) -> dict[str, Any]:
        """Wait until connector ``name`` and all its tasks (at least one) are ``RUNNING``.

        Parameters
        ----------
        name : str
            Connector name.
        timeout : datetime.timedelta
            How long to wait.

        Returns
        -------
        dict
            The final :meth:`connector_status`.

        Raises
        ------
        ConnectError
            If the connector or a task is ``FAILED`` (the message carries its Java stack
            trace), or it is not running within ``timeout`` (the message carries the last
            status and the tail of the worker log).
        """
        deadline = time.monotonic() + timeout.total_seconds()
        status: dict[str, Any] | None = None
        last: Exception | None = None
        while True:
            try:
                status = self.connector_status(name)
                last = None
            except ConnectError as exc:
                if "HTTP 404" not in str(exc):
                    raise
                last = exc
            if status is not None:
                failed = failure_trace(status)
                if failed:
                    raise ConnectError(f"connector {name!r} failed: {failed}")
                tasks = status.get("tasks") or []
                if (
                    status.get("connector", {}).get("state") == "RUNNING"
                    and tasks
                    and all(t.get("state") == "RUNNING" for t in tasks)
                ):
                    return status
            if time.monotonic() > deadline:
                raise ConnectError(
                    f"connector {name!r} not RUNNING within {timeout.total_seconds():.0f} s "
                    f"(last status: {status or last}).\n" + self.describe_failure(30)
                )
            pause(_POLL_S)

    def delete_connector(self, name: str) -> None:
        """Delete connector ``name`` (``DELETE /connectors/<name>``); its offsets are kept.

        Raises
        ------
        ConnectError
            If there is no such connector (HTTP 404).
        """
        self._require_started()
        self._request("DELETE", f"/connectors/{_q(name)}")


_FILES = ("worker.properties", "log4j2.properties", "connect.offsets", "connect.log", "console.log")


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def failure_trace(status: Mapping[str, Any]) -> str | None:
    """Return a description of the first ``FAILED`` part of a connector status, if any.

    Parameters
    ----------
    status : Mapping[str, Any]
        A connector status as returned by :meth:`KafkaConnect.connector_status`.

    Returns
    -------
    str or None
        ``"connector FAILED: <trace>"`` or ``"task 0 FAILED: <trace>"``, or ``None``.

    Examples
    --------
    >>> failure_trace({"connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "FAILED",
    ...                "trace": "org.postgresql.util.PSQLException: ..."}]})
    'task 0 FAILED: org.postgresql.util.PSQLException: ...'
    """
    connector = status.get("connector") or {}
    if connector.get("state") == "FAILED":
        return f"connector FAILED: {connector.get('trace', '(no trace)')}"
    for task in status.get("tasks") or []:
        if task.get("state") == "FAILED":
            return f"task {task.get('id')} FAILED: {task.get('trace', '(no trace)')}"
    return None


def rest_request(
    base_url: str, method: str, path: str, body: object = None, *, timeout: float = 30.0
) -> Any:
    """Call Kafka Connect's REST API and return the decoded JSON answer.

    Parameters
    ----------
    base_url : str
        E.g. ``"http://127.0.0.1:8083"``.
    method : str
        HTTP method.
    path : str
        Path starting with ``/``.
    body : object, optional
        Sent as JSON.
    timeout : float
        Seconds to wait for the answer.

    Returns
    -------
    Any
        The decoded JSON (``None`` for an empty answer, e.g. HTTP 204).

    Raises
    ------
    ConnectError
        On an HTTP error status; the message has the status and Connect's ``message``.
    OSError
        If the server cannot be reached (``urllib.error.URLError`` is an ``OSError``).
    """
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        base_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback URL
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):
            detail = json.loads(detail).get("message") or detail
        raise ConnectError(
            f"Kafka Connect refused {method} {path} (HTTP {exc.code}): {detail}"
        ) from None
    return json.loads(raw) if raw.strip() else None
