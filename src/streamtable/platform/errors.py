"""Errors of the platform services (PostgreSQL, Kafka Connect, the Spark standalone cluster).

Missing tools (PostgreSQL binaries, Java, Maven) raise
:class:`~streamtable.errors.EnvironmentSetupError`, whose message says what to install.
"""

from __future__ import annotations

from streamtable.errors import StreamtableError

__all__ = ["ConnectError", "PostgresError", "SparkClusterError"]


class PostgresError(StreamtableError, RuntimeError):
    """The embedded PostgreSQL server failed to initialise, start or answer.

    The message says why (e.g. the port is taken) and carries the tail of the server log.
    """


class ConnectError(StreamtableError, RuntimeError):
    """Kafka Connect failed to start, or its REST API refused a request or reported a failure.

    The message carries the REST answer (a connector's or task's trace) or the tail of the
    worker log.
    """


class SparkClusterError(StreamtableError, RuntimeError):
    """The Spark standalone cluster (Master or a Worker) failed to start, or is not running.

    The message names the process that failed (the master or worker ``i``), its log file and
    the log's last lines.
    """
