"""Deterministic names for processors and state stores, as Kafka Streams generates them.

Generated names are ``KSTREAM-<OP>-<10-digit index>`` (``KTABLE-`` for table operations), with one
counter for processors and stores, so they depend only on the order of DSL calls. A name given by
the user (``name=``) replaces the generated one; stateful operators should be named so that adding
an operator upstream does not rename their state (Kafka Streams' naming guide).

The counter advances exactly as in Kafka Streams' ``InternalStreamsBuilder``, so generated names
equal Kafka Streams' for the same sequence of DSL calls: a processor name advances it even when the
user names the processor (``NamedInternal.orElseGenerateWithPrefix`` "burns" the index to keep
topologies compatible), a store name only when it is generated (``newStoreName``).
"""

from __future__ import annotations

import re

from streamtable.errors import TopologyError

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


#: What Kafka Streams says when a processor or a store name is used twice.
_KAFKA_DUPLICATE = {
    "processor": "Processor ... is already added",
    "store": "A different StateStore has already been added with the name ...",
}


def _kafka_on_duplicate(first: str, second: str) -> str:
    """What Kafka Streams does when a ``first``-kind name is used again for a ``second``."""
    if first == second and first in _KAFKA_DUPLICATE:
        return f"Kafka Streams refuses it too: '{_KAFKA_DUPLICATE[first]}'"
    return f"Kafka Streams keeps {first} and {second} names apart, streamtable does not yet"


class NameGenerator:
    """Hands out Kafka Streams-style names and refuses duplicates."""

    def __init__(self) -> None:
        self._index = 0
        self._used: dict[str, str] = {}  # name -> kind

    def next_index(self) -> int:
        """The next value of the shared counter."""
        i = self._index
        self._index += 1
        return i

    def generated(self, prefix: str, label: str) -> str:
        """``<prefix>-<label>-<index>``, advancing the counter, not reserved (topic name bases).

        >>> NameGenerator().generated("KTABLE", "FK-JOIN-SUBSCRIPTION-REGISTRATION")
        'KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000000'
        """
        return f"{prefix}-{label}-{self.next_index():010d}"

    def processor(self, prefix: str, label: str, given: str | None = None) -> str:
        """A processor name: ``given`` when set, else ``<prefix>-<label>-<index>``.

        The counter advances in both cases (Kafka Streams' ``orElseGenerateWithPrefix``).

        >>> names = NameGenerator()
        >>> names.processor("KSTREAM", "FILTER"), names.processor("KSTREAM", "MAP", "upper")
        ('KSTREAM-FILTER-0000000000', 'upper')
        >>> names.processor("KSTREAM", "SINK")
        'KSTREAM-SINK-0000000002'
        """
        generated = self.generated(prefix, label)
        return self.claim(given if given is not None else generated)

    def suffixed(self, given: str | None, suffix: str, prefix: str, label: str) -> str:
        """``given + suffix`` when ``given`` is set, else ``<prefix>-<label>-<index>``; the
        counter advances in both cases (Kafka Streams' ``suffixWithOrElseGet``).

        >>> NameGenerator().suffixed("lr", "-join-this", "KTABLE", "JOINTHIS")
        'lr-join-this'
        """
        generated = self.generated(prefix, label)
        return self.claim(given + suffix if given is not None else generated)

    def store(self, prefix: str, label: str, given: str | None = None) -> str:
        """A state store name: ``given`` or ``<prefix>-<label>-STATE-STORE-<index>``."""
        if given is not None:
            return self.claim(given, kind="store")
        return self.claim(f"{prefix}-{label}-STATE-STORE-{self.next_index():010d}", kind="store")

    def table_store(self, topic: str, given: str | None) -> str:
        """A table's store (``StreamsBuilder.table``): ``given`` or ``<topic>-STATE-STORE-<n>``."""
        if given is not None:
            return self.claim(given, kind="store")
        return self.claim(f"{topic}-STATE-STORE-{self.next_index():010d}", kind="store")

    def claim(self, name: str, kind: str = "processor") -> str:
        """Reserve ``name``; raise :class:`TopologyError` if it is illegal or taken."""
        if not name or not _LEGAL.match(name):
            raise TopologyError(
                f"Illegal {kind} name {name!r}: names may contain only ASCII letters, digits, "
                "'.', '_' and '-' (they become parts of Kafka topic names; Kafka Streams' "
                "Named refuses other names too)."
            )
        if name in self._used:
            raise TopologyError(
                f"The {kind} name {name!r} is used twice in this topology; give each operator "
                f"a unique name ({_kafka_on_duplicate(self._used[name], kind)})."
            )
        self._used[name] = kind
        return name
