"""A real Apache Kafka cluster (KRaft mode) on loopback ports, for tests and development."""

from __future__ import annotations

import atexit
import logging
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from streamtable.broker._node import (
    KafkaNode,
    broker_classpath,
    default_settings,
    format_all,
    free_ports,
    new_cluster_id,
    tail_file,
    voters_string,
)
from streamtable.broker._security import (
    SECURE_PROTOCOLS,
    ListenerSecurity,
    check_sasl_users,
    make_tls_material,
)
from streamtable.errors import BrokerError

__all__ = ["EmbeddedKafka"]

_LIVE: weakref.WeakSet[EmbeddedKafka] = weakref.WeakSet()
#: the folder of the secured listener's keys, inside the data folder (a name of streamtable's)
_TLS_DIR = ".streamtable-tls"
_POLL_S = 0.2


def _stop_all_at_exit() -> None:
    for kafka in list(_LIVE):
        try:
            kafka.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_stop_all_at_exit)


_LOG = logging.getLogger("streamtable.broker")


def _new_admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    # librdkafka logs every refused connection while nodes start or are killed; route its
    # log through the (quiet by default) "streamtable.broker" logger instead of stderr.
    return AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000, "log_level": 3},
        logger=_LOG,
    )


class EmbeddedKafka:
    """A Kafka cluster of ``brokers`` combined broker/controller KRaft nodes, one JVM each.

    Each node listens on free 127.0.0.1 ports and writes its data and log under ``data_dir``
    (a new temporary folder by default).  Use it as a context manager, or call :meth:`start`
    and :meth:`stop`.  Topics are never auto-created (``auto.create.topics.enable=false``):
    create them with :meth:`create_topic`.

    Parameters
    ----------
    brokers : int
        Number of nodes, each a broker and a KRaft controller voter (1 or more; 3 gives a
        three-voter quorum that tolerates one failure).
    keep : bool
        Keep ``data_dir`` after :meth:`stop` (it is deleted by default).
    data_dir : str or pathlib.Path, optional
        Folder for the nodes' configuration, data and logs; a temporary folder if omitted.
    startup_timeout : datetime.timedelta
        How long :meth:`start` waits for all brokers to appear in the cluster metadata.
    broker_config : dict, optional
        Extra ``server.properties`` settings for every node (Kafka's dotted names); they
        override the test-friendly defaults.
    security_protocol : {"SSL", "SASL_SSL", "SASL_PLAINTEXT"}, optional
        Also listen on a secured listener of this protocol, at
        :attr:`secure_bootstrap_servers`, for testing an application's security settings
        (:meth:`client_security_config` gives a client's); the ``PLAINTEXT`` listener stays
        for everything else. ``SSL`` requires a client certificate; ``SASL_*`` authenticates
        with the ``PLAIN`` mechanism. For TLS, a CA and the broker's and a client's keys are
        made for this cluster by the JDK's ``keytool`` (about 10 s more at :meth:`start`).
    sasl_users : Mapping[str, str], optional
        SASL users and their passwords (``SASL_*``); one user ``streamtable`` with a random
        password by default.

    Raises
    ------
    ValueError
        If ``brokers`` < 1, ``security_protocol`` is none of its three values, or
        ``sasl_users`` is given without a ``SASL_*`` protocol, is empty, or has a user name
        or password that Kafka's JAAS configuration cannot hold.

    Notes
    -----
    The broker jars are resolved with Maven on first use (see
    :func:`streamtable.runtime.jars.resolve_jars`).  Every started cluster is also stopped by an
    ``atexit`` hook.  Default settings: ``num.partitions=1``, replication factors of internal
    topics ``min(brokers, 3)``, ``group.initial.rebalance.delay.ms=0``, JVM heap 512 MiB per node.

    Examples
    --------
    >>> from streamtable.broker import EmbeddedKafka
    >>> with EmbeddedKafka() as kafka:  # doctest: +SKIP
    ...     kafka.create_topic("words", partitions=3)
    ...     print(kafka.bootstrap_servers)
    127.0.0.1:...
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        keep: bool = False,
        data_dir: str | Path | None = None,
        startup_timeout: timedelta = timedelta(seconds=60),
        broker_config: Mapping[str, Any] | None = None,
        security_protocol: str | None = None,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        self._n = brokers
        self._keep = keep
        self._requested_dir = Path(data_dir) if data_dir is not None else None
        self._timeout = startup_timeout.total_seconds()
        self._broker_config = dict(broker_config or {})
        if security_protocol is not None and security_protocol not in SECURE_PROTOCOLS:
            raise ValueError(
                f"security_protocol must be one of {', '.join(SECURE_PROTOCOLS)}, "
                f"got {security_protocol!r}"
            )
        if sasl_users is not None and not str(security_protocol).startswith("SASL"):
            raise ValueError(
                "sasl_users needs security_protocol='SASL_SSL' or 'SASL_PLAINTEXT', "
                f"got {security_protocol!r}"
            )
        self._protocol = security_protocol
        if sasl_users is not None:
            check_sasl_users(sasl_users)
        self._sasl_users = dict(sasl_users or {"streamtable": secrets.token_hex(12)})
        self._security: ListenerSecurity | None = None
        self._dir: Path | None = None
        self._owns_dir = False
        self._nodes: list[KafkaNode] = []
        self._classpath: list[Path] = []
        self._lock = threading.RLock()
        self._started = False
        self._admin_client: Any = None
        #: Seconds the last :meth:`start` took (format + JVM start + readiness), or ``None``.
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> EmbeddedKafka:
        """Format storage, start every node and wait until all brokers are in the metadata.

        Returns
        -------
        EmbeddedKafka
            ``self``.

        Raises
        ------
        BrokerError
            If a node exits or the cluster is not ready within ``startup_timeout``; the message
            carries the last ~40 lines of the failing node's log.  The nodes are stopped.
        EnvironmentSetupError
            If Java or Maven is missing, or the broker jars cannot be resolved.
        """
        with self._lock:
            if self._started:
                return self
            started_at = time.monotonic()
            deadline = started_at + self._timeout
            self._classpath = broker_classpath()
            if self._requested_dir is not None:
                self._dir = self._requested_dir
                self._dir.mkdir(parents=True, exist_ok=True)
                self._owns_dir = False
            else:
                self._dir = Path(tempfile.mkdtemp(prefix="streamtable-kafka-"))
                self._owns_dir = True
            per_node = 2 if self._protocol is None else 3
            ports = free_ports(per_node * self._n)
            self._nodes = [
                KafkaNode(
                    i,
                    self._dir / f"node-{i}",
                    ports[per_node * i],
                    ports[per_node * i + 1],
                    ports[per_node * i + 2] if self._protocol else None,
                    self._protocol or "SSL",
                )
                for i in range(self._n)
            ]
            _LIVE.add(self)
            self._started = True  # from here on, a failure stops what started and cleans up
            try:
                voters = voters_string(self._nodes)
                settings = dict(default_settings(self._n))
                if self._protocol is not None:
                    tls = None if self._protocol == "SASL_PLAINTEXT" else self._dir / _TLS_DIR
                    self._security = ListenerSecurity(
                        self._protocol,
                        self._sasl_users if self._protocol.startswith("SASL") else {},
                        None if tls is None else make_tls_material(tls),
                    )
                    settings.update(self._security.broker_settings())
                settings.update(self._broker_config)
                for node in self._nodes:
                    node.write_config(voters, settings)
                format_all(self._nodes, self._classpath, new_cluster_id(), deadline)
                for node in self._nodes:
                    node.launch(self._classpath)
                self._wait_ready(deadline)
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - started_at
            return self

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 10 s) and delete the data unless kept.

        Safe to call more than once.
        """
        with self._lock:
            if not self._started:
                return
            for node in self._nodes:  # signal all first so they shut down in parallel
                node.signal_term()
            for node in self._nodes:
                node.terminate(grace=10.0)
            self._started = False
            self._admin_client = None
            self._security = None  # its files are deleted below unless kept
            _LIVE.discard(self)
            if not self._keep and self._dir is not None:
                if self._owns_dir:
                    shutil.rmtree(self._dir, ignore_errors=True)
                else:
                    for node in self._nodes:
                        shutil.rmtree(node.home, ignore_errors=True)
                    if self._protocol not in (None, "SASL_PLAINTEXT"):
                        shutil.rmtree(self._dir / _TLS_DIR, ignore_errors=True)

    def __enter__(self) -> EmbeddedKafka:
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
        return f"EmbeddedKafka(brokers={self._n}, {state}, bootstrap={self._bootstrap_or_none()!r})"

    # ------------------------------------------------------------------ readiness
    def _first_dead(self) -> KafkaNode | None:
        return next((n for n in self._nodes if n.process is not None and not n.alive()), None)

    def _wait_ready(self, deadline: float) -> None:
        admin = self._admin()
        want = {n.node_id for n in self._nodes}
        seen: set[int] = set()
        while True:
            dead = self._first_dead()
            if dead is not None:
                raise BrokerError(
                    f"Kafka node {dead.node_id} exited with code {dead.process.returncode} "  # type: ignore[union-attr]
                    f"during startup.\n{dead.describe_failure(40)}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"Kafka cluster of {self._n} node(s) not ready within {self._timeout:.0f} s "
                    f"(brokers in metadata: {sorted(seen)}).\n"
                    + self._nodes[0].describe_failure(40)
                )
            try:
                md = admin.list_topics(timeout=max(0.5, min(2.0, remaining)))
                seen = set(md.brokers)
                if want <= seen and md.controller_id >= 0:
                    return
            except Exception:  # noqa: BLE001 - KafkaException while nodes come up
                pass
            _pause(min(_POLL_S, max(0.0, deadline - time.monotonic())))

    def _require_started(self) -> None:
        if not self._started:
            raise BrokerError(
                "EmbeddedKafka is not running; call start() or use it as a context manager"
            )

    # ------------------------------------------------------------------ properties
    def _bootstrap_or_none(self) -> str | None:
        return ",".join(n.bootstrap for n in self._nodes) if self._nodes else None

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` for clients, e.g. ``"127.0.0.1:40123,127.0.0.1:40125"``.

        Raises
        ------
        BrokerError
            If the cluster was never started.
        """
        value = self._bootstrap_or_none()
        if value is None:
            raise BrokerError("EmbeddedKafka has not been started; no bootstrap servers yet")
        return value

    def _secured(self) -> ListenerSecurity:
        security = self._security
        if security is None or not self._nodes:
            raise BrokerError(
                "EmbeddedKafka has no secured listener: create it with "
                "EmbeddedKafka(security_protocol='SSL' | 'SASL_SSL' | 'SASL_PLAINTEXT') and "
                "start it"
            )
        return security

    @property
    def secure_bootstrap_servers(self) -> str:
        """``bootstrap.servers`` of the secured listeners (``security_protocol``), one per node.

        Raises
        ------
        BrokerError
            If the cluster has no ``security_protocol``, or was never started.
        """
        self._secured()
        return ",".join(f"127.0.0.1:{n.secure_port}" for n in self._nodes)

    def client_security_config(self, user: str | None = None) -> dict[str, str]:
        """A client's settings for :attr:`secure_bootstrap_servers`, without the servers.

        Where Kafka's two clients name a setting differently, both names are given, so that
        the same dict serves Spark's Java client and librdkafka (streamtable leaves the other
        client's keys out of its librdkafka clients): the CA as ``ssl.truststore.location``
        (PKCS#12, Java) and ``ssl.ca.location`` (PEM, librdkafka); the client's key and
        certificate as a PKCS#12 ``ssl.keystore.location`` (both clients; ``SSL`` asks for it,
        ``SASL_SSL`` only with ``broker_config={"listener.name.sasl_ssl.ssl.client.auth":
        "required"}``, as Kafka applies the unprefixed key to SSL listeners only); under
        ``SASL_*`` the ``PLAIN`` credentials as ``sasl.jaas.config`` (Java) and
        ``sasl.username``/``sasl.password`` (librdkafka). Prefix them with ``consumer.``,
        ``producer.`` and ``admin.`` for an application.

        Parameters
        ----------
        user : str, optional
            The SASL user (one of ``sasl_users``); the first one by default.

        Returns
        -------
        dict[str, str]
            A new dict.

        Raises
        ------
        BrokerError
            If the cluster has no ``security_protocol``, or was never started.
        KeyError
            If ``user`` is not one of the cluster's SASL users.
        """
        return self._secured().client_settings(user)

    @property
    def brokers(self) -> int:
        """Number of nodes in the cluster."""
        return self._n

    @property
    def node_ids(self) -> list[int]:
        """KRaft ``node.id`` of each node (``0 .. brokers-1``)."""
        return list(range(self._n))

    @property
    def data_dir(self) -> Path | None:
        """Folder holding every node's configuration, data and logs (``None`` before start)."""
        return self._dir

    @property
    def log_path(self) -> Path:
        """Log file of node 0 (``<data_dir>/node-0/server.log``); see :meth:`log_tail`."""
        self._require_nodes()
        return self._nodes[0].log_path

    def log_tail(self, n: int = 40, node_id: int | None = None) -> str:
        """Return the last ``n`` lines of a node's log.

        Parameters
        ----------
        n : int
            Number of lines.
        node_id : int, optional
            Node to read; all nodes, each under a header, if omitted.

        Returns
        -------
        str
            The lines joined with newlines.
        """
        self._require_nodes()
        if node_id is not None:
            return "\n".join(tail_file(self._node(node_id).log_path, n))
        if self._n == 1:
            return "\n".join(tail_file(self._nodes[0].log_path, n))
        return "\n".join(
            f"--- node {node.node_id} ---\n" + "\n".join(tail_file(node.log_path, n))
            for node in self._nodes
        )

    def _require_nodes(self) -> None:
        if not self._nodes:
            raise BrokerError("EmbeddedKafka has not been started")

    def _node(self, node_id: int) -> KafkaNode:
        self._require_nodes()
        if not 0 <= node_id < self._n:
            raise ValueError(f"no node {node_id}; node ids are 0..{self._n - 1}")
        return self._nodes[node_id]

    # ------------------------------------------------------------------ topics
    def _admin(self) -> Any:
        if self._admin_client is None:
            self._admin_client = _new_admin(self.bootstrap_servers)
        return self._admin_client

    def admin(self) -> Any:
        """Return a ``confluent_kafka.admin.AdminClient`` for this cluster (shared, cached).

        Raises
        ------
        BrokerError
            If the cluster is not running.
        """
        self._require_started()
        return self._admin()

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        """Create a topic and wait until every partition has a leader.

        Parameters
        ----------
        name : str
            Topic name.
        partitions : int
            Number of partitions.
        replication_factor : int, optional
            Replicas per partition; ``min(brokers, 3)`` if omitted.
        config : mapping of str to str, optional
            Topic configuration, e.g. ``{"cleanup.policy": "compact"}``.
        timeout : datetime.timedelta
            How long to wait for creation and leaders.

        Raises
        ------
        BrokerError
            If creation fails (e.g. the topic exists) or leaders do not appear in time.
        """
        from confluent_kafka.admin import NewTopic

        self._require_started()
        rf = replication_factor if replication_factor is not None else min(self._n, 3)
        admin = self.admin()
        deadline = time.monotonic() + timeout.total_seconds()
        new = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=rf,
            config={k: str(v) for k, v in (config or {}).items()},
        )
        future = admin.create_topics([new], operation_timeout=timeout.total_seconds())[name]
        try:
            future.result(timeout=timeout.total_seconds())
        except Exception as exc:  # noqa: BLE001 - KafkaException carries the broker's reason
            raise BrokerError(f"could not create topic {name!r}: {exc}") from exc
        self._wait_for(
            lambda: self._topic_ready(admin, name, partitions),
            deadline,
            f"topic {name!r} has no leader for all {partitions} partition(s)",
        )

    @staticmethod
    def _topic_ready(admin: Any, name: str, partitions: int) -> bool:
        md = admin.list_topics(topic=name, timeout=2.0)
        t = md.topics.get(name)
        if t is None or t.error is not None or len(t.partitions) != partitions:
            return False
        return all(p.leader >= 0 for p in t.partitions.values())

    def delete_topic(self, name: str, *, timeout: timedelta = timedelta(seconds=30)) -> None:
        """Delete a topic and wait until it is gone from the metadata.

        Raises
        ------
        BrokerError
            If deletion fails or does not complete within ``timeout``.
        """
        self._require_started()
        admin = self.admin()
        deadline = time.monotonic() + timeout.total_seconds()
        future = admin.delete_topics([name], operation_timeout=timeout.total_seconds())[name]
        try:
            future.result(timeout=timeout.total_seconds())
        except Exception as exc:  # noqa: BLE001
            raise BrokerError(f"could not delete topic {name!r}: {exc}") from exc
        self._wait_for(
            lambda: name not in admin.list_topics(timeout=2.0).topics,
            deadline,
            f"topic {name!r} still in metadata",
        )

    def topics(self) -> list[str]:
        """Return the names of the non-internal topics, sorted."""
        self._require_started()
        md = self.admin().list_topics(timeout=10.0)
        return sorted(t for t in md.topics if not t.startswith("__"))

    def leader_of(self, topic: str, partition: int) -> int:
        """Return the node id leading ``topic``-``partition`` (``-1`` while there is none).

        Raises
        ------
        BrokerError
            If the topic or partition does not exist.
        """
        self._require_started()
        md = self.admin().list_topics(topic=topic, timeout=10.0)
        t = md.topics.get(topic)
        if t is None or t.error is not None or partition not in t.partitions:
            raise BrokerError(f"no partition {topic}-{partition} in the cluster metadata")
        return int(t.partitions[partition].leader)

    def _wait_for(self, condition: Any, deadline: float, what: str) -> None:
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except Exception as exc:  # noqa: BLE001
                last = exc
            _pause(_POLL_S)
        raise BrokerError(f"timed out: {what}" + (f" (last error: {last})" if last else ""))

    # ------------------------------------------------------------------ faults
    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one node's JVM (a crash: no controlled shutdown)."""
        with self._lock:
            self._require_started()
            self._node(node_id).kill()

    def stop_broker(self, node_id: int, grace: float = 10.0) -> None:
        """Shut one node down cleanly (SIGTERM, SIGKILL after ``grace`` seconds)."""
        with self._lock:
            self._require_started()
            self._node(node_id).terminate(grace=grace)

    def restart_broker(self, node_id: int, *, timeout: timedelta = timedelta(seconds=60)) -> None:
        """Start a killed or stopped node again (same ports and data) and wait until it is back.

        Raises
        ------
        BrokerError
            If the node exits or does not re-register within ``timeout``.
        """
        with self._lock:
            self._require_started()
            node = self._node(node_id)
            if node.alive():
                node.terminate()
            node.launch(self._classpath)
            self._wait_ready(time.monotonic() + timeout.total_seconds())

    def is_alive(self, node_id: int) -> bool:
        """Return whether node ``node_id``'s JVM is running."""
        return self._node(node_id).alive()


def _pause(seconds: float) -> None:
    """Wait between polls (library-side polling with a deadline)."""
    if seconds > 0:
        threading.Event().wait(seconds)
