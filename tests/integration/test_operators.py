"""Stateless operators, merge, reduce, windowed count and KTable filter in one application."""

import json
import struct
from datetime import timedelta

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder, TimeWindows


def rec(key, value, ts):
    return (key.encode(), value.encode(), ts)


def test_operators_end_to_end(kafka_broker, spark, topic_name, app_config, tmp_path):
    bs = kafka_broker.bootstrap_servers
    left, right, joined, windowed, small = (
        topic_name(t) for t in ("left", "right", "joined", "windowed", "small")
    )
    ensure_topics(bs, {left: 2, right: 1, joined: 2, windowed: 1, small: 1})
    produce_records(
        bs,
        left,
        [rec("a", "1", 1000), rec("b", "2", 2000), rec("a", "x", 3000), rec("a", "3", 4000)],
    )
    produce_records(bs, right, [rec("c", "10", 1500), rec("a", "20", 2500)])
    produce_records(
        bs, left, [(None, b"50", 5000)]
    )  # null key: skipped (and counted) by aggregations

    seen_file = tmp_path / "foreach.txt"
    b = StreamsBuilder()
    ls = b.stream(left, key_serde=Serdes.string(), value_serde=Serdes.string())
    rs = b.stream(right, key_serde=Serdes.string(), value_serde=Serdes.string())
    numbers = ls.filter(lambda k, v: v.isdigit()).merge(rs).map_values(int)
    # per key: the values joined in timestamp order
    (
        numbers.group_by(lambda k, v: k.upper() if k else None, key_serde=Serdes.string())
        .reduce(lambda agg, v: agg + v, name="sums")
        .to_stream()
        .to(joined, value_serde=Serdes.long())
    )
    # 10 s tumbling windows: count per key, keep windows with >= 2 records (a window that
    # never had 2 sends nothing: Kafka Streams' KTableFilter gets the window store's old values)
    counts = (
        numbers.group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10)))
        .count(name="window-counts")
    )
    counts.filter(lambda wk, n: n >= 2).to_stream().map(
        lambda wk, n: (
            wk.key,
            None if n is None else json.dumps({"start": wk.start, "end": wk.end, "n": n}),
        )
    ).to(windowed, key_serde=Serdes.string(), value_serde=Serdes.string())
    branches = (
        numbers.split(name="b-").branch(lambda k, v: v < 5, name="small").default_branch(name="big")
    )
    branches["b-small"].to(small, value_serde=Serdes.integer())
    branches["b-big"].foreach(lambda k, v: open(seen_file, "a").write(f"{k}={v}\n"))

    app = KafkaStreams(b.build(), app_config())
    app.start()
    try:
        assert len(app.queries) == 4
        app.await_caught_up(timeout=timedelta(minutes=3))
        # the null-key record is dropped once by each of the two aggregations
        assert app.metrics()["dropped-records"].get("null_key") == 2
    finally:
        app.close()

    sums = {k.decode(): struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, joined)}
    assert sums == {"A": 1 + 20 + 3, "B": 2, "C": 10}
    final = {}
    for k, v, _ in read_topic(bs, windowed):
        final[k.decode()] = None if v is None else json.loads(v)
    assert final == {"a": {"start": 0, "end": 10000, "n": 3}}
    small_values = sorted(
        (k.decode(), struct.unpack(">i", v)[0]) for k, v, _ in read_topic(bs, small)
    )
    assert small_values == [("a", 1), ("a", 3), ("b", 2)]
    assert sorted(seen_file.read_text().split()) == ["None=50", "a=20", "c=10"]
