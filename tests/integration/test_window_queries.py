"""Interactive queries of window and session stores while the application runs: real broker,
real Spark, in Python and over HTTP. Expected windows and sessions are computed here from
the input.
"""

from __future__ import annotations

import collections
import socket
from datetime import timedelta

import httpx

from _support import end_position, ensure_topics, produce_records
from streamtable import (
    KafkaStreams,
    Materialized,
    PositionBound,
    QueryableStoreTypes,
    Serdes,
    SessionWindows,
    StoreQueryParameters,
    StreamsBuilder,
    TimeWindows,
    Windowed,
)

S, L = Serdes.string(), Serdes.long()
#: 2023-11-14T22:13:20Z, a multiple of 10 s: times below are relative to it
T0 = 1_700_000_000_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_window_and_session_stores_answer_queries(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("clicks"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    # users u0..u2, out of order within a minute of grace; u0 has two sessions (gap 1 s)
    clicks = [("u0", 0), ("u0", 400), ("u1", 1_000), ("u0", 5_000), ("u2", 12_000), ("u1", 1_500)]
    clicks += [("u0", 5_300), ("u1", 2_400)]
    produce_records(bs, src, [(u.encode(), b"1", T0 + ts) for u, ts in clicks])

    b = StreamsBuilder()
    grouped = b.stream(src, key_serde=S, value_serde=S).group_by_key()
    per_10s = grouped.windowed_by(
        TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(minutes=1))
    )
    per_10s.count(Materialized.as_("clicks-per-10s")).to_stream().map(lambda w, n: (w.key, n)).to(
        out, key_serde=S, value_serde=L
    )
    sessions = grouped.windowed_by(
        SessionWindows.of_inactivity_gap_and_grace(timedelta(seconds=1), timedelta(minutes=1))
    )
    sessions.count(name="sessions")  # nothing downstream: queryable anyway
    address = f"127.0.0.1:{free_port()}"
    app = KafkaStreams(b.build(), app_config(**{"application.server": address}))
    app.start()
    try:
        windows = app.store(
            StoreQueryParameters.from_name_and_type(
                "clicks-per-10s", QueryableStoreTypes.window_store()
            )
        )
        sess = app.store(
            StoreQueryParameters.from_name_and_type("sessions", QueryableStoreTypes.session_store())
        )
        bound = PositionBound.at(end_position(bs, src, 2))
        windows.wait_for(bound, timeout=timedelta(minutes=3))
        sess.wait_for(bound, timeout=timedelta(minutes=1))

        want = collections.Counter((u, ts // 10_000 * 10_000) for u, ts in clicks)
        end = T0 + 100_000
        assert windows.fetch("u0", T0, end) == [(T0, want[("u0", 0)])]
        assert windows.fetch("u2", T0, end) == [(T0 + 10_000, 1)]
        assert windows.fetch_all(T0, T0) == [
            (Windowed(u, T0, T0 + 10_000), want[(u, 0)]) for u in ("u0", "u1")
        ]
        assert sorted((w.key, w.start, n) for w, n in windows.all()) == sorted(
            (u, T0 + start, n) for (u, start), n in want.items()
        )
        assert windows.backward_fetch("u1", T0, end) == [(T0, 3)]

        assert sess.fetch("u0") == [
            (Windowed("u0", T0, T0 + 400), 2),
            (Windowed("u0", T0 + 5_000, T0 + 5_300), 2),
        ]
        assert sess.fetch("u1") == [(Windowed("u1", T0 + 1_000, T0 + 2_400), 3)]
        assert sess.find_sessions("u0", T0 + 1_000, end) == [
            (Windowed("u0", T0 + 5_000, T0 + 5_300), 2)
        ]

        with httpx.Client(base_url=f"http://{address}", timeout=60) as http:
            r = http.get("/stores/clicks-per-10s/windows/u0", params={"from": T0, "to": end})
            assert r.status_code == 200, r.text
            assert r.json()["windows"] == [{"start": T0, "end": T0 + 10_000, "value": 4}]
            r = http.get("/stores/sessions/sessions/u1")
            assert r.json()["sessions"] == [{"start": T0 + 1_000, "end": T0 + 2_400, "value": 3}]
            r = http.get("/stores/clicks-per-10s/windows/u0", params={"from": 9, "to": 1})
            assert r.status_code == 400 and "Inverted time range" in r.json()["error"]
            # the listing and the metadata cover window and session stores too
            r = http.get("/stores")
            assert r.status_code == 200, r.text
            assert {
                (s["name"], s["kind"], s["approximate_num_entries"]) for s in r.json()["stores"]
            } == {("clicks-per-10s", "window", None), ("sessions", "session", None)}
            r = http.get("/metadata")
            assert r.status_code == 200, r.text
            # each store covers the source partitions its records came from
            read = sorted(windows.position())
            assert read and {t for t, _ in read} == {src}
            assert {
                s["name"]: [(p["topic"], p["partition"]) for p in s["source_partitions"]]
                for s in r.json()["stores"]
            } == {"clicks-per-10s": read, "sessions": read}
            r = http.get("/stores/sessions/keys/u1")
            assert r.status_code == 400
            assert (
                "session store; query it with GET /stores/sessions/sessions/{key}"
                in r.json()["error"]
            )
    finally:
        app.close()
