"""The trade-flagging job (``streamtable demo game``).

- The rule on hand-made histories through the TopologyTestDriver: each case says which trade
  must be flagged and why, at the rule's edges (5 earlier trades, strictly more than 3 times
  the median, the last 20 logins).
- The full path on the real broker: the demo's alerts are exactly the trades an independent
  implementation of the rule flags over the generated events, its precision and recall are
  the ones those flags give against the injected cheaters, and a profile read over HTTP is
  the player's history.
"""

from __future__ import annotations

import json
import statistics

import pytest

from streamtable import Serdes
from streamtable.demo import game
from streamtable.demo.game_data import accounts, generate
from streamtable.errors import StreamsError
from streamtable.testing import TopologyTestDriver

S, J = Serdes.string(), Serdes.json()


def login(ip):
    return {"type": "login", "ip": ip}


def trade(trade_id, amount, ip):
    return {"type": "trade", "ip": ip, "amount": amount, "trade_id": trade_id}


@pytest.fixture(scope="module")
def driver(spark):
    with TopologyTestDriver(game.build_topology()) as d:
        yield d


def pipe(driver, player, events):
    inp = driver.create_input_topic(game.EVENTS_TOPIC, S, J)
    out = driver.create_output_topic(game.ALERTS_TOPIC, S, J)
    for i, e in enumerate(events):
        inp.pipe_input(player, e, 1_000 + i)
    return {a["trade_id"]: a["reason"] for a in out.read_values_to_list()}


def test_a_big_trade_from_an_ip_not_logged_in_from_is_flagged(driver):
    history = [login("A"), *(trade(i, a, "A") for i, a in enumerate([10, 20, 30, 40, 50], 1))]
    flagged = pipe(
        driver,
        "alice",
        [
            *history,
            trade(6, 90, "B"),  # 3 x median 30 exactly: not more than
            trade(7, 500, "A"),  # big, but from a login IP
            trade(8, 100, "B"),  # median of [10, 20, 30, 40, 50, 90, 500] = 40: 100 <= 120
            trade(9, 200, "B"),  # median of the last 8 = (40 + 50) / 2 = 45: 200 > 135
        ],
    )
    assert flagged == {
        9: "amount 200 > 3 x median 45 of the last 8 trades, from IP B not among the last 1 logins"
    }
    profile = driver.get_key_value_store(game.PROFILE_STORE).get("alice")
    assert profile == {
        "ips": ["A"],
        "amounts": [10, 20, 30, 40, 50, 90, 500, 100, 200],
        "logins": 1,
        "trades": 9,
        "flags": 1,
    }


def test_fewer_than_five_earlier_trades_never_flag(driver):
    events = [login("A"), *(trade(i, 10, "A") for i in range(1, 5)), trade(5, 10_000, "Z")]
    assert pipe(driver, "bob", events) == {}
    assert pipe(driver, "bob", [trade(6, 10_000, "Z")]) != {}  # now 5 earlier trades


def test_only_the_last_20_logins_and_20_trades_count(driver):
    events = [login("OLD"), *(login(f"ip{i}") for i in range(20))]  # OLD drops out
    events += [trade(i, 1_000, "ip0") for i in range(1, 21)]
    events += [trade(i, 1, "ip0") for i in range(21, 41)]  # the 1_000s drop out: median 1
    events += [trade(41, 3.5, "OLD")]
    flagged = pipe(driver, "carol", events)
    assert flagged == {
        41: "amount 3.5 > 3 x median 1 of the last 20 trades, from IP OLD not among the last "
        "20 logins"
    }
    profile = driver.get_key_value_store(game.PROFILE_STORE).get("carol")
    assert profile["ips"] == [f"ip{i}" for i in range(20)]
    assert profile["amounts"] == [1] * 19 + [3.5]
    assert (profile["logins"], profile["trades"], profile["flags"]) == (21, 41, 1)


def test_an_unknown_event_type_stops_the_job_naming_the_processor_and_record(spark):
    with TopologyTestDriver(game.build_topology()) as d:
        inp = d.create_input_topic(game.EVENTS_TOPIC, S, J)
        with pytest.raises(
            StreamsError,
            match=r"Processor 'flag-trades' raised ValueError: game event of player 'dave' has "
            r"type 'refund'; expected 'login' or 'trade' on the record of game-events-0@0",
        ):
            inp.pipe_input("dave", {"type": "refund"}, 1)


# -- the full path ---------------------------------------------------------------------------


def expected_flags(data, banned=(), backlog=None):
    """The rule, implemented again from its statement, over the generated events; the
    ``banned`` players' trades from event ``backlog`` on (the live phase) are flagged too.
    """
    logins, trades, flags, profiles = {}, {}, set(), {}
    for i, (key, raw) in enumerate(zip(data.keys, data.values, strict=True)):
        e = json.loads(raw)
        ips, amounts = logins.setdefault(key, []), trades.setdefault(key, [])
        p = profiles.setdefault(key, {"logins": 0, "trades": 0, "flags": 0})
        if e["type"] == "login":
            ips.append(e["ip"])
            p["logins"] += 1
            continue
        last_ips, last_amounts = ips[-20:], amounts[-20:]
        if key in banned and i >= backlog:
            flags.add(e["trade_id"])
            p["flags"] += 1
        elif (
            len(last_amounts) >= 5
            and e["amount"] > 3 * statistics.median(last_amounts)
            and e["ip"] not in last_ips
        ):
            flags.add(e["trade_id"])
            p["flags"] += 1
        amounts.append(e["amount"])
        p["trades"] += 1
    for key, p in profiles.items():
        p["ips"], p["amounts"] = logins[key][-20:], trades[key][-20:]
    return flags, profiles


def test_the_demo_flags_exactly_what_the_rule_implies(kafka_broker, spark, tmp_path):
    players, events, seed = 400, 12_000, 11
    result = game.run(
        kafka_broker.bootstrap_servers,
        players=players,
        events=events,
        live_events=1_500,
        rate=1_000,
        seed=seed,
        state_dir=str(tmp_path),
        echo=lambda *_: None,
    )
    data = generate(players, events, seed=seed)
    banned = set(game.players_to_ban(data, events - 1_500))
    assert banned and result["banned"] == sorted(banned)
    want, profiles = expected_flags(data, banned, events - 1_500)
    assert want and data.fraud  # the load has both
    # the accounts came from PostgreSQL through Debezium; the bans reached the app's state
    for pid, status, country, is_banned, registered in accounts(players, seed=seed):
        row = {"id": pid, "status": status, "country": country, "banned": is_banned}
        if pid in banned:
            row.update(status="banned", banned=True)
        profiles.setdefault(pid, {})["account"] = {**row, "registered": registered}
    assert result["ban_to_state_p99_ms"] is not None
    # the data-loss audit: producers, the app's sources and sinks and the Parquet archive agree
    assert result["audit_windows"] > 0
    assert (result["audit_differences"], result["audit_missing"]) == (0, 0)
    assert result["flagged"] == want
    ban_trades = {
        json.loads(v)["trade_id"]
        for k, v in zip(data.keys[events - 1_500 :], data.values[events - 1_500 :], strict=True)
        if k in banned and b'"trade"' in v
    }
    by_rule = want - ban_trades  # precision and recall are the rule's
    assert result["ban_alerts"] == len(ban_trades)
    hits = len(by_rule & data.fraud)
    assert result["precision"] == round(hits / len(by_rule), 4)
    assert result["recall"] == round(hits / len(data.fraud), 4)
    assert result["alerts"] == len(want)  # exactly once: no duplicate alerts
    assert result["profile"] == profiles[result["profile_player"]]
    # the live phase's alerts were all seen by the latency reader
    live_trades = {json.loads(v).get("trade_id") for v in data.values[-1_500:]}
    assert result["live_alerts"] == len(want & live_trades)
    # the Parquet archive holds every event and every alert once, as the topics do
    from streamtable.files import read_files

    archived = read_files(f"{result['archive']}/game-events").to_pylist()
    fields = ("type", "ip", "amount", "trade_id")
    assert sorted((r["key"], *(r[f] for f in fields)) for r in archived) == sorted(
        (k, *(json.loads(v).get(f) for f in fields))
        for k, v in zip(data.keys, data.values, strict=True)
    )
    alerts = read_files(f"{result['archive']}/alerts").to_pylist()
    assert sorted(r["trade_id"] for r in alerts) == sorted(want)
    assert {r["date"] for r in archived} >= {r["date"] for r in alerts}  # partitioned by date
