"""Windows over out-of-order data: lateness by partition time, suppression, late-records topic.

The expected results come from an independent model of Kafka Streams' rules written here: per
source partition, stream time is the running maximum of timestamps in offset order; a record
is late for a window when that stream time (itself included) has reached the window's
end + grace; a suppressed window is emitted once the stream time of its key's partition has
passed it (Kafka Streams closes a task's windows by the task's stream time).
"""

import random
import struct
import uuid
from collections import Counter
from datetime import timedelta

from confluent_kafka import Consumer, TopicPartition

from _support import ensure_topics, produce_records, read_topic
from streamtable import (
    KafkaStreams,
    Serdes,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
)
from streamtable.serde.murmur2 import default_partition

SIZE, GRACE = 10_000, 5_000
PARTITIONS = 2


def keys_by_partition(n_per_partition):
    """Keys that Java's partitioner puts on each partition."""
    out = {p: [] for p in range(PARTITIONS)}
    i = 0
    while any(len(v) < n_per_partition for v in out.values()):
        k = f"k{i}"
        p = default_partition(k.encode(), PARTITIONS)
        if len(out[p]) < n_per_partition:
            out[p].append(k)
        i += 1
    return out


def make_input(seed):
    """Per partition: (key, ts) in offset order, timestamps out of order by up to 25 s."""
    rng = random.Random(seed)
    keys = keys_by_partition(3)
    parts = {}
    for p in range(PARTITIONS):
        t, recs = 100_000, []
        for _ in range(40):
            t += rng.randint(0, 4_000)
            recs.append(
                (rng.choice(keys[p]), max(0, t - rng.choice([0, 0, 0, 3_000, 12_000, 25_000])))
            )
        if p == 0:
            # a last record far ahead closes every earlier window of partition 0's keys, while
            # partition 1 stops delivering: its own keys' windows stay open
            recs.append((keys[p][0], t + 100_000))
        parts[p] = recs
    return parts


def model(parts):
    """(final counts per (key, window start), late (key, ts, window start) list, emitted finals)."""
    counts, late, finals = Counter(), [], {}
    for recs in parts.values():
        st, part_counts = -1, Counter()
        for key, ts in recs:
            st = max(st, ts)
            start = ts - ts % SIZE
            if start + SIZE + GRACE <= st:
                late.append((key, ts, start))
            else:
                part_counts[(key, start)] += 1
        counts.update(part_counts)
        finals.update({kw: n for kw, n in part_counts.items() if kw[1] + SIZE + GRACE <= st})
    return counts, sorted(late), finals


def read_with_headers(bootstrap, topic):
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = c.list_topics(topic, timeout=30)
        parts = list(md.topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out, seen = [], Counter()
        while any(seen[p] < ends[p] for p in parts):
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    seen[m.partition()] += 1
                    out.append((m.key(), m.value(), m.timestamp()[1], dict(m.headers() or [])))
        return out
    finally:
        c.close()


def topology(inp, out, late):
    b = StreamsBuilder()
    (
        b.stream(inp, key_serde=Serdes.string(), value_serde=Serdes.string())
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(SIZE, GRACE), late_records_topic=late)
        .count(name="counts")
        .suppress(Suppressed.until_window_closes())
        .to_stream()
        .to(out, key_serde=Serdes.time_windowed(Serdes.string(), SIZE), value_serde=Serdes.long())
    )
    return b.build()


def test_suppressed_counts_and_late_records_do_not_depend_on_batch_boundaries(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    inp = topic_name("in")
    ensure_topics(bs, {inp: PARTITIONS})
    parts = make_input(seed=4)
    for recs in parts.values():
        records = [(k.encode(), f"v{i}".encode(), ts) for i, (k, ts) in enumerate(recs)]
        produce_records(bs, inp, records, partitions=PARTITIONS)
    _, want_late, want_finals = model(parts)
    assert want_late and want_finals  # the input exercises both
    # and windows of partition 0's keys that close after partition 1 went quiet
    quiet_since = max(ts for _k, ts in parts[1])
    assert any(s + SIZE + GRACE > quiet_since for _k, s in want_finals)

    results = []
    for batch_limit in (7, None):  # many small micro-batches, then everything in one
        out, late = topic_name(f"out{batch_limit}"), topic_name(f"late{batch_limit}")
        ensure_topics(bs, {out: 1, late: 1})
        extra = {} if batch_limit is None else {"streamtable.max.offsets.per.trigger": batch_limit}
        app = KafkaStreams(topology(inp, out, late), app_config(**extra))
        app.start()
        try:
            app.await_caught_up(timeout=timedelta(minutes=3))
            dropped = app.metrics()["dropped-records"]
        finally:
            app.close()
        emitted = [
            (k[:-8].decode(), struct.unpack(">q", k[-8:])[0], struct.unpack(">q", v)[0])
            for k, v, _ in read_topic(bs, out)
        ]
        late_records = read_with_headers(bs, late)
        results.append((sorted(emitted), sorted((k, ts) for k, _v, ts, _h in late_records)))

        # exactly one final record per closed window, with the model's count
        assert Counter((k, s) for k, s, _ in emitted) == Counter(want_finals.keys())
        assert {(k, s): n for k, s, n in emitted} == want_finals
        # every late record is in the late topic once, with its window in the headers
        assert (
            sorted(
                (k.decode(), ts, int(h["streamtable.late.window.start"]))
                for k, _v, ts, h in late_records
            )
            == want_late
        )
        assert all(h["streamtable.late.reason"] == b"window-closed" for *_r, h in late_records)
        assert dropped.get("late") == len(want_late)

    assert results[0] == results[1]


def test_sessions_sliding_windows_and_time_limited_suppression(
    kafka_broker, spark, topic_name, app_config
):
    """One record per micro-batch, so every update is visible (no coalescing)."""
    bs = kafka_broker.bootstrap_servers
    names = ("s-in", "w-in", "t-in", "sess", "slide", "limit")
    s_in, w_in, t_in, sessions, sliding, limited = (topic_name(n) for n in names)
    ensure_topics(bs, dict.fromkeys((s_in, w_in, t_in, sessions, sliding, limited), 1))
    b = StreamsBuilder()

    def src(topic):
        return b.stream(topic, key_serde=Serdes.string(), value_serde=Serdes.string())

    # sessions with a 5 s gap: a@0 and a@10000 are two sessions until a@5000 bridges them
    (
        src(s_in)
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5_000, 10_000))
        .count(name="sessions")
        .to_stream()
        .to(sessions, key_serde=Serdes.session_windowed(Serdes.string()), value_serde=Serdes.long())
    )
    # Kafka Streams' SlidingWindows javadoc: d = 5 s, records at 8000, 9200, 12400
    (
        src(w_in)
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(5_000, 60_000))
        .count(name="sliding")
        .to_stream()
        .to(
            sliding,
            key_serde=Serdes.time_windowed(Serdes.string(), 5_000),
            value_serde=Serdes.long(),
        )
    )
    # counts per key, held until stream time passes the first held update + 10 s
    (
        src(t_in)
        .group_by_key()
        .count(name="limited")
        .suppress(Suppressed.until_time_limit(timedelta(seconds=10)))
        .to_stream()
        .to(limited, value_serde=Serdes.long())
    )
    records = [
        ("a", "s", 0),
        ("a", "s", 10_000),
        ("a", "s", 5_000),
        ("x", "w", 8_000),
        ("x", "w", 9_200),
        ("x", "w", 12_400),
        ("a", "t", 0),
        ("a", "t", 1_000),
        ("b", "t", 2_000),
        ("c", "t", 20_000),
    ]
    base = 1_000_000  # a producer turns timestamp 0 into "now"
    for topic, kind in ((s_in, "s"), (w_in, "w"), (t_in, "t")):
        mine = [(k.encode(), v.encode(), base + ts) for k, v, ts in records if v == kind]
        produce_records(bs, topic, mine)
    app = KafkaStreams(b.build(), app_config(**{"streamtable.max.offsets.per.trigger": 1}))
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
    finally:
        app.close()

    def session(k, v):
        end, start = struct.unpack(">qq", k[-16:])
        n = None if v is None else struct.unpack(">q", v)[0]
        return (k[:-16].decode(), start - base, end - base, n)

    # merging emits a tombstone for each merged-away session, then the merged session
    assert [session(k, v) for k, v, _ in read_topic(bs, sessions)] == [
        ("a", 0, 0, 1),
        ("a", 10_000, 10_000, 1),
        ("a", 0, 0, None),
        ("a", 10_000, 10_000, None),
        ("a", 0, 10_000, 3),
    ]
    final = {}
    for k, v, _ in read_topic(bs, sliding):
        final[struct.unpack(">q", k[-8:])[0] - base] = struct.unpack(">q", v)[0]
    assert final == {3_000: 1, 4_200: 2, 7_400: 3, 8_001: 2, 9_201: 1}
    limited_out = [(k.decode(), struct.unpack(">q", v)[0]) for k, v, _ in read_topic(bs, limited)]
    assert sorted(limited_out) == [("a", 2), ("b", 1)]


def test_windowed_aggregation_refusals_name_what_to_change(
    kafka_broker, spark, topic_name, app_config
):
    import pytest

    from streamtable.errors import MissingSourceTopicError

    bs = kafka_broker.bootstrap_servers
    inp, out, late = topic_name("in"), topic_name("out"), topic_name("late-missing")
    ensure_topics(bs, {inp: 1, out: 1})

    def build(late_topic=None):
        b = StreamsBuilder()
        s = b.stream(inp, key_serde=Serdes.string(), value_serde=Serdes.string())
        (
            s.group_by_key()
            .windowed_by(TimeWindows.of_size_with_no_grace(1000), late_records_topic=late_topic)
            .count(name="c")
            .to_stream()
            .to(
                out,
                key_serde=Serdes.time_windowed(Serdes.string(), 1000),
                value_serde=Serdes.long(),
            )
        )
        return b.build()

    app = KafkaStreams(build(late_topic=late), app_config())
    with pytest.raises(MissingSourceTopicError, match=rf"\['{late}'\] do not exist"):
        app.start()
    # an explicit repartition before the windows is a sub-topology of its own now
    # (test_subtopologies.py::test_explicit_repartition_then_windowed_count)


def key_partitions(bootstrap, topic):
    """``{key bytes: {partitions its records are in}}`` of every record of ``topic``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}"})
    try:
        parts = list(c.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out, seen = {}, Counter()
        while any(seen[p] < ends[p] for p in parts):
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    seen[m.partition()] += 1
                    out.setdefault(m.key(), set()).add(m.partition())
        return out
    finally:
        c.close()


def test_every_window_of_a_key_is_written_to_the_partition_of_the_key(embedded_kafka, spark):
    """Kafka Streams' WindowedStreamPartitioner: a windowed key's partition is its inner key's
    (murmur2 of the inner key bytes), so all windows of a key land in one partition; hashing
    the whole windowed key spread them (``alice``'s four windows went to partitions 1, 3, 1, 5
    of 6).
    """
    S, windowed = Serdes.string(), Serdes.time_windowed(Serdes.string(), SIZE)
    inp, out = embedded_kafka.topic("in", 2), embedded_kafka.topic("out", 6)
    users = ["alice", "bob", "carol"]
    embedded_kafka.produce(
        inp, [(u.encode(), b"x", 1_000 + w * SIZE) for w in range(4) for u in users]
    )
    b = StreamsBuilder()
    b.stream(inp, key_serde=S, value_serde=S).group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(SIZE, 0)
    ).count().to_stream().to(out, key_serde=windowed, value_serde=Serdes.long())
    app = KafkaStreams(b.build(), embedded_kafka.app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
    finally:
        app.close()
    by_user = {}
    for key, partitions in key_partitions(embedded_kafka.bootstrap_servers, out).items():
        by_user.setdefault(windowed.deserialize(key).key, set()).update(partitions)
    assert by_user == {u: {default_partition(u.encode(), 6)} for u in users}
