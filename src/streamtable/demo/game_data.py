"""A seeded generator of a multiplayer game's logins and trades, with injected cheaters.

Game servers publish two kinds of events to one topic, keyed by player id (``p0000042``), so
each player's events stay in order on one partition:

- ``{"type": "login", "ip": "10.1.2.3"}``
- ``{"type": "trade", "ip": "10.1.2.3", "amount": 125.5, "trade_id": 7}``

The population (all draws from one ``numpy`` generator seeded by ``seed``):

- ``players`` players with Zipf-skewed activity (weight ``1 / rank``): a few play all
  day, most rarely;
- each player has 1-3 home IPs and a typical trade amount (log-normal around 100 gold); a
  player's first event is a login; then 15 % of events are logins (2 % of them from a new IP,
  which joins the home IPs: travel), the rest trades from the current session's IP (0.5 % from
  an IP never logged in: a mobile network), amounts log-normal around the player's typical
  amount;
- **cheaters**: ``victim_share`` of the players have their account taken over at a random
  point of the stream; afterwards each of their trades is, with probability
  ``fraud_share``, made by the attacker from an IP the player never logged in from, moving
  4-15 times the player's typical amount. Those trades are the ground truth
  (:attr:`GameData.fraud`).

Timestamps are synthetic (``start_ms`` + 20 ms per event): the flagging rule does not depend on
time, and the demo's live phase re-stamps the events it sends with the wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Share of events that are logins (after a player's first event, always a login).
LOGIN_SHARE = 0.15


@dataclass
class GameData:
    """Generated events in stream order and the ground truth.

    Attributes
    ----------
    keys : list of str
        Player id of each event.
    values : list of bytes
        Each event as JSON.
    timestamps : list of int
        Event time (ms).
    fraud : set of int
        ``trade_id`` of every injected fraudulent trade.
    victims : set of str
        Players whose account was taken over.
    """

    keys: list[str]
    values: list[bytes]
    timestamps: list[int]
    fraud: set[int]
    victims: set[str]

    def records(self, start: int = 0, stop: int | None = None) -> list[tuple[bytes, bytes, int]]:
        """Events ``start:stop`` as ``(key bytes, value bytes, ts)`` for a producer."""
        stop = len(self.keys) if stop is None else stop
        return [
            (self.keys[i].encode(), self.values[i], self.timestamps[i]) for i in range(start, stop)
        ]


def player_id(n: int) -> str:
    """The key of player ``n``.

    >>> player_id(42)
    'p0000042'
    """
    return f"p{n:07d}"


def generate(
    players: int,
    events: int,
    *,
    seed: int = 7,
    victim_share: float = 0.02,
    fraud_share: float = 0.3,
    start_ms: int = 1_767_225_600_000,
) -> GameData:
    """Generate ``events`` events of ``players`` players (see the module doc).

    Examples
    --------
    >>> data = generate(50, 400, seed=1)
    >>> len(data.keys), data.values[0][:17]
    (400, b'{"type":"login","')
    >>> generate(50, 400, seed=1).fraud == data.fraud
    True
    """
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(players) + 1
    weights = 1.0 / ranks.astype(float)
    who = rng.choice(players, size=events, p=weights / weights.sum())
    kind = rng.random(events)
    noise = rng.lognormal(0.0, 0.45, events)
    side = rng.random(events)
    typical = rng.lognormal(np.log(100.0), 0.8, players)
    homes_n = rng.integers(1, 4, players)
    victims_idx = rng.choice(players, size=max(1, int(players * victim_share)), replace=False)
    takeover_at = rng.integers(0, events, len(victims_idx)).tolist()
    takeover = dict(zip(victims_idx.tolist(), takeover_at, strict=True))

    keys: list[str] = []
    values: list[bytes] = []
    fraud: set[int] = set()
    homes: dict[int, list[str]] = {}
    session: dict[int, str] = {}
    next_ip = 0

    def fresh_ip() -> str:
        nonlocal next_ip
        next_ip += 1
        return f"10.{next_ip >> 16 & 255}.{next_ip >> 8 & 255}.{next_ip & 255}"

    trade_id = 0
    for i in range(events):
        p = int(who[i])
        key = player_id(p)
        ips = homes.get(p)
        if ips is None:
            ips = homes[p] = [fresh_ip() for _ in range(int(homes_n[p]))]
        if p not in session or kind[i] < LOGIN_SHARE:
            if side[i] < 0.02 and p in session:
                ips.append(fresh_ip())  # travel: a new home IP
                ip = ips[-1]
            else:
                ip = ips[int(side[i] * 1000) % len(ips)]
            session[p] = ip
            values.append(f'{{"type":"login","ip":"{ip}"}}'.encode())
        else:
            trade_id += 1
            amount = round(float(typical[p] * noise[i]), 2)
            ip = session[p]
            if p in takeover and i >= takeover[p] and side[i] < fraud_share:
                amount = round(float(typical[p] * (4 + 11 * side[i] / fraud_share)), 2)
                ip = fresh_ip()  # the attacker's
                fraud.add(trade_id)
            elif side[i] > 0.995:
                ip = fresh_ip()  # a mobile network, never logged in from
            values.append(
                f'{{"type":"trade","ip":"{ip}","amount":{amount},"trade_id":{trade_id}}}'.encode()
            )
        keys.append(key)
    timestamps = [start_ms + 20 * i for i in range(events)]
    victims = {player_id(p) for p in takeover}
    return GameData(keys, values, timestamps, fraud, victims)


#: Countries of the generated accounts.
COUNTRIES = ("DE", "FR", "BR", "US", "JP", "KR", "PL", "SE", "IN", "CA")


def accounts(players: int, *, seed: int = 7) -> list[tuple[str, str, str, bool, int]]:
    """The players' accounts, as rows of the ``players`` table of the game's database:
    ``(id, status, country, banned, registered)`` with ``registered`` in days since 1970-01-01
    (how Debezium sends a ``date`` column). Every account starts ``active`` and not banned.

    Examples
    --------
    >>> accounts(3, seed=1)[0][:4]
    ('p0000000', 'active', 'IN', False)
    """
    rng = np.random.default_rng(seed + 1)
    country = rng.integers(0, len(COUNTRIES), players)
    registered = 18_262 + rng.integers(0, 2_000, players)  # 2020-01-01 + up to ~5.5 years
    return [
        (player_id(n), "active", COUNTRIES[int(country[n])], False, int(registered[n]))
        for n in range(players)
    ]
