"""Which serving endpoint holds a store's keys (Kafka Streams' ``StreamsMetadata`` and
``KeyQueryMetadata``).

In Kafka Streams each instance holds the stores of its own tasks, so a client asks
``queryMetadataForKey`` which instance to send a key's query to. streamtable's serving process
keeps a replica of every partition of every queryable store (fed by the changelog topics,
see ``docs/interactive-queries.md``): the instance that answers is always the one asked, and
the metadata says so — its ``application.server`` is the active host of every key, and the
key's partition is the changelog partition murmur2 of its bytes picks, as Kafka Streams'
default partitioner does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HostInfo", "KeyQueryMetadata", "StreamsMetadata"]


@dataclass(frozen=True)
class HostInfo:
    """A serving endpoint, ``application.server`` split into host and port.

    >>> HostInfo.parse("127.0.0.1:8080")
    HostInfo(host='127.0.0.1', port=8080)
    >>> HostInfo.unavailable()
    HostInfo(host='unavailable', port=-1)
    """

    host: str
    port: int

    @classmethod
    def parse(cls, address: str | None) -> HostInfo:
        """``host:port`` (``None``: :meth:`unavailable`)."""
        if not address:
            return cls.unavailable()
        host, _, port = address.rpartition(":")
        return cls(host, int(port))

    @classmethod
    def unavailable(cls) -> HostInfo:
        """Kafka Streams' ``HostInfo.unavailable()``: no ``application.server`` configured."""
        return cls("unavailable", -1)


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where to query one key: the active host, standbys (none here) and the partition."""

    active_host: HostInfo
    standby_hosts: frozenset[HostInfo] = frozenset()
    partition: int = -1


@dataclass(frozen=True)
class StreamsMetadata:
    """One instance: its endpoint, the stores it serves and the source partitions they cover."""

    host_info: HostInfo
    state_store_names: frozenset[str]
    topic_partitions: frozenset[tuple[str, int]]
    standby_state_store_names: frozenset[str] = field(default_factory=frozenset)
    standby_topic_partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)

    def host(self) -> str:
        """The endpoint's host."""
        return self.host_info.host

    def port(self) -> int:
        """The endpoint's port."""
        return self.host_info.port
