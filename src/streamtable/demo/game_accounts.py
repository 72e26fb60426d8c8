"""The game's player accounts: a PostgreSQL table captured by Debezium into a topic.

The accounts (status, country, ban flag, registration date) live in the ``players`` table of
the game's database. Debezium's PostgreSQL connector, inside Kafka Connect, writes every row
change to ``game-db.public.players``; the trade-flagging job reads that topic as account events,
re-keyed by player id into its own partitions (Debezium partitions by the key *object*, the game
servers by the player id), next to the game events. When the security team bans an account in
the database, the next trades of that player are flagged.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from streamtable import KStream, Serdes, StreamsBuilder

#: Debezium's ``topic.prefix``: the table's change events go to ``<prefix>.public.players``.
CDC_PREFIX = "game-db"
ACCOUNTS_TOPIC = f"{CDC_PREFIX}.public.players"
#: The columns of ``players`` as Debezium sends them (``registered``: days since 1970-01-01).
ACCOUNT_COLUMNS = {
    "id": "string",
    "status": "string",
    "country": "string",
    "banned": "boolean",
    "registered": "integer",
}


def account_events(
    builder: StreamsBuilder, partitions: int, topic: str = ACCOUNTS_TOPIC
) -> KStream:
    """The account changes as game events ``{"type": "account", "account": row | None}``
    (``None``: the account was deleted), keyed by player id in ``partitions`` partitions so
    that a player's account changes and game events reach the same task.
    """
    return (
        builder.stream(
            topic,
            key_serde=Serdes.debezium_key("id"),
            value_serde=Serdes.debezium_json(ACCOUNT_COLUMNS),
        )
        .map_values(_as_event, name="account-events")
        .repartition(
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
            num_partitions=partitions,
            name="accounts-by-player",
        )
    )


def _as_event(row: dict[str, Any] | None) -> dict[str, Any]:
    return {"type": "account", "account": row}


@dataclass
class AccountsDatabase:
    """The running database and its connector (from :func:`accounts_database`)."""

    postgres: Any
    connect: Any

    def ban(self, players: Sequence[str]) -> float:
        """Ban ``players`` in one transaction; the commit's wall-clock time (ms)."""
        with self.postgres.connect() as conn:
            conn.execute(
                "UPDATE players SET banned = true, status = 'banned' WHERE id = ANY(%s)",
                (list(players),),
            )
        return time.time() * 1000


@contextlib.contextmanager
def accounts_database(
    bootstrap_servers: str,
    rows: Sequence[tuple[str, str, str, bool, int]],
    partitions: int,
    timeout: timedelta = timedelta(minutes=2),
) -> Iterator[AccountsDatabase]:
    """A PostgreSQL server holding ``rows`` in table ``players``, captured into
    :data:`ACCOUNTS_TOPIC` by Debezium; yields once the snapshot is in the topic.

    Raises
    ------
    streamtable.platform.PostgresError, streamtable.platform.ConnectError
        If the server, the worker or the connector fails (the message has their logs).
    """
    from streamtable.demo._harness import topic_size
    from streamtable.platform import EmbeddedPostgres, KafkaConnect, debezium_postgres_config

    with EmbeddedPostgres() as pg, KafkaConnect(bootstrap_servers) as connect:
        with pg.connect() as conn:
            conn.execute(
                "CREATE TABLE players(id text PRIMARY KEY, status text, country text, "
                "banned boolean, registered date)"
            )
            with conn.cursor().copy(
                "COPY players (id, status, country, banned, registered) FROM STDIN"
            ) as copy:
                for pid, status, country, banned, days in rows:
                    copy.write_row((pid, status, country, banned, _date(days)))
        config = debezium_postgres_config(
            pg,
            topic_prefix=CDC_PREFIX,
            tables=["public.players"],
            partitions=partitions,
            drop_slot_on_stop=True,
        )
        connect.create_connector(CDC_PREFIX, config)
        connect.wait_for_connector(CDC_PREFIX, timeout=timeout)
        deadline = time.monotonic() + timeout.total_seconds()
        while topic_size(bootstrap_servers, ACCOUNTS_TOPIC) < len(rows):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Debezium's snapshot of {len(rows):,} accounts did not reach "
                    f"{ACCOUNTS_TOPIC!r} within {timeout}; see Kafka Connect's log."
                )
            time.sleep(0.2)  # a poll interval: the condition is the topic's size
        yield AccountsDatabase(pg, connect)


def _date(days: int) -> Any:
    import datetime as dt

    return dt.date(1970, 1, 1) + dt.timedelta(days=days)
