"""Deterministic names for processors and state stores, as Kafka Streams generates them.

Generated names are ``KSTREAM-<OP>-<10-digit index>`` (``KTABLE-`` for table operations), with one
counter for processors and stores, so they depend only on the order of DSL calls. A name given by
the user (``name=``) replaces the generated one; stateful operators should be named so that adding
an operator upstream does not rename their state (Kafka Streams' naming guide).
"""

from __future__ import annotations

import re

from streamtable.errors import TopologyError

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class NameGenerator:
    """Hands out Kafka Streams-style names and refuses duplicates."""

    def __init__(self) -> None:
        self._index = 0
        self._used: set[str] = set()

    def next_index(self) -> int:
        """The next value of the shared counter."""
        i = self._index
        self._index += 1
        return i

    def processor(self, prefix: str, label: str, given: str | None = None) -> str:
        """A processor name: ``given`` when set, else ``<prefix>-<label>-<index>``.

        >>> NameGenerator().processor("KSTREAM", "FILTER")
        'KSTREAM-FILTER-0000000000'
        """
        name = given if given is not None else f"{prefix}-{label}-{self.next_index():010d}"
        return self.claim(name)

    def store(self, prefix: str, label: str, given: str | None = None) -> str:
        """A state store name: ``given`` or ``<prefix>-<label>-STATE-STORE-<index>``."""
        if given is not None:
            return self.claim(given, kind="store")
        return self.claim(f"{prefix}-{label}-STATE-STORE-{self.next_index():010d}", kind="store")

    def claim(self, name: str, kind: str = "processor") -> str:
        """Reserve ``name``; raise :class:`TopologyError` if it is illegal or taken."""
        if not name or not _LEGAL.match(name):
            raise TopologyError(
                f"Illegal {kind} name {name!r}: names may contain only ASCII letters, digits, "
                "'.', '_' and '-' (they become parts of Kafka topic names)."
            )
        if name in self._used:
            raise TopologyError(
                f"The {kind} name {name!r} is used twice in this topology; give each operator "
                "a unique name."
            )
        self._used.add(name)
        return name
