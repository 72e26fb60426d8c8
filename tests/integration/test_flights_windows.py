"""The demo's windows job on February 2013, against an independent model of Kafka Streams' rules.

The model tracks stream time per partition of the flights topic (the running maximum of the
scheduled departures in production order, which is actual-departure order), drops a record
for a window when its partition's stream time has reached the window's end + grace, and
expects a final (suppressed) window once every partition that delivered its key has passed
its close.
"""

import json
from collections import Counter, defaultdict
from datetime import timedelta

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams
from streamtable.demo import flights_windows as fw
from streamtable.demo.flights import add_flight, iso, new_hour
from streamtable.demo.flights_data import flight_records, load_flights
from streamtable.serde.murmur2 import default_partition

PARTITIONS = 3
HOUR = 3_600_000


def ms(d):
    return int(d.total_seconds() * 1000)


def model(records):
    by_part = defaultdict(list)
    for key, value, ts in records:
        by_part[default_partition(key, PARTITIONS)].append((key, json.loads(value), ts))
    hourly, late, hop, hop_late = {}, [], Counter(), 0
    legs = defaultdict(list)
    final_st, max_lateness = {}, 0
    # the partitions that delivered each key of the hourly and the session aggregations
    origin_parts, tail_parts = defaultdict(set), defaultdict(set)
    hour_close = HOUR + ms(fw.HOURLY_GRACE)
    size, adv, hop_grace = ms(fw.HOP_SIZE), ms(fw.HOP_ADVANCE), ms(fw.HOP_GRACE)
    # each aggregation tracks the stream time of the records that reach it (after filters)
    final_session_st = {}
    for part, recs in by_part.items():
        st = hop_st = sess_st = -1
        for _key, flight, ts in recs:
            st = max(st, ts)
            origin_parts[flight["origin"]].add(part)
            max_lateness = max(max_lateness, st - ts)
            start = ts - ts % HOUR
            if start + hour_close <= st:
                late.append((flight["origin"], ts, flight["flight"]))
            else:
                agg = hourly.setdefault((flight["origin"], start), new_hour())
                add_flight(flight["origin"], flight, agg)
            if flight.get("tailnum") is not None:
                sess_st = max(sess_st, ts)
                tail_parts[flight["tailnum"]].add(part)
                legs[flight["tailnum"]].append(ts)
            if flight.get("dep_time") is not None:
                hop_st = max(hop_st, ts)
                first = max(0, ts - size + adv)
                for s in range(first - first % adv, ts + 1, adv):
                    if s + size + hop_grace > hop_st:
                        hop[(flight["origin"], s)] += 1
                    else:
                        hop_late += 1
        final_st[part] = st
        final_session_st[part] = sess_st
    finals = {
        (origin, start): agg
        for (origin, start), agg in hourly.items()
        if start + hour_close <= min(final_st[p] for p in origin_parts[origin])
    }
    # sessions: no record can be late with one day of grace (lateness < gap + grace)
    gap, grace = ms(fw.SESSION_GAP), ms(fw.SESSION_GRACE)
    assert max_lateness < gap + grace
    sessions = []
    for tail, times in legs.items():
        times.sort()
        start = end = times[0]
        n = 1
        for t in times[1:]:
            if t - end <= gap:
                end, n = t, n + 1
            else:
                sessions.append((tail, start, end, n))
                start = end = t
                n = 1
        sessions.append((tail, start, end, n))
    closed = [
        s
        for s in sessions
        if s[2] + gap + grace <= min(final_session_st[p] for p in tail_parts[s[0]])
    ]
    return finals, sorted(late), closed, hop, hop_late


def test_windows_job_on_february(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    df = load_flights()
    records = flight_records(df[df["month"] == 2])
    src = topic_name("flights")
    outs = {n: topic_name(n) for n in ("final", "late", "sessions", "hop")}
    ensure_topics(bs, {src: PARTITIONS, **dict.fromkeys(outs.values(), 1)})
    produce_records(bs, src, records, partitions=PARTITIONS)
    topology = fw.build_windows_topology(
        src, outs["final"], outs["late"], outs["sessions"], outs["hop"]
    )
    app = KafkaStreams(topology, app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=5))
        dropped = app.metrics()["dropped-records"]
    finally:
        app.close()
    finals, late, sessions, hop, hop_late = model(records)
    assert late and finals and sessions  # February has late departures with two hours of grace

    final_rows = [json.loads(v) for _k, v, _ts in read_topic(bs, outs["final"])]
    got = Counter((r["origin"], r["window_start"]) for r in final_rows)
    assert set(got.values()) == {1}  # one record per window
    assert set(got) == {(o, iso(s)) for o, s in finals}
    by_iso = {(o, iso(s)): agg for (o, s), agg in finals.items()}
    for r in final_rows:
        want = by_iso[(r["origin"], r["window_start"])]
        assert (r["scheduled"], r["departed"], r["cancelled"], r["delayed_15"]) == (
            want["scheduled"],
            want["departed"],
            want["cancelled"],
            want["delayed_15"],
        )

    got_late = sorted(
        (k.decode(), ts, json.loads(v)["flight"]) for k, v, ts in read_topic(bs, outs["late"])
    )
    assert got_late == late

    got_sessions = sorted(
        (s["tailnum"], s["session_start"], s["session_end"], s["legs"])
        for s in (json.loads(v) for _k, v, _ts in read_topic(bs, outs["sessions"]))
    )
    assert got_sessions == sorted((t, iso(a), iso(b), n) for t, a, b, n in sessions)

    latest = {}
    for _k, v, _ts in read_topic(bs, outs["hop"]):
        r = json.loads(v)
        latest[(r["origin"], r["window_start"])] = r["departures"]
    assert latest == {(o, iso(s)): n for (o, s), n in hop.items()}
    # late drops of the hourly and the hopping windows (once per window, as Kafka Streams)
    assert dropped.get("late", 0) == len(late) + hop_late
