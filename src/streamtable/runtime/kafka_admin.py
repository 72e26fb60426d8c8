"""Talking to Kafka outside Spark: reachability, topic metadata, end offsets (confluent-kafka)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from streamtable.errors import BrokerUnreachableError, MissingSourceTopicError, StreamtableError


class KafkaAdmin:
    """A small facade over ``confluent_kafka.admin.AdminClient`` with streamtable's errors."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        timeout_ms: int = 30000,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_ms / 1000.0
        conf = {
            "bootstrap.servers": bootstrap_servers,
            "socket.connection.setup.timeout.ms": timeout_ms,
        }
        conf.update(config or {})
        self._admin = AdminClient(conf)

    def topic_partitions(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Partition counts of the existing topics (of ``topics``, or of all).

        Raises
        ------
        BrokerUnreachableError
            If no broker answers within the timeout.
        """
        try:
            md = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise BrokerUnreachableError(
                f"No Kafka broker answered at bootstrap.servers={self.bootstrap_servers!r} within "
                f"{self.timeout_s:g} s ({e}). Check that the broker runs and the address is "
                "right (for development: `streamtable broker start`)."
            ) from None
        wanted = None if topics is None else set(topics)
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if (wanted is None or name in wanted) and t.error is None
        }

    def require_topics(self, topics: Iterable[str], role: str) -> dict[str, int]:
        """Partition counts of ``topics``; raise when one is missing.

        Raises
        ------
        MissingSourceTopicError
            Naming every missing topic (Kafka Streams' ``MissingSourceTopicException``).
        """
        topics = list(dict.fromkeys(topics))
        found = self.topic_partitions(topics)
        missing = [t for t in topics if t not in found]
        if missing:
            raise MissingSourceTopicError(
                f"{role} topic(s) {missing} do not exist on {self.bootstrap_servers}. Kafka "
                "Streams does not create user topics: create them first (e.g. "
                "`kafka-topics.sh --create --topic NAME` or EmbeddedKafka.create_topic), then "
                "start the application again."
            )
        return found

    def end_offsets(self, topics: Iterable[str]) -> dict[tuple[str, int], int]:
        """The current end offset (high watermark) of every partition of ``topics``."""
        counts = self.topic_partitions(topics)
        request = {
            TopicPartition(t, p): OffsetSpec.latest() for t, n in counts.items() for p in range(n)
        }
        if not request:
            return {}
        futures = self._admin.list_offsets(request, request_timeout=self.timeout_s)
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result().offset
            except KafkaException as e:
                raise StreamtableError(
                    f"Could not read the end offset of {tp.topic}-{tp.partition}: {e}"
                ) from None
        return out
