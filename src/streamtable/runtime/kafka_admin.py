"""Talking to Kafka outside Spark: reachability, topic metadata, end offsets (confluent-kafka)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from streamtable.errors import BrokerUnreachableError, MissingSourceTopicError, StreamtableError
from streamtable.runtime.librdkafka_config import librdkafka_settings


class KafkaAdmin:
    """A small facade over ``confluent_kafka.admin.AdminClient`` with streamtable's errors."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        timeout_ms: int = 30000,
        config: Mapping[str, Any] | None = None,
        replication_factor: int = -1,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        #: of the internal topics it creates (``replication.factor``; -1: the broker's default)
        self.replication_factor = replication_factor
        self.timeout_s = timeout_ms / 1000.0
        conf = {
            "bootstrap.servers": bootstrap_servers,
            "socket.connection.setup.timeout.ms": timeout_ms,
            # librdkafka's own errors ("Connect to ... failed") are not for the console: every
            # call here raises streamtable's error naming the broker instead (admin.log_level
            # shows them again)
            "log_level": 2,
        }
        # Java-only keys (a security setup shared with consumer.*/producer.*) are left out
        conf.update(librdkafka_settings(config or {}, "admin").accepted)
        self._admin: AdminClient | None = AdminClient(conf)

    def close(self) -> None:
        """Destroy the client now: it stops connecting to the brokers.

        confluent-kafka destroys a client when its last reference goes, and a reference can
        outlive its use: an exception's traceback keeps the frames that held it.
        """
        self._admin = None

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._admin is None

    def _client(self) -> AdminClient:
        admin = self._admin  # once: close() may run in another thread
        if admin is None:
            raise StreamtableError(
                f"The admin client of {self.bootstrap_servers!r} is closed (KafkaAdmin.close())."
            )
        return admin

    def topic_partitions(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Partition counts of the existing topics (of ``topics``, or of all).

        A topic absent from the cluster's metadata does not exist. One of ``topics`` that the
        metadata lists with an error (``LEADER_NOT_AVAILABLE`` while it is created or its
        broker restarts, say) exists: its metadata is asked again until the error clears, for
        up to the timeout, so that a transient error never reads as a missing (or deleted)
        topic. Listing all topics, those with an error are left out.

        Raises
        ------
        BrokerUnreachableError
            If no broker answers within the timeout.
        StreamtableError
            If the metadata of one of ``topics`` still reports an error after the timeout.
        """
        wanted = None if topics is None else set(topics)
        deadline = time.monotonic() + self.timeout_s
        while True:
            md = self._list_topics()
            failing = {
                name: t.error
                for name, t in md.topics.items()
                if wanted is not None
                and name in wanted
                and t.error is not None
                and t.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART
            }
            if not failing:
                break
            if time.monotonic() >= deadline:
                raise StreamtableError(
                    f"The metadata of topic(s) {sorted(failing)} on {self.bootstrap_servers} "
                    f"still reports an error after {self.timeout_s:g} s "
                    f"({', '.join(f'{n}: {e.str()}' for n, e in sorted(failing.items()))}): the "
                    "topics exist, but their partitions cannot be read. Check the brokers "
                    "(a partition without a leader, an offline broker) and start again."
                )
            time.sleep(0.2)
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if (wanted is None or name in wanted) and t.error is None
        }

    def _list_topics(self) -> Any:
        try:
            return self._client().list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise BrokerUnreachableError(
                f"No Kafka broker answered at bootstrap.servers={self.bootstrap_servers!r} within "
                f"{self.timeout_s:g} s ({e}). Check that the broker runs and the address is "
                "right (for development: `streamtable broker start`)."
            ) from None

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

    def end_offsets(
        self,
        topics: Iterable[str] | Mapping[str, int],
        *,
        read_committed: bool = False,
        timeout_s: float | None = None,
    ) -> dict[tuple[str, int], int]:
        """The current end offset of every partition of ``topics``: the high watermark, or
        with ``read_committed`` the last stable offset (a ``read_committed`` consumer's end).

        ``topics`` may map each topic to its partition count, which saves a metadata request.
        ``timeout_s``: see :meth:`list_offsets`.

        Raises
        ------
        StreamtableError
            If the broker could not answer for a partition in time.
        """
        if isinstance(topics, Mapping):
            partitions: Mapping[str, int] = topics
        else:
            partitions = self.topic_partitions(topics)
        return self.list_offsets(
            partitions,
            OffsetSpec.latest(),
            "end",
            read_committed=read_committed,
            timeout_s=timeout_s,
        )

    def list_offsets(
        self,
        partitions: Mapping[str, int],
        spec: OffsetSpec,
        what: str = "requested",
        *,
        read_committed: bool = False,
        timeout_s: float | None = None,
    ) -> dict[tuple[str, int], int]:
        """The offset ``spec`` gives for every partition of ``{topic: partition count}``.

        Parameters
        ----------
        partitions : Mapping[str, int]
            Topics and their partition counts.
        spec : OffsetSpec
            ``OffsetSpec.earliest()``, ``.latest()`` or ``.for_timestamp(ms)`` (then -1 for a
            partition without a record at or after the timestamp).
        what : str
            How to name the offset in the error message.
        read_committed : bool
            ``OffsetSpec.latest()`` gives the last stable offset (a ``read_committed``
            consumer's end) instead of the high watermark.
        timeout_s : float, optional
            How long to wait for the broker (default: the client's ``request.timeout.ms``).

        Returns
        -------
        dict
            ``{(topic, partition): offset}``.

        Raises
        ------
        StreamtableError
            If the broker could not answer for a partition (naming it).
        """
        request = {TopicPartition(t, p): spec for t, n in partitions.items() for p in range(n)}
        if not request:
            return {}
        futures = self._client().list_offsets(
            request,
            request_timeout=self.timeout_s if timeout_s is None else timeout_s,
            isolation_level=(
                IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
            ),
        )
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result().offset
            except KafkaException as e:
                raise StreamtableError(
                    f"Could not read the {what} offset of {tp.topic}-{tp.partition}: {e}"
                ) from None
        return out

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Delete ``topics`` and wait until the broker no longer lists them.

        Raises
        ------
        StreamtableError
            If a deletion fails (naming the topic) or does not finish within the timeout.
        """
        topics = list(topics)
        if not topics:
            return
        futures = self._client().delete_topics(topics, operation_timeout=self.timeout_s)
        for topic, fut in futures.items():
            try:
                fut.result()
            except KafkaException as e:
                raise StreamtableError(f"Could not delete topic {topic!r}: {e}") from None
        deadline = time.monotonic() + self.timeout_s
        while set(topics) & set(self.topic_partitions(topics)):
            if time.monotonic() > deadline:
                raise StreamtableError(
                    f"Topics {topics} were still listed {self.timeout_s:g} s after their deletion."
                )
            time.sleep(0.1)

    def consumer_groups(self) -> list[str]:
        """The ids of every consumer group the cluster knows, sorted.

        Raises
        ------
        StreamtableError
            If the groups cannot be listed.
        """
        try:
            result = self._client().list_consumer_groups(request_timeout=self.timeout_s).result()
        except KafkaException as e:
            raise StreamtableError(f"Could not list the consumer groups: {e}") from None
        return sorted(g.group_id for g in result.valid or [])

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete the consumer groups ``group_ids`` (they must have no active members).

        Raises
        ------
        StreamtableError
            Naming the group that could not be deleted and the broker's reason.
        """
        group_ids = list(group_ids)
        if not group_ids:
            return
        futures = self._client().delete_consumer_groups(group_ids, request_timeout=self.timeout_s)
        for group, fut in futures.items():
            try:
                fut.result()
            except KafkaException as e:
                raise StreamtableError(
                    f"Could not delete consumer group {group!r}: {e}. Stop its consumers first."
                ) from None

    def alter_group_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Set the committed offsets of consumer group ``group_id``.

        Parameters
        ----------
        group_id : str
            The group; it must have no active members.
        offsets : Mapping[tuple[str, int], int]
            ``{(topic, partition): offset}``.

        Raises
        ------
        StreamtableError
            If the broker refuses (e.g. the group has active members), naming the group.
        """
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())]
        )
        futures = self._client().alter_consumer_group_offsets(
            [request], request_timeout=self.timeout_s
        )
        try:
            for fut in futures.values():
                result = fut.result()
                for tp in result.topic_partitions or []:
                    if tp.error is not None:
                        raise KafkaException(tp.error)
        except KafkaException as e:
            raise StreamtableError(
                f"Could not commit offsets to consumer group {group_id!r}: {e}. A group with "
                "active members cannot be changed: stop its consumers first."
            ) from None

    def ensure_internal_topics(
        self, topics: Mapping[str, int], config: Mapping[str, str]
    ) -> dict[str, int]:
        """Create the internal ``topics`` (``{name: partitions}``) that do not exist yet.

        Returns
        -------
        dict
            ``{name: partitions it has}`` of the topics that exist with another partition
            count (Kafka Streams refuses to start then; the caller says what to do).

        Raises
        ------
        StreamtableError
            If a topic cannot be created.
        """
        existing = self.topic_partitions(topics)
        wrong = {}
        for name, partitions in topics.items():
            have = existing.get(name)
            if have is None:
                self.ensure_internal_topic(name, partitions, config)
            elif have != partitions:
                wrong[name] = have
        return wrong

    def ensure_internal_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> None:
        """Create internal topic ``name`` (with ``replication_factor``, Kafka Streams'
        ``replication.factor``) unless it exists.

        Raises
        ------
        StreamtableError
            If the topic cannot be created (e.g. no ``CREATE`` permission); says what to do.
        """
        if name in self.topic_partitions([name]):
            return
        from confluent_kafka.admin import NewTopic

        futures = self._client().create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=self.replication_factor,
                    config=dict(config or {}),
                )
            ],
            request_timeout=self.timeout_s,
        )
        try:
            futures[name].result()
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" in str(e) or "already exists" in str(e):
                return
            raise StreamtableError(
                f"Could not create the internal topic {name!r}: {e}. Create it yourself "
                f"({partitions} partition{'' if partitions == 1 else 's'}) or grant the "
                "application CREATE on topics prefixed by its application.id"
                + (
                    ""
                    if self.replication_factor == -1
                    else f"; replication.factor={self.replication_factor} needs that many brokers"
                )
                + "."
            ) from None

    def delete_records(self, before: Mapping[tuple[str, int], int]) -> None:
        """Delete the records before the given offsets (Kafka's ``DeleteRecords``).

        Parameters
        ----------
        before : mapping
            ``{(topic, partition): offset}``: records below ``offset`` are deleted.

        Raises
        ------
        StreamtableError
            If the broker refuses (e.g. no ``DELETE`` permission on the topic).
        """
        if not before:
            return
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(t, p, o) for (t, p), o in before.items()]
        futures = self._client().delete_records(tps, request_timeout=self.timeout_s)
        try:
            for f in futures.values():
                f.result()
        except KafkaException as e:
            raise StreamtableError(
                f"Could not delete records of {sorted({t for t, _ in before})}: {e}. Grant the "
                "application DELETE on topics prefixed by its application.id."
            ) from None
