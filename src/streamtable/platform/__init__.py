"""Platform services around the engine: PostgreSQL and Kafka Connect with Debezium.

:class:`EmbeddedPostgres` runs a real PostgreSQL server (Debian's packages) with logical WAL;
:class:`KafkaConnect` runs Apache Kafka Connect with Debezium's PostgreSQL connector, which
captures the server's row changes into Kafka topics; :func:`debezium_postgres_config` builds
that connector's configuration.  ``streamtable postgres`` and ``streamtable connect`` run both
in the background for development (:mod:`~streamtable.platform.postgres_daemon`,
:mod:`~streamtable.platform.connect_daemon`).
"""

from streamtable.platform.connect import KafkaConnect
from streamtable.platform.debezium import debezium_postgres_config
from streamtable.platform.errors import ConnectError, PostgresError
from streamtable.platform.postgres import EmbeddedPostgres

__all__ = [
    "ConnectError",
    "EmbeddedPostgres",
    "KafkaConnect",
    "PostgresError",
    "debezium_postgres_config",
]
