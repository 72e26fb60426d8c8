"""Change data capture into a streamtable table: throughput and change-to-table latency.

A real PostgreSQL server holds ``players(id text primary key, level int)`` with ``--rows``
rows; Debezium's PostgreSQL connector (inside Kafka Connect) captures it into
``bench-db.public.players``; a streamtable application reads that topic as the queryable table
``players`` (``Serdes.debezium_key`` / ``Serdes.debezium_json``) and left-joins a stream of
trades (``bench-trades``, keyed by player id) with it into ``bench-decisions`` (each decision
carries the player's ``level``). Then:

1. **burst**: one ``UPDATE`` of every row (one transaction). Debezium's rate is the rows over
   the time until the topic holds all the change events; streamtable's is the rows over the
   time from the commit until the table reflects the whole topic (its IQv2 position). Both
   are printed, as row changes/s.
2. **latency**: ``--updates`` single-row updates, one at a time: from each commit until the
   change event is in the topic (Debezium's part), until ``store.get(id)`` returns the new
   value (change to table), and until the first join decision that uses it is in
   ``bench-decisions`` (change to decision: a trade of that player is sent every 100 ms from
   the commit on, so this adds a trade's own path through the join and up to 100 ms of send
   cadence). p50/p99 in ms.

Prints one JSON object.

    python bench/cdc.py --rows 100000 --updates 40
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import timedelta

from confluent_kafka import Consumer, Producer, TopicPartition

PREFIX = "bench-db"
TOPIC = f"{PREFIX}.public.players"
TRADES, DECISIONS = "bench-trades", "bench-decisions"


def pct(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else None


class Arrivals(threading.Thread):
    """Notes when each key's latest change event reaches the topic (ms, wall clock)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-bench"})
        self.c.assign([TopicPartition(TOPIC, 0, 0)])
        self.seen: dict[bytes, float] = {}
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.c.consume(10_000, timeout=0.05):
                if m.error() is None and m.value() is not None:
                    self.seen[m.key()] = time.time() * 1000
                    self.count += 1
        self.c.close()


class Decisions(threading.Thread):
    """Notes when the first decision for each (player, level) reaches its topic (ms)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-bench-decisions"})
        self.c.assign([TopicPartition(DECISIONS, 0, 0)])
        self.first: dict[tuple[str, int | None], float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.c.consume(10_000, timeout=0.05):
                if m.error() is None and m.value() is not None:
                    level = json.loads(m.value())["level"]
                    self.first.setdefault((m.key().decode(), level), time.time() * 1000)
        self.c.close()


def decide(trade: str, player: dict | None) -> dict:
    """A join decision: the trade with the player's current level (None: no such player)."""
    return {"trade": trade, "level": None if player is None else player["level"]}


def wait(condition, what: str, timeout_s: float = 600.0, poll_s: float = 0.005) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=40)
    args = parser.parse_args(argv)

    import tempfile

    from streamtable import (
        KafkaStreams,
        PositionBound,
        QueryableStoreTypes,
        Serdes,
        StoreQueryParameters,
        StreamsBuilder,
    )
    from streamtable.broker import EmbeddedKafka
    from streamtable.demo._harness import ensure_topics, topic_size
    from streamtable.platform import EmbeddedPostgres, KafkaConnect, debezium_postgres_config

    result: dict[str, object] = {"benchmark": "cdc", "rows": args.rows, "updates": args.updates}
    with EmbeddedKafka() as kafka, EmbeddedPostgres() as pg:
        bs = kafka.bootstrap_servers
        ensure_topics(bs, {TOPIC: 1, TRADES: 1, DECISIONS: 1})
        with pg.connect() as conn:
            conn.execute("CREATE TABLE players(id text PRIMARY KEY, level int)")
            with conn.cursor().copy("COPY players (id, level) FROM STDIN") as copy:
                for i in range(args.rows):
                    copy.write_row((f"p{i:07d}", 0))
        with KafkaConnect(bs) as connect:
            cfg = debezium_postgres_config(
                pg, topic_prefix=PREFIX, tables=["public.players"], drop_slot_on_stop=True
            )
            t0 = time.monotonic()
            connect.create_connector(PREFIX, cfg)
            connect.wait_for_connector(PREFIX, timeout=timedelta(minutes=2))
            wait(lambda: topic_size(bs, TOPIC) >= args.rows, "snapshot", poll_s=0.1)
            result["snapshot_rows_per_s"] = round(args.rows / (time.monotonic() - t0))

            b = StreamsBuilder()
            players = b.table(
                TOPIC,
                key_serde=Serdes.debezium_key("id"),
                value_serde=Serdes.debezium_json({"id": "string", "level": "integer"}),
                name="players",
            )
            b.stream(TRADES, key_serde=Serdes.string(), value_serde=Serdes.string()).left_join(
                players, decide
            ).to(DECISIONS, value_serde=Serdes.json())
            app = KafkaStreams(
                b.build(),
                {
                    "application.id": f"cdc-bench-{time.time_ns()}",
                    "bootstrap.servers": bs,
                    "state.dir": tempfile.mkdtemp(prefix="cdc-bench-"),
                    "streamtable.shuffle.partitions": 2,
                },
            )
            app.start()
            arrivals, decisions = Arrivals(bs), Decisions(bs)
            arrivals.start()
            decisions.start()
            producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
            try:
                app.await_caught_up(timedelta(minutes=10))
                store = app.store(
                    StoreQueryParameters.from_name_and_type(
                        "players", QueryableStoreTypes.key_value_store()
                    )
                )

                # 1. burst: every row changes in one transaction
                before = topic_size(bs, TOPIC)
                with pg.connect() as conn:
                    conn.execute("UPDATE players SET level = level + 1")
                committed = time.monotonic()
                wait(
                    lambda: topic_size(bs, TOPIC) >= before + args.rows,
                    "burst in topic",
                    poll_s=0.05,
                )
                in_topic = time.monotonic() - committed
                end = topic_size(bs, TOPIC)
                bound = PositionBound.at(store.position().with_component(TOPIC, 0, end - 1))
                store.wait_for(bound, timeout=timedelta(minutes=10))
                in_table = time.monotonic() - committed
                result["burst"] = {
                    "debezium_rows_per_s": round(args.rows / in_topic),
                    "end_to_end_rows_per_s": round(args.rows / in_table),
                    "debezium_s": round(in_topic, 2),
                    "end_to_end_s": round(in_table, 2),
                }
                print(f"burst: {result['burst']}", file=sys.stderr)

                # 2. latency: one row at a time
                to_topic, to_table, to_decision = [], [], []
                for i in range(args.updates):
                    pid = f"p{(i * 7919) % args.rows:07d}"
                    key = json.dumps({"id": pid}, separators=(",", ":")).encode()
                    level = 1_000 + i
                    seen_before = arrivals.seen.get(key)
                    with pg.connect() as conn:
                        conn.execute("UPDATE players SET level = %s WHERE id = %s", (level, pid))
                    t = time.time() * 1000
                    in_table = None
                    deadline = time.monotonic() + 120
                    while (pid, level) not in decisions.first:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"update {i}: no decision with level {level}")
                        producer.produce(TRADES, f"t{i}".encode(), pid.encode())
                        producer.flush(10)
                        sent = time.monotonic()
                        while time.monotonic() - sent < 0.1:  # the trades' send cadence
                            if in_table is None and (store.get(pid) or {}).get("level") == level:
                                in_table = time.time() * 1000 - t
                            if (pid, level) in decisions.first:
                                break
                            time.sleep(0.002)
                    to_decision.append(decisions.first[(pid, level)] - t)
                    if in_table is None:  # the decision came first: the table has it too
                        wait(
                            lambda: (store.get(pid) or {}).get("level") == level,  # noqa: B023
                            f"update {i} in the table",
                        )
                        in_table = time.time() * 1000 - t
                    to_table.append(in_table)
                    wait(lambda: arrivals.seen.get(key) != seen_before, "arrival", 30)  # noqa: B023
                    to_topic.append(arrivals.seen[key] - t)
                result["latency_ms"] = {
                    "commit_to_topic_p50": pct(to_topic, 0.5),
                    "commit_to_topic_p99": pct(to_topic, 0.99),
                    "commit_to_table_p50": pct(to_table, 0.5),
                    "commit_to_table_p99": pct(to_table, 0.99),
                    "commit_to_table_mean": round(statistics.mean(to_table), 1),
                    "commit_to_decision_p50": pct(to_decision, 0.5),
                    "commit_to_decision_p99": pct(to_decision, 0.99),
                }
            finally:
                arrivals.stop.set()
                decisions.stop.set()
                producer.flush(10)
                del producer  # before the broker stops: an idle producer would log reconnects
                app.close()
            connect.delete_connector(PREFIX)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
