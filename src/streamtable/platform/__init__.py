"""Platform services around the engine: PostgreSQL and Kafka Connect with Debezium.

:class:`EmbeddedPostgres` runs a real PostgreSQL server (Debian's packages) with logical WAL;
:class:`KafkaConnect` runs Apache Kafka Connect with Debezium's PostgreSQL connector, which
captures the server's row changes into Kafka topics; :func:`debezium_postgres_config` builds
that connector's configuration.
"""

from streamtable.platform.errors import ConnectError, PostgresError
from streamtable.platform.postgres import EmbeddedPostgres

__all__ = ["ConnectError", "EmbeddedPostgres", "PostgresError"]
