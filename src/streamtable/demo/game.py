"""The second main job: flagging suspicious trades in a multiplayer game (a Processor API app).

Game servers publish logins and trades to topic ``game-events``, keyed by player id (one topic,
so each player's login is processed before their trades). A processor keeps each player's
profile in the queryable store ``player-profiles``: the IPs of the last 20 logins, the amounts
of the last 20 trades, counts of logins, trades and flags. **The rule**: a trade is flagged
when the player has at least 5 earlier trades, its amount is more than 3 times the median of
the player's last 20 earlier trades, **and** its IP is not among the IPs of the player's last
20 logins. Every trade, flagged or not, then joins the history. Flags go to topic ``alerts``
with the reason, timestamped with the trade's time.

``streamtable demo game`` (:func:`run`) generates a seeded load (:mod:`.game_data`), runs the
app, reads the alerts, and prints precision and recall against the injected cheaters, the
throughput, and the flagging latency (event to alert, read_committed) of a live phase in which
events are sent at a steady rate with the wall-clock time; the profiles answer HTTP queries
while it runs (``application.server``).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
from datetime import timedelta
from typing import Any

from streamtable import KafkaStreams, Processor, Record, Serdes, Stores, StreamsBuilder, Topology
from streamtable.errors import StreamsError

EVENTS_TOPIC = "game-events"
AUDIT_TOPIC = "audit"
ALERTS_TOPIC = "alerts"
PROFILE_STORE = "player-profiles"
PARTITIONS = 4

#: Records per micro-batch over the backlog (``streamtable.max.offsets.per.trigger``).
MAX_RECORDS_PER_BATCH = 100_000

#: The Parquet columns of the archived events and alerts (JSON fields and their types).
EVENT_COLUMNS = {"type": "string", "ip": "string", "amount": "double", "trade_id": "long"}
ALERT_COLUMNS = {
    "player": "string",
    "trade_id": "long",
    "amount": "double",
    "ip": "string",
    "reason": "string",
}

#: How often the archive writes its files: larger files, and its micro-batches keep out of
#: the flagging's way (the flagging's latency is what the live phase measures).
ARCHIVE_INTERVAL = timedelta(seconds=10)

#: Accounts the security team bans in the database before the live phase.
BANS = 20

#: The rule's parameters (see the module doc).
HISTORY = 20
MIN_TRADES = 5
FACTOR = 3.0


def new_profile() -> dict[str, Any]:
    """A player's profile before any event."""
    return {"ips": [], "amounts": [], "logins": 0, "trades": 0, "flags": 0}


def flag_reason(profile: dict[str, Any], ip: str, amount: float) -> str | None:
    """Why a trade of ``amount`` from ``ip`` is suspicious for ``profile`` (the player's
    history before it), or ``None`` (see the module doc for the rule).

    >>> p = {"ips": ["1.1.1.1"], "amounts": [10, 20, 30, 40, 50]}
    >>> flag_reason(p, "9.9.9.9", 91)
    'amount 91 > 3 x median 30 of the last 5 trades, from IP 9.9.9.9 not among the last 1 logins'
    >>> flag_reason(p, "9.9.9.9", 90), flag_reason(p, "1.1.1.1", 500)
    (None, None)
    """
    amounts = profile["amounts"]
    if len(amounts) < MIN_TRADES:
        return None
    median = statistics.median(amounts)
    if amount <= FACTOR * median or ip in profile["ips"]:
        return None
    return (
        f"amount {amount:g} > {FACTOR:g} x median {median:g} of the last {len(amounts)} "
        f"trades, from IP {ip} not among the last {len(profile['ips'])} logins"
    )


class TradeFlagger(Processor):
    """Applies the rule to each trade, keeps the profiles, forwards alerts."""

    def init(self, context: Any) -> None:  # noqa: D102
        self.context = context
        self.profiles = context.get_state_store(PROFILE_STORE)

    def process(self, record: Record) -> None:
        """Update the player's profile; forward an alert for a flagged trade.

        Raises
        ------
        ValueError
            For an event that is neither a login nor a trade (the processing exception
            handler decides what happens).
        """
        event = record.value
        kind = event.get("type") if isinstance(event, dict) else None
        profile = self.profiles.get(record.key) or new_profile()
        account = profile.get("account")
        if kind == "account":  # a change of the player's account in the database (CDC)
            profile["account"] = event["account"]
        elif kind == "trade" and account is not None and account.get("banned"):
            amount = float(event["amount"])
            profile["flags"] += 1
            self.context.forward(
                Record(
                    record.key, self._alert(record.key, event, "account banned"), record.timestamp
                )
            )
            profile["amounts"] = (profile["amounts"] + [amount])[-HISTORY:]
            profile["trades"] += 1
        elif kind == "login":
            profile["ips"] = (profile["ips"] + [event["ip"]])[-HISTORY:]
            profile["logins"] += 1
        elif kind == "trade":
            amount = float(event["amount"])
            reason = flag_reason(profile, event["ip"], amount)
            if reason is not None:
                profile["flags"] += 1
                alert = self._alert(record.key, event, reason)
                self.context.forward(Record(record.key, alert, record.timestamp))
            profile["amounts"] = (profile["amounts"] + [amount])[-HISTORY:]
            profile["trades"] += 1
        else:
            raise ValueError(
                f"game event of player {record.key!r} has type {kind!r}; expected 'login' or "
                "'trade'"
            )
        self.profiles.put(record.key, profile)

    @staticmethod
    def _alert(player: str, trade: dict[str, Any], reason: str) -> dict[str, Any]:
        return {
            "player": player,
            "trade_id": trade["trade_id"],
            "amount": float(trade["amount"]),
            "ip": trade["ip"],
            "reason": reason,
        }


def build_topology(
    events_topic: str = EVENTS_TOPIC,
    alerts_topic: str = ALERTS_TOPIC,
    archive: str | None = None,
    accounts_topic: str | None = None,
) -> Topology:
    """``game-events`` → :class:`TradeFlagger` (store ``player-profiles``) → ``alerts``.

    With ``accounts_topic`` (Debezium's change events of the accounts table, see
    :mod:`.game_accounts`), account changes reach the processor too, re-keyed by player id:
    a banned account's trades are flagged.

    With ``archive`` (a directory), both topics are also kept in Parquet, partitioned by the
    events' UTC date: ``<archive>/game-events`` and ``<archive>/alerts`` (the archive reads
    ``alerts`` back from its topic, as Kafka's "separate process" loading topics into Hadoop
    does, so the flagging runs once).
    """
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store(PROFILE_STORE), Serdes.string(), Serdes.json()
        )
    )
    events = b.stream(events_topic, key_serde=Serdes.string(), value_serde=Serdes.json())
    flagger_input = events
    if accounts_topic is not None:
        from streamtable.demo.game_accounts import account_events

        flagger_input = events.merge(account_events(b, PARTITIONS, accounts_topic))
    flagger_input.process(TradeFlagger, PROFILE_STORE, name="flag-trades").to(
        alerts_topic, key_serde=Serdes.string(), value_serde=Serdes.json()
    )
    if archive is not None:
        events.to_files(
            f"{archive}/{events_topic}",
            value_serde=Serdes.json(EVENT_COLUMNS),
            partition_by="date",
            commit_interval=ARCHIVE_INTERVAL,
            name="archive-events",
        )
        b.stream(alerts_topic, key_serde=Serdes.string(), value_serde=Serdes.json()).to_files(
            f"{archive}/{alerts_topic}",
            value_serde=Serdes.json(ALERT_COLUMNS),
            partition_by="date",
            commit_interval=ARCHIVE_INTERVAL,
            name="archive-alerts",
        )
    return b.build()


def precision_recall(flagged: set[int], fraud: set[int]) -> tuple[float, float]:
    """Precision and recall of the flagged trade ids against the injected ones.

    >>> precision_recall({1, 2, 3, 4}, {2, 3, 4, 5, 6, 7})
    (0.75, 0.5)
    """
    hits = len(flagged & fraud)
    precision = hits / len(flagged) if flagged else 1.0
    recall = hits / len(fraud) if fraud else 1.0
    return precision, recall


class _AlertReader(threading.Thread):
    """Reads ``alerts`` (read_committed) while the app runs; notes each alert's arrival time."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        super().__init__(name="alert-reader", daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": f"game-demo-alerts-{time.time_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self.consumer.subscribe([topic])
        self.alerts: list[tuple[dict[str, Any], int, float]] = []  # (alert, event ts, seen ms)
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for m in self.consumer.consume(1000, timeout=0.2):
                    if m.error() is None and m.value() is not None:
                        seen = time.time() * 1000
                        self.alerts.append((json.loads(m.value()), m.timestamp()[1], seen))
        finally:
            self.consumer.close()


def _produce_live(
    bootstrap: str, records: list[tuple[bytes, bytes, int]], rate: float, echo: Any
) -> float:
    """Send ``records`` at ``rate`` per second, each stamped with the wall clock, counting the
    delivered ones for the data-loss audit; returns the ms time the phase started.
    """
    from confluent_kafka import Producer

    from streamtable.platform.audit import PRODUCED, AuditCounts, publish_audit

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            "log_level": 3,  # retried warnings are not for the console
        }
    )
    counts = AuditCounts()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            counts.add(msg.topic(), msg.partition(), msg.timestamp()[1])

    start = time.time()
    for i, (k, v, _ts) in enumerate(records):
        due = start + i / rate
        now = time.time()
        if due > now:
            time.sleep(due - now)
        producer.produce(
            EVENTS_TOPIC, v, k, timestamp=int(time.time() * 1000), on_delivery=delivered
        )
        producer.poll(0)
    producer.flush(60)
    publish_audit(bootstrap, AUDIT_TOPIC, counts.records(PRODUCED, "game-servers", f"live-{start}"))
    return start * 1000


def run(
    bootstrap_servers: str | None = None,
    *,
    players: int = 100_000,
    events: int = 5_000_000,
    live_events: int = 30_000,
    rate: float = 3_000.0,
    seed: int = 7,
    state_dir: str | None = None,
    archive: str | None = None,
    accounts: bool = True,
    port: int = 0,
    echo: Any = print,
) -> dict[str, Any]:
    """Generate the load, run the trade-flagging app, print and return its figures.

    The first ``events - live_events`` events are produced up front (the app's backlog:
    throughput); the last ``live_events`` are then sent at ``rate`` per second stamped with
    the wall clock (latency: event time to the alert's arrival at a read_committed consumer).
    Events and alerts are archived in Parquet under ``archive`` (default: ``<state.dir>/
    archive``; an earlier archive there is replaced, as the topics are).

    Returns
    -------
    dict
        ``players``, ``events``, ``fraud_trades``, ``alerts``, ``precision``, ``recall``,
        ``backlog_records_per_s``, ``latency_p50_ms``, ``latency_p99_ms`` (live phase),
        ``live_alerts``, ``flagged`` (trade ids), ``profile`` (one player's profile read over
        HTTP), ``archived_events``, ``archived_alerts`` (rows in the Parquet archive, read
        through its log), ``archive`` (its directory), ``wall_s``.
    """
    import shutil
    import socket
    import tempfile
    import urllib.request

    from streamtable.demo._harness import (
        BacklogProgress,
        demo_config,
        ensure_topics,
        kafka_cluster,
        read_topic,
    )
    from streamtable.demo.flights_data import produce_records
    from streamtable.demo.game_accounts import ACCOUNTS_TOPIC, accounts_database
    from streamtable.demo.game_data import accounts as account_rows
    from streamtable.demo.game_data import generate
    from streamtable.files import read_files
    from streamtable.platform.audit_compare import audit_report
    from streamtable.runtime.spark import get_spark

    t0 = time.monotonic()
    warm_up = threading.Thread(target=get_spark, args=({},), name="spark-start", daemon=True)
    warm_up.start()
    echo(f"generating {events:,} events of {players:,} players (seed {seed}) ...")
    data = generate(players, events, seed=seed)
    backlog = events - live_events
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    state_dir = state_dir or tempfile.mkdtemp(prefix="streamtable-demo-")
    archive = archive or f"{state_dir}/archive"
    shutil.rmtree(archive, ignore_errors=True)  # a new run over recreated topics
    with kafka_cluster(bootstrap_servers) as bootstrap, contextlib.ExitStack() as stack:
        topics = {EVENTS_TOPIC: PARTITIONS, ALERTS_TOPIC: PARTITIONS, AUDIT_TOPIC: 1}
        if accounts:
            topics[ACCOUNTS_TOPIC] = PARTITIONS
        ensure_topics(bootstrap, topics, recreate=True)
        produce_records(
            bootstrap,
            EVENTS_TOPIC,
            data.records(0, backlog),
            audit_topic=AUDIT_TOPIC,
            reporter="game-servers",
        )
        echo(f"produced {backlog:,} events to '{EVENTS_TOPIC}' (the backlog)")
        db = None
        if accounts:
            echo("starting PostgreSQL and Kafka Connect with Debezium for the accounts ...")
            rows = account_rows(players, seed=seed)
            db = stack.enter_context(accounts_database(bootstrap, rows, PARTITIONS))
            echo(f"captured {players:,} accounts from PostgreSQL into '{ACCOUNTS_TOPIC}'")
        reader = _AlertReader(bootstrap, ALERTS_TOPIC)
        reader.start()
        config = demo_config(
            "streamtable-demo-game",
            bootstrap,
            state_dir,
            **{
                "processing.guarantee": "exactly_once_v2",
                "application.server": f"127.0.0.1:{port}",
                # each micro-batch's transactions must commit within transaction.timeout.ms
                # (60 s): bound the batches over the backlog
                "streamtable.max.offsets.per.trigger": MAX_RECORDS_PER_BATCH,
                # sources and sinks publish their counts for the data-loss audit
                "streamtable.audit.topic": AUDIT_TOPIC,
            },
        )
        topology = build_topology(
            archive=archive, accounts_topic=ACCOUNTS_TOPIC if accounts else None
        )
        app = KafkaStreams(topology, config)
        started = time.monotonic()
        app.start()
        try:
            with BacklogProgress(bootstrap, config["application.id"], EVENTS_TOPIC, backlog, echo):
                app.await_caught_up(timeout=timedelta(hours=1))
            backlog_s = time.monotonic() - started
            echo(
                f"processed the backlog in {backlog_s:.1f} s; live phase: {live_events:,} "
                f"events at {rate:,.0f}/s"
            )
            banned: list[str] = []
            ban_ms: list[float] = []
            if db is not None:
                banned = players_to_ban(data, backlog)
                ban_ms = _ban_and_wait(db, banned, port)
                echo(
                    f"banned {len(banned)} taken-over accounts in PostgreSQL: the app's state "
                    f"had the bans after p50 {_percentile(ban_ms, 50)} ms, p99 "
                    f"{_percentile(ban_ms, 99)} ms"
                )
            live_start = _produce_live(bootstrap, data.records(backlog), rate, echo)
            app.await_caught_up(timeout=timedelta(minutes=30))
            want = data.keys[-1]
            url = f"http://127.0.0.1:{port}/stores/{PROFILE_STORE}/keys/{want}"
            with urllib.request.urlopen(url, timeout=30) as resp:
                profile = json.loads(resp.read())["value"]
            committed = read_topic(bootstrap, ALERTS_TOPIC)
            app.await_caught_up(timeout=timedelta(minutes=5))  # the archive of those alerts
            _wait_for_alerts(reader, len(committed))
            archived = {f"{archive}/{t}": t for t in (EVENTS_TOPIC, ALERTS_TOPIC)}
            audit = audit_report(bootstrap, AUDIT_TOPIC, files=archived)
        finally:
            app.close()
            reader.stop.set()
            reader.join(30)
    alerts = reader.alerts
    decoded = [json.loads(v) for _, v, _ in committed if v is not None]
    flagged = {a["trade_id"] for a in decoded}
    # the rule's own quality: trades of banned accounts are flagged whoever made them
    by_rule = {a["trade_id"] for a in decoded if a["reason"] != "account banned"}
    precision, recall = precision_recall(by_rule, data.fraud)
    live = sorted(seen - ts for _, ts, seen in alerts if ts >= live_start)
    figures = {
        "players": players,
        "events": events,
        "fraud_trades": len(data.fraud),
        "alerts": len(committed),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "backlog_records_per_s": round(backlog / backlog_s),
        "live_alerts": len(live),
        "latency_p50_ms": _percentile(live, 50),
        "latency_p99_ms": _percentile(live, 99),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    figures["banned"] = banned
    figures["ban_to_state_p50_ms"] = _percentile(sorted(ban_ms), 50)
    figures["ban_to_state_p99_ms"] = _percentile(sorted(ban_ms), 99)
    figures["ban_alerts"] = len(flagged) - len(by_rule)
    figures["archived_events"] = read_files(f"{archive}/{EVENTS_TOPIC}", columns=["key"]).num_rows
    figures["archived_alerts"] = read_files(f"{archive}/{ALERTS_TOPIC}", columns=["key"]).num_rows
    figures["archive"] = archive
    figures["audit_windows"] = len(audit.windows)
    figures["audit_differences"] = len(audit.differences)
    figures["audit_missing"] = audit.missing
    figures["audit"] = audit.summary() + ("\n" + audit.table() if not audit.ok else "")
    _print(alerts, profile, want, figures, echo)
    return {**figures, "flagged": flagged, "profile": profile, "profile_player": want}


def players_to_ban(data: Any, backlog: int, count: int = BANS) -> list[str]:
    """The taken-over accounts the security team bans before the live phase: the first
    ``count`` victims (by id) that trade in it.
    """
    live = {
        k
        for k, v in zip(data.keys[backlog:], data.values[backlog:], strict=True)
        if b'"trade"' in v
    }
    return sorted(data.victims & live)[:count]


def _ban_and_wait(db: Any, players: list[str], port: int, timeout_s: float = 120.0) -> list[float]:
    """Ban ``players`` in the database; wait until each one's profile (queried over HTTP)
    shows the ban. Returns each player's ms from the commit to the state's showing it.
    """
    import urllib.request

    banned_at = db.ban(players)
    waiting = set(players)
    seen: list[float] = []
    deadline = time.monotonic() + timeout_s
    while waiting:
        if time.monotonic() > deadline:
            raise StreamsError(
                f"The bans of {sorted(waiting)} did not reach the app's state within "
                f"{timeout_s:g} s: is the Debezium connector running (Kafka Connect's log)?"
            )
        for p in sorted(waiting):
            url = f"http://127.0.0.1:{port}/stores/{PROFILE_STORE}/keys/{p}"
            with urllib.request.urlopen(url, timeout=30) as resp:
                account = (json.loads(resp.read())["value"] or {}).get("account") or {}
            if account.get("banned"):
                waiting.discard(p)
                seen.append(time.time() * 1000 - banned_at)
        time.sleep(0.05)  # a poll interval: the condition is the profiles' state
    return seen


def _wait_for_alerts(reader: _AlertReader, count: int, timeout_s: float = 120.0) -> None:
    """Wait until the live reader has seen ``count`` alerts (all the topic holds)."""
    deadline = time.monotonic() + timeout_s
    while len(reader.alerts) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    i = min(len(values) - 1, max(0, round(q / 100 * len(values)) - 1))
    return round(values[i], 1)


def _print(
    alerts: list[tuple[dict[str, Any], int, float]],
    profile: dict[str, Any],
    player: str,
    figures: dict[str, Any],
    echo: Any,
) -> None:
    echo("\nFirst alerts:")
    for a, _, _ in alerts[:5]:
        echo(f"  {a['player']} trade {a['trade_id']}: {a['reason']}")
    echo(f"\nProfile of {player} (GET /stores/{PROFILE_STORE}/keys/{player}):")
    echo(
        f"  {profile['logins']} logins, {profile['trades']} trades, {profile['flags']} flags; "
        f"recent IPs {profile['ips'][-3:]}, recent amounts {profile['amounts'][-3:]}"
    )
    echo(
        f"\nprecision {figures['precision']:.3f}, recall {figures['recall']:.3f} "
        f"({figures['alerts']:,} alerts, {figures['fraud_trades']:,} injected fraudulent "
        f"trades); backlog {figures['backlog_records_per_s']:,} events/s; flagging latency "
        f"p50 {figures['latency_p50_ms']} ms, p99 {figures['latency_p99_ms']} ms "
        f"({figures['live_alerts']} live alerts)"
    )
    if figures["banned"]:
        echo(
            f"{figures['ban_alerts']} trades of the {len(figures['banned'])} accounts banned in "
            f"PostgreSQL flagged (precision and recall above are the rule's alone); bans reached "
            f"the app's state after p50 {figures['ban_to_state_p50_ms']} ms, p99 "
            f"{figures['ban_to_state_p99_ms']} ms"
        )
    echo(
        f"archived {figures['archived_events']:,} events and {figures['archived_alerts']:,} "
        f"alerts in Parquet under {figures['archive']} (by date; read them with "
        "streamtable.files.read_files)"
    )
    echo(figures.pop("audit"))
    echo("\n" + json.dumps(figures))
