"""Data-loss audit: record counts per (topic, partition, one-minute window of event time).

Kafka's "operational metrics" use case: producers and consumers publish how many records they
wrote and read, and a service compares the counts and alerts on a difference.  Here every
reporter counts records per ``(topic, partition, window_start_ms)``, the window being the
minute of the record's timestamp (event time, not the time of counting: a late or replayed
record is counted in the window it belongs to, so counts of the same data agree whoever
counts them and whenever).

Counts are published as *audit records* to an audit topic:

- key: ``"<role>|<reporter>|<topic>|<partition>|<window_start>|<batch>"`` (UTF-8);
- value: JSON ``{"role", "reporter", "topic", "partition", "window_start", "count",
  "batch"}``.

``role`` is :data:`PRODUCED` (records a producer got acknowledged, or an application's sink
committed), :data:`CONSUMED` (records an application's source read) or :data:`SUNK` (rows a
file sink committed).  ``batch`` identifies one publication (a producer run, a Spark
micro-batch): a batch published again, as a replayed micro-batch is, has the same keys, and
readers keep the last value per key, so it is counted once.  A compacted audit topic keeps
exactly those last values (:func:`create_audit_topic`).

Comparison: :func:`streamtable.platform.audit_compare.audit_report` (``streamtable audit``) and
the streaming :func:`streamtable.platform.audit_topology.audit_topology`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from streamtable.errors import StreamtableError
from streamtable.runtime.librdkafka_config import librdkafka_settings

__all__ = [
    "CONSUMED",
    "PRODUCED",
    "ROLES",
    "SUNK",
    "WINDOW_MS",
    "AuditCounts",
    "AuditError",
    "AuditRecord",
    "check_field",
    "create_audit_topic",
    "publish_audit",
    "window_start",
]

#: The audit window: one minute of event time, in ms.
WINDOW_MS = 60_000
PRODUCED = "produced"
CONSUMED = "consumed"
SUNK = "sunk"
#: The roles an audit record can have.
ROLES: tuple[str, ...] = (PRODUCED, CONSUMED, SUNK)
Role = Literal["produced", "consumed", "sunk"]
_SEP = "|"


class AuditError(StreamtableError, ValueError):
    """An audit record or an audit setting is malformed; the message names the field."""


def window_start(timestamp_ms: int) -> int:
    """Start (epoch ms) of the one-minute event-time window holding ``timestamp_ms``.

    Windows are aligned to the epoch, like Kafka Streams' tumbling windows: ``[start,
    start + 60000)``.

    Examples
    --------
    >>> window_start(1_356_998_400_000)  # 2013-01-01T00:00:00Z
    1356998400000
    >>> window_start(1_356_998_459_999), window_start(1_356_998_460_000)
    (1356998400000, 1356998460000)
    """
    return int(timestamp_ms) - int(timestamp_ms) % WINDOW_MS


def check_field(name: str, value: str) -> str:
    """Return ``value``, a field of an audit record's key (reporter, topic, batch).

    Raises
    ------
    AuditError
        If ``value`` is not a non-empty str, or contains ``"|"`` (the key's separator).
    """
    if not isinstance(value, str) or not value or _SEP in value:
        raise AuditError(
            f"Audit {name} must be a non-empty str without {_SEP!r} (it is a field of the audit "
            f"record's key), got {value!r}"
        )
    return value


@dataclass(frozen=True)
class AuditRecord:
    """One count: ``count`` records of ``topic``/``partition`` in the window starting at
    ``window_start`` (epoch ms), reported by ``reporter`` in publication ``batch``.

    Raises
    ------
    AuditError
        From the constructor, for an unknown role, a reporter or batch that is empty or
        contains ``"|"``, a negative partition or count, or a window start that is not a
        multiple of :data:`WINDOW_MS`.

    Examples
    --------
    >>> r = AuditRecord("consumed", "wordcount", "lines", 0, 1356998400000, 42, "7")
    >>> r.key()
    b'consumed|wordcount|lines|0|1356998400000|7'
    >>> AuditRecord.from_kafka(r.key(), r.value()) == r
    True
    """

    role: str
    reporter: str
    topic: str
    partition: int
    window_start: int
    count: int
    batch: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise AuditError(f"Audit role must be one of {list(ROLES)}, got {self.role!r}")
        check_field("reporter", self.reporter)
        check_field("topic", self.topic)
        check_field("batch", self.batch)
        for name in ("partition", "window_start", "count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise AuditError(f"Audit {name} must be an int >= 0, got {value!r}")
        if self.window_start % WINDOW_MS:
            raise AuditError(
                f"Audit window_start must be a multiple of {WINDOW_MS} ms (a minute), got "
                f"{self.window_start}"
            )

    @property
    def window(self) -> tuple[str, int, int]:
        """``(topic, partition, window_start)``: what the count is about."""
        return (self.topic, self.partition, self.window_start)

    def key(self) -> bytes:
        """The record's Kafka key (UTF-8): one key per role, reporter, window and batch."""
        parts = (self.role, self.reporter, self.topic, self.partition, self.window_start)
        return _SEP.join(map(str, (*parts, self.batch))).encode()

    def value(self) -> bytes:
        """The record's Kafka value: compact JSON of every field."""
        return json.dumps(
            {
                "role": self.role,
                "reporter": self.reporter,
                "topic": self.topic,
                "partition": self.partition,
                "window_start": self.window_start,
                "count": self.count,
                "batch": self.batch,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> AuditRecord:
        """The record of a decoded JSON value.

        Raises
        ------
        AuditError
            If a field is missing or invalid (the message names it).
        """
        try:
            return cls(
                role=value["role"],
                reporter=value["reporter"],
                topic=value["topic"],
                partition=value["partition"],
                window_start=value["window_start"],
                count=value["count"],
                batch=str(value["batch"]),
            )
        except KeyError as e:
            raise AuditError(f"Audit record value misses field {e.args[0]!r}: {value!r}") from None
        except TypeError as e:
            raise AuditError(f"Audit record value is not a JSON object: {value!r} ({e})") from None

    @classmethod
    def from_kafka(cls, key: bytes | None, value: bytes | None) -> AuditRecord:
        """Decode a record of the audit topic; the key must match the value's fields.

        Raises
        ------
        AuditError
            If the value is not the JSON of an audit record, or the key is not the one its
            fields give.
        """
        if value is None:
            raise AuditError(f"Audit record with key {key!r} has no value (a tombstone)")
        try:
            decoded = json.loads(value)
        except ValueError as e:
            raise AuditError(f"Audit record value is not JSON: {value[:200]!r} ({e})") from None
        if not isinstance(decoded, dict):
            raise AuditError(f"Audit record value is not a JSON object: {value[:200]!r}")
        record = cls.from_value(decoded)
        if key != record.key():
            raise AuditError(
                f"Audit record key {key!r} does not match its value (expected {record.key()!r})"
            )
        return record


class AuditCounts:
    """Counts records per ``(topic, partition, window_start)`` (one-minute windows).

    Examples
    --------
    >>> c = AuditCounts()
    >>> c.add("lines", 0, 1_356_998_400_500)
    >>> c.add("lines", 0, 1_356_998_459_000, 2)
    >>> c.add("lines", 1, 1_356_998_460_000)
    >>> c.counts
    {('lines', 0, 1356998400000): 3, ('lines', 1, 1356998460000): 1}
    >>> [r.key() for r in c.records("produced", "gen", "run-1")]  # doctest: +NORMALIZE_WHITESPACE
    [b'produced|gen|lines|0|1356998400000|run-1', b'produced|gen|lines|1|1356998460000|run-1']
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int, int], int] = {}

    def add(self, topic: str, partition: int, timestamp_ms: int, n: int = 1) -> None:
        """Count ``n`` records of ``topic``/``partition`` with timestamp ``timestamp_ms``."""
        key = (topic, int(partition), window_start(timestamp_ms))
        self._counts[key] = self._counts.get(key, 0) + n

    @property
    def counts(self) -> dict[tuple[str, int, int], int]:
        """``{(topic, partition, window_start): count}`` in key order (a fresh dict)."""
        return dict(sorted(self._counts.items()))

    @property
    def total(self) -> int:
        """Records counted."""
        return sum(self._counts.values())

    def records(self, role: str, reporter: str, batch: str) -> list[AuditRecord]:
        """The audit records of these counts, one per window, in key order.

        Raises
        ------
        AuditError
            For an invalid role, reporter or batch.
        """
        return [
            AuditRecord(role, reporter, t, p, w, n, batch) for (t, p, w), n in self.counts.items()
        ]


def _producer(bootstrap_servers: str, config: Mapping[str, Any] | None, timeout_s: float) -> Any:
    from confluent_kafka import Producer

    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "acks": "all",
        "enable.idempotence": True,
        "log_level": 3,  # librdkafka's retried warnings are not for the console
        "linger.ms": 5,
        "message.timeout.ms": int(timeout_s * 1000),
    }
    settings.update(config or {})
    return Producer(settings)


def publish_audit(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[AuditRecord],
    *,
    producer_config: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> int:
    """Publish audit records to ``topic`` and wait until every one is acknowledged.

    The producer uses ``acks=all`` and idempotence, so a retry never duplicates a record (and
    a duplicate would not matter: readers keep the last value per key).

    Parameters
    ----------
    bootstrap_servers : str
        ``host:port[,host:port...]``.
    topic : str
        The audit topic; it must exist (:func:`create_audit_topic`).
    records : iterable of AuditRecord
    producer_config : Mapping, optional
        Extra confluent-kafka (librdkafka) settings, e.g. security settings.
    timeout_s : float
        How long to wait for the acknowledgements, in seconds.

    Returns
    -------
    int
        Records published.

    Raises
    ------
    StreamtableError
        If a record was not acknowledged in time (the message has the first error; an
        unknown topic means the audit topic was not created).
    """
    records = list(records)
    if not records:
        return 0
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = _producer(bootstrap_servers, producer_config, timeout_s)
    try:
        for r in records:
            while True:
                try:
                    producer.produce(topic, key=r.key(), value=r.value(), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
        deadline = time.monotonic() + timeout_s
        remaining = producer.flush(timeout_s)
        while remaining and time.monotonic() < deadline:
            remaining = producer.flush(max(0.1, deadline - time.monotonic()))
    finally:
        if hasattr(producer, "close"):  # confluent-kafka >= 2.11
            producer.close()
    if errors or remaining:
        hint = ""
        if any("UNKNOWN_TOPIC" in e or "Unknown topic" in e for e in errors):
            hint = " Create the audit topic first (streamtable.platform.create_audit_topic)."
        raise StreamtableError(
            f"Publishing {len(records)} audit record(s) to topic {topic!r} at "
            f"{bootstrap_servers} failed: {len(errors)} not delivered, {remaining} "
            f"unacknowledged after {timeout_s:g} s. First error: "
            f"{errors[0] if errors else 'timeout'}.{hint}"
        )
    return len(records)


def create_audit_topic(
    bootstrap_servers: str,
    topic: str = "audit",
    *,
    partitions: int = 1,
    replication_factor: int = -1,
    admin_config: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> bool:
    """Create the audit topic, compacted, unless it exists.

    Compaction keeps the last value of each key, which is all the comparison needs (a
    re-published batch replaces its first publication), and never deletes a count by age.

    Parameters
    ----------
    bootstrap_servers : str
    topic : str
        Default ``"audit"``.
    partitions : int
        Partitions of a new topic (one is plenty: one record per window and reporter).
    replication_factor : int
        ``-1``: the broker's default.
    admin_config : Mapping, optional
        Extra confluent-kafka admin settings.
    timeout_s : float
        Timeout of each admin call, in seconds.

    Returns
    -------
    bool
        True when the topic was created, False when it existed.

    Raises
    ------
    StreamtableError
        If the broker refused to create the topic (its reason is in the message).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap_servers,
            **librdkafka_settings(admin_config or {}, "admin").accepted,
        }
    )
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return False
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config={"cleanup.policy": "compact"},
    )
    try:
        admin.create_topics([new], operation_timeout=timeout_s)[topic].result(timeout_s)
    except KafkaException as e:
        if "TOPIC_ALREADY_EXISTS" in str(e):
            return False
        raise StreamtableError(
            f"Cannot create the audit topic {topic!r} at {bootstrap_servers}: {e}"
        ) from e
    deadline = time.monotonic() + timeout_s
    while topic not in admin.list_topics(timeout=timeout_s).topics:
        if time.monotonic() > deadline:
            raise StreamtableError(f"The audit topic {topic!r} was created but does not show up.")
        time.sleep(0.1)
    return True
