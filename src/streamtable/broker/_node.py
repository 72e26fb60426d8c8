"""One Kafka KRaft node (combined ``broker,controller`` roles) run as a ``java`` subprocess.

Internal to :mod:`streamtable.broker`; used by :class:`~streamtable.broker.EmbeddedKafka` and
the background development broker in :mod:`streamtable.broker.daemon`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from streamtable import _watchdog
from streamtable.errors import BrokerError
from streamtable.runtime.jars import java_executable, resolve_jars

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
JVM_OPTS: tuple[str, ...] = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dlog4j2.shutdownHookEnabled=false",
)
_LOG4J2 = """\
status = warn
name = streamtable-embedded-kafka
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.zk.name = org.apache.kafka.clients
logger.zk.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago (bind to port 0).

    Parameters
    ----------
    host : str
        Interface to probe; loopback by default.

    Returns
    -------
    int
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports on ``host`` that were free a moment ago.

    Every probe socket stays bound until all are: two separate :func:`free_port` calls may
    get the same port from the kernel (a broker's two listeners on one port fail to start).

    Parameters
    ----------
    count : int
        How many ports.
    host : str
        Interface to probe; loopback by default.

    Returns
    -------
    list of int
        Distinct port numbers.
    """
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Return whether a server can listen on ``host:port`` right now.

    The probe sets ``SO_REUSEADDR`` as the servers started here do (Kafka's and Connect's JVMs,
    PostgreSQL): connections of a server that just stopped linger in ``TIME_WAIT`` on its port
    and keep a plain ``bind`` from succeeding, not the server's own.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def new_cluster_id() -> str:
    """Return a random KRaft cluster id (22 characters of URL-safe base64, as Kafka makes).

    Like Kafka's ``Uuid.randomUuid``, ids starting with ``-`` are avoided: the storage tool's
    argument parser would take them for an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def tail_file(path: pathlib.Path, n: int) -> list[str]:
    """Return the last ``n`` lines of a text file ([] when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max(n, 1) * 400))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return data.splitlines()[-n:] if n > 0 else []


@dataclass
class KafkaNode:
    """Configuration and process of one combined broker/controller node.

    Parameters
    ----------
    node_id : int
        KRaft ``node.id``.
    home : pathlib.Path
        Folder holding ``server.properties``, ``data/`` and the logs of this node.
    port : int
        Client (``PLAINTEXT``) port on 127.0.0.1.
    controller_port : int
        ``CONTROLLER`` listener port on 127.0.0.1.
    secure_port : int, optional
        Port on 127.0.0.1 of a second client listener, named after its protocol (its keys and
        users come with the settings of :meth:`write_config`); none if omitted.
    secure_protocol : {"SSL", "SASL_SSL", "SASL_PLAINTEXT"}
        That listener's security protocol.
    """

    node_id: int
    home: pathlib.Path
    port: int
    controller_port: int
    secure_port: int | None = None
    secure_protocol: str = "SSL"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def properties_path(self) -> pathlib.Path:
        """Path of the generated ``server.properties``."""
        return self.home / "server.properties"

    @property
    def log_path(self) -> pathlib.Path:
        """Path of the broker's log4j log file."""
        return self.home / "server.log"

    @property
    def console_path(self) -> pathlib.Path:
        """Path of the JVM's captured stdout/stderr."""
        return self.home / "console.log"

    @property
    def data_path(self) -> pathlib.Path:
        """Path of ``log.dirs`` (the partition data and KRaft metadata log)."""
        return self.home / "data"

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the client listener."""
        return f"127.0.0.1:{self.port}"

    def is_formatted(self) -> bool:
        """Return whether the storage was already formatted (``meta.properties`` exists)."""
        return (self.data_path / "meta.properties").is_file()

    def write_config(self, voters: str, settings: Mapping[str, object]) -> None:
        """Write ``server.properties`` and the log4j2 configuration."""
        self.home.mkdir(parents=True, exist_ok=True)
        protocol = self.secure_protocol
        secure = "" if self.secure_port is None else f",{protocol}://127.0.0.1:{self.secure_port}"
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}{secure}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}{secure}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
            + (f",{protocol}:{protocol}" if secure else ""),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_path),
        }
        props.update(settings)
        lines = [f"{k}={_prop_value(v)}" for k, v in props.items()]
        self.properties_path.write_text("\n".join(lines) + "\n")
        (self.home / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_path))

    def _java_cmd(self, classpath: Sequence[pathlib.Path], main: str, *args: str) -> list[str]:
        return [
            java_executable(),
            *JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home}",
            "-cp",
            os.pathsep.join(str(p) for p in classpath),
            main,
            *args,
        ]

    def format_storage(
        self, classpath: Sequence[pathlib.Path], cluster_id: str
    ) -> subprocess.Popen[bytes]:
        """Start ``StorageTool format`` for this node (returns the running process)."""
        cmd = self._java_cmd(
            classpath,
            STORAGE_TOOL,
            "format",
            "--cluster-id",
            cluster_id,
            "--config",
            str(self.properties_path),
            "--ignore-formatted",
        )
        out = open(self.home / "format.log", "wb")  # noqa: SIM115 - closed by the child's exit
        try:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.home)
        finally:
            out.close()

    def launch(self, classpath: Sequence[pathlib.Path], *, detach: bool = False) -> None:
        """Start the broker JVM in its own session/process group.

        Parameters
        ----------
        classpath : sequence of pathlib.Path
            The broker jars.
        detach : bool
            Kept for the background broker, which must survive the caller.  Otherwise the JVM
            is guarded (:func:`streamtable._watchdog.guard`): if the caller dies without
            stopping it, the JVM gets SIGTERM, then SIGKILL 10 s later.
        """
        cmd = self._java_cmd(classpath, MAIN_CLASS, str(self.properties_path))
        with open(self.console_path, "ab") as out:
            self.process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.home,
                start_new_session=True,
                close_fds=True,
            )
        if not detach:
            _watchdog.guard(self.process.pid)

    def alive(self) -> bool:
        """Return whether the JVM is running."""
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the JVM's process group and reap it."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        _watchdog.release(proc.pid)

    def signal_term(self) -> None:
        """Send SIGTERM to the JVM's process group without waiting."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)

    def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM the JVM's process group, then SIGKILL after ``grace`` seconds."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def describe_failure(self, n: int = 40) -> str:
        """Return the tail of this node's log (and console output) for an error message."""
        parts = []
        log = tail_file(self.log_path, n)
        if log:
            parts.append(f"--- last {len(log)} lines of {self.log_path} ---\n" + "\n".join(log))
        console = [ln for ln in tail_file(self.console_path, 20) if ln.strip()]
        if console:
            parts.append(f"--- {self.console_path} ---\n" + "\n".join(console))
        return "\n".join(parts) if parts else f"(no log output in {self.home})"


def _prop_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def voters_string(nodes: Sequence[KafkaNode]) -> str:
    """Return ``controller.quorum.voters`` for ``nodes``."""
    return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)


def default_settings(brokers: int) -> dict[str, object]:
    """Return broker settings suited to tests for a cluster of ``brokers`` nodes."""
    rf = min(brokers, 3)
    min_isr = 2 if rf >= 3 else 1
    return {
        "num.partitions": 1,
        "default.replication.factor": rf,
        "auto.create.topics.enable": False,
        "delete.topic.enable": True,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": 0,
        "broker.heartbeat.interval.ms": 500,
        "broker.session.timeout.ms": 6000,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        "socket.request.max.bytes": 104857600,
    }


def format_all(
    nodes: Sequence[KafkaNode], classpath: Sequence[pathlib.Path], cluster_id: str, deadline: float
) -> None:
    """Format the storage of every unformatted node (concurrently); raise BrokerError on failure."""
    running = [(n, n.format_storage(classpath, cluster_id)) for n in nodes if not n.is_formatted()]
    for node, proc in running:
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for _, p in running:
                p.kill()
            raise BrokerError(
                f"Kafka node {node.node_id}: formatting the storage timed out; its output:\n"
                + "\n".join(tail_file(node.home / "format.log", 40))
            ) from None
        if rc != 0:
            raise BrokerError(
                f"Kafka node {node.node_id}: formatting the storage failed (exit {rc}); "
                "its output:\n" + "\n".join(tail_file(node.home / "format.log", 40))
            )


def broker_classpath() -> list[pathlib.Path]:
    """Return the broker jars (resolved once with Maven; see :func:`resolve_jars`)."""
    return resolve_jars("broker")
