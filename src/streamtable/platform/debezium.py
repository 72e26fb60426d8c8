"""Configuration of Debezium's PostgreSQL connector for an :class:`EmbeddedPostgres`.

:func:`debezium_postgres_config` returns the connector properties that capture some tables of
a PostgreSQL database into Kafka topics named ``<topic_prefix>.<schema>.<table>``: logical
decoding through ``pgoutput`` (built into PostgreSQL 10+), a replication slot and a publication
of the captured tables created by the connector, and Kafka Connect's JSON converter without
schemas, so that

* the record key is the primary key as a JSON object, e.g. ``{"id": 7}``;
* the record value is Debezium's change-event envelope as plain JSON:
  ``{"before": {...} | null, "after": {...} | null, "source": {...}, "op": "r"|"c"|"u"|"d",
  "ts_ms": ...}`` (``r`` snapshot read, ``c`` insert, ``u`` update, ``d`` delete);
* a delete is followed by a tombstone (same key, null value) so compacted topics drop the key.

Column values follow Debezium's defaults: ``date`` as days since 1970-01-01, ``timestamp`` as
epoch milliseconds or microseconds (``time.precision.mode=adaptive``), ``numeric`` as a
base64 decimal unless ``decimal_handling="string"`` or ``"double"``.  ``before`` holds only the
primary key on updates and deletes unless the table has ``REPLICA IDENTITY FULL``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from streamtable.errors import ConfigError
from streamtable.platform.connect import JSON_CONVERTER, _prop_value

__all__ = ["CONNECTOR_CLASS", "PostgresEndpoint", "debezium_postgres_config", "slot_name_for"]

#: Debezium's PostgreSQL source connector.
CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"

_TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9._-]+$")
#: letters, digits and "_": a "$" (legal in PostgreSQL names) is a regex anchor in Debezium's
#: table.include.list, where such a name would match no table
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
_SLOT = re.compile(r"^[a-z0-9_]{1,63}$")


class PostgresEndpoint(Protocol):
    """What the config needs from a server: an :class:`EmbeddedPostgres` has all of it."""

    host: str
    user: str
    database: str

    @property
    def port(self) -> int:
        """TCP port of the server."""
        ...


def slot_name_for(topic_prefix: str) -> str:
    """Return a valid replication slot name derived from a topic prefix.

    Slot names allow lower-case letters, digits and ``_`` only, at most 63 characters.

    Parameters
    ----------
    topic_prefix : str
        Debezium's ``topic.prefix``.

    Returns
    -------
    str
        ``"debezium_"`` followed by the prefix, lower-cased, other characters as ``_``.

    Examples
    --------
    >>> slot_name_for("game-CDC.v1")
    'debezium_game_cdc_v1'
    """
    return ("debezium_" + re.sub(r"[^a-z0-9_]", "_", topic_prefix.lower()))[:63]


def debezium_postgres_config(
    postgres: PostgresEndpoint,
    *,
    topic_prefix: str,
    tables: Sequence[str],
    database: str | None = None,
    slot_name: str | None = None,
    publication_name: str | None = None,
    snapshot_mode: str = "initial",
    drop_slot_on_stop: bool = False,
    decimal_handling: Literal["precise", "string", "double"] = "precise",
    password: str | None = None,
    partitions: int = 1,
    extra: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """Return the configuration of a Debezium PostgreSQL connector capturing ``tables``.

    Parameters
    ----------
    postgres : PostgresEndpoint
        The server, e.g. an :class:`~streamtable.platform.EmbeddedPostgres` (its ``host``,
        ``port``, ``user`` and ``database`` are used).
    topic_prefix : str
        Debezium's ``topic.prefix``: table ``public.players`` goes to topic
        ``<topic_prefix>.public.players``.  Letters, digits, ``.``, ``_`` and ``-``.
    tables : sequence of str
        Tables to capture, as ``schema.table`` (``table.include.list``; each is a regular
        expression for Debezium, so these names match exactly only if they have no regex
        characters, which the pattern check here ensures).
    database : str, optional
        Database to capture; ``postgres.database`` if omitted.
    slot_name : str, optional
        Logical replication slot; :func:`slot_name_for` ``topic_prefix`` if omitted.  One slot
        per connector: two connectors on one slot fail.
    publication_name : str, optional
        Publication the connector creates for ``tables`` (``publication.autocreate.mode=
        filtered``); ``<slot_name>_pub`` if omitted.
    snapshot_mode : str
        Debezium's ``snapshot.mode``: ``"initial"`` (read existing rows as ``op="r"`` events,
        then stream changes), ``"no_data"``, ``"when_needed"``, ...
    drop_slot_on_stop : bool
        Drop the replication slot when the connector stops (tests; a restarted connector then
        loses the changes made while it was stopped).
    decimal_handling : {"precise", "string", "double"}
        ``decimal.handling.mode`` for ``numeric`` columns.
    password : str, optional
        ``database.password``; the embedded server trusts loopback and needs none.
    partitions : int
        Partitions of the topics Connect creates for the tables (``topic.creation.default.
        partitions``): a stream joined with such a table needs as many (co-partitioning).
    extra : Mapping[str, object], optional
        More connector properties; they override the ones built here.

    Returns
    -------
    dict of str to str
        The connector configuration, for :meth:`KafkaConnect.create_connector`.

    Raises
    ------
    ConfigError
        If ``topic_prefix`` is empty or has characters a topic name cannot have, ``tables``
        is empty or has a name not of the form ``schema.table``, or ``slot_name`` is not a
        valid slot name, or ``partitions`` is below 1.

    Examples
    --------
    >>> class Server:
    ...     host, port, user, database = "127.0.0.1", 5433, "postgres", "postgres"
    >>> cfg = debezium_postgres_config(Server(), topic_prefix="cdc", tables=["public.players"])
    >>> cfg["topic.prefix"], cfg["table.include.list"], cfg["slot.name"]
    ('cdc', 'public.players', 'debezium_cdc')
    """
    if not topic_prefix or not _TOPIC_PREFIX.match(topic_prefix):
        raise ConfigError(
            f"topic_prefix {topic_prefix!r} is not usable in a topic name; use letters, digits, "
            "'.', '_' and '-' (e.g. 'cdc')"
        )
    if isinstance(tables, str):
        tables = [tables]
    if not tables:
        raise ConfigError("tables is empty; name at least one table as 'schema.table'")
    bad = [t for t in tables if not _TABLE.match(t)]
    if bad:
        raise ConfigError(
            f"tables {bad} are not of the form 'schema.table' (e.g. 'public.players'); "
            "name each table with its schema, in letters, digits and '_' (Debezium reads "
            "each as a regular expression: a '$' or another regex character would match "
            "other tables or none)"
        )
    if not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"partitions must be an int >= 1, got {partitions!r}")
    slot = slot_name if slot_name is not None else slot_name_for(topic_prefix)
    if not _SLOT.match(slot):
        raise ConfigError(
            f"slot_name {slot!r} is not a valid replication slot name; use 1-63 lower-case "
            "letters, digits and '_'"
        )
    config: dict[str, object] = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": 1,
        "database.hostname": postgres.host,
        "database.port": postgres.port,
        "database.user": postgres.user,
        "database.dbname": database or postgres.database,
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(tables),
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "slot.drop.on.stop": drop_slot_on_stop,
        "publication.name": publication_name or f"{slot}_pub",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": snapshot_mode,
        "tombstones.on.delete": True,
        "decimal.handling.mode": decimal_handling,
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": False,
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": False,
        # the broker may not auto-create topics: Connect creates each table's topic itself
        "topic.creation.default.partitions": partitions,
        "topic.creation.default.replication.factor": -1,
    }
    if password is not None:
        config["database.password"] = password
    config.update(extra or {})
    return {k: _prop_value(v) for k, v in config.items()}
