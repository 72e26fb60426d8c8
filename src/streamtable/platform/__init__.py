"""Platform services around the engine: PostgreSQL, Kafka Connect with Debezium, the audit.

:class:`EmbeddedPostgres` runs a real PostgreSQL server (Debian's packages) with logical WAL;
:class:`KafkaConnect` runs Apache Kafka Connect with Debezium's PostgreSQL connector, which
captures the server's row changes into Kafka topics; :func:`debezium_postgres_config` builds
that connector's configuration.  ``streamtable postgres`` and ``streamtable connect`` run both
in the background for development (:mod:`~streamtable.platform.postgres_daemon`,
:mod:`~streamtable.platform.connect_daemon`).  :class:`SparkStandaloneCluster` runs Spark's own
standalone Master and Workers from the installed PySpark (``streamtable cluster``,
:mod:`~streamtable.platform.spark_cluster_daemon`).  The data-loss audit counts records per
partition and minute of event time where they are produced, consumed and sunk
(:mod:`~streamtable.platform.audit`) and compares the counts (:func:`audit_report`,
``streamtable audit``, :func:`audit_topology`).
"""

from streamtable.platform.audit import AuditCounts, AuditRecord, create_audit_topic, publish_audit
from streamtable.platform.audit_compare import AuditReport, WindowAudit, audit_report
from streamtable.platform.audit_topology import audit_topology
from streamtable.platform.connect import KafkaConnect
from streamtable.platform.debezium import debezium_postgres_config
from streamtable.platform.errors import ConnectError, PostgresError, SparkClusterError
from streamtable.platform.postgres import EmbeddedPostgres
from streamtable.platform.spark_cluster import SparkStandaloneCluster

__all__ = [
    "AuditCounts",
    "AuditRecord",
    "AuditReport",
    "ConnectError",
    "EmbeddedPostgres",
    "KafkaConnect",
    "PostgresError",
    "SparkClusterError",
    "SparkStandaloneCluster",
    "WindowAudit",
    "audit_report",
    "audit_topology",
    "create_audit_topic",
    "debezium_postgres_config",
    "publish_audit",
]
