"""``Materialized``: how an operator's state store is named and encoded (Kafka Streams'
``Materialized``).

Wherever Kafka Streams takes a ``Materialized`` — ``count``/``reduce``/``aggregate`` of grouped
and windowed streams and grouped tables, ``StreamsBuilder.table``/``global_table`` — streamtable
takes one in place of the ``name`` argument (a plain ``name="..."`` stays a shorthand for
``Materialized.as_("...")``). A named store is queryable (:mod:`streamtable.state`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from streamtable.errors import TopologyError

__all__ = ["Materialized", "check_count_store", "materialized_of"]


@dataclass(frozen=True)
class Materialized:
    """A state store's name, serdes, retention and logging.

    Examples
    --------
    >>> from streamtable import Serdes
    >>> m = Materialized.as_("totals").with_value_serde(Serdes.long())
    >>> m.store_name, m.value_serde
    ('totals', Serdes.long())
    >>> Materialized.as_("")
    Traceback (most recent call last):
        ...
    streamtable.errors.TopologyError: Materialized.as_ needs a non-empty store name; got ''.
    """

    store_name: str | None = None
    key_serde: Any = None
    value_serde: Any = None
    retention: timedelta | int | None = None
    logging: bool = True

    @staticmethod
    def as_(store_name: str) -> Materialized:
        """A store named ``store_name`` (queryable).

        Raises
        ------
        TopologyError
            If the name is empty or not a string.
        """
        if not isinstance(store_name, str) or not store_name:
            raise TopologyError(
                f"Materialized.as_ needs a non-empty store name; got {store_name!r}."
            )
        return Materialized(store_name)

    @staticmethod
    def with_(key_serde: Any = None, value_serde: Any = None) -> Materialized:
        """An unnamed store (not queryable) with these serdes (Kafka's ``Materialized.with``)."""
        return Materialized(None, key_serde, value_serde)

    def with_key_serde(self, key_serde: Any) -> Materialized:
        """The store's key serde."""
        return replace(self, key_serde=key_serde)

    def with_value_serde(self, value_serde: Any) -> Materialized:
        """The store's value serde: how its changelog (and interactive queries) encode values."""
        return replace(self, value_serde=value_serde)

    def with_retention(self, retention: timedelta | int) -> Materialized:
        """How long windows stay in a window or session store (``retention=``)."""
        return replace(self, retention=retention)

    def with_logging_disabled(self) -> Materialized:
        """No changelog: the state stays fault-tolerant (Spark's checkpoint) but the store is
        not queryable.
        """
        return replace(self, logging=False)

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> Materialized:
        """A changelog (the default); topic configs are not supported.

        Raises
        ------
        TopologyError
            If ``config`` is given.
        """
        if config:
            raise TopologyError(
                "Materialized.with_logging_enabled: changelog topic configs are not supported "
                "yet; call it without a config."
            )
        return replace(self, logging=True)

    def with_caching_enabled(self) -> Materialized:
        """Accepted; updates are compacted per micro-batch anyway."""
        return self

    def with_caching_disabled(self) -> Materialized:
        """Accepted; see :meth:`with_caching_enabled`."""
        return self


def materialized_of(name: str | Materialized | None, operation: str) -> Materialized:
    """``name`` as a :class:`Materialized` (a string is ``Materialized.as_(name)``).

    Raises
    ------
    TopologyError
        If ``name`` is neither.
    """
    if name is None:
        return Materialized()
    if isinstance(name, Materialized):
        return name
    if isinstance(name, str):
        return Materialized.as_(name)
    raise TopologyError(
        f"{operation} takes a store name or a Materialized; got {type(name).__name__} {name!r}."
    )


def check_count_store(m: Materialized, operation: str) -> None:
    """Refuse a ``count``'s ``Materialized`` value serde that cannot hold a count.

    Kafka Streams' ``count`` takes a ``Materialized<K, Long, ...>``: Java's types refuse any
    other value serde at compile time. streamtable checks the same before the app runs: a
    built-in serde must carry an ``int`` there and back (``Serdes.long()``; ``integer()``,
    ``double()`` and ``json()`` do too, though an Integer store fails at run time on a count
    above 2**31 - 1); a serde of the user's own class is trusted.

    Raises
    ------
    TopologyError
        If the value serde is not a :class:`~streamtable.serde.Serde`, or is a built-in one
        that cannot serialize an ``int``.
    """
    from streamtable.errors import SerializationError
    from streamtable.serde import Serde

    serde = m.value_serde
    if serde is None:
        return
    if not isinstance(serde, Serde):
        raise TopologyError(
            f"{operation}: the store's value serde must be a Serde (e.g. Serdes.long()); got "
            f"{type(serde).__name__} {serde!r}."
        )
    if serde.kind == "custom" or not type(serde).__module__.startswith("streamtable.serde"):
        return
    try:
        holds = serde.deserialize(serde.serialize(0)) == 0
    except (SerializationError, TypeError, ValueError):
        holds = False
    if not holds:
        raise TopologyError(
            f"{operation}: the store's value serde {serde!r} cannot hold a count (an int); "
            "Kafka Streams' count takes a Materialized with a Long value serde: use "
            "with_value_serde(Serdes.long()), or leave the value serde out (Long is the default)."
        )
