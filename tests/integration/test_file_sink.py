"""KStream.to_files: Spark's file sink under a real broker and real Spark.

Expected rows are computed here from the input; the files are read through the sink's log
(``streamtable.files``), as an exactly-once reader must.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import struct

import pytest

from _support import ensure_topics, produce_records
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import StreamsError, TopologyError
from streamtable.files import committed_files, read_files

S, L = Serdes.string(), Serdes.long()
TRADE = Serdes.json({"player": "string", "amount": "double", "item": "string"})
DAY = 86_400_000
T0 = 1_795_000_000_000  # 2026-11-18 08:26:40 UTC


def trades(n, start=T0):
    """(key, value dict, ts) over three UTC days."""
    return [
        (
            f"p{i % 5}",
            {"player": f"p{i % 5}", "amount": round(i * 1.5, 2), "item": f"i{i % 3}"},
            start + (i % 3) * DAY + i,
        )
        for i in range(n)
    ]


def produce_trades(bs, topic, rows):
    produce_records(bs, topic, [(k.encode(), json.dumps(v).encode(), ts) for k, v, ts in rows])


def test_a_stream_is_written_once_per_record_with_typed_columns_and_date_partitions(
    kafka_broker, spark, topic_name, app_config, tmp_path
):
    bs = kafka_broker.bootstrap_servers
    src = topic_name("trades")
    ensure_topics(bs, {src: 2})
    rows = trades(300)
    produce_trades(bs, src, rows)
    out = tmp_path / "trades"
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=TRADE).filter(lambda k, v: v["amount"] > 3).to_files(
        out, partition_by="date"
    )
    app = KafkaStreams(b.build(), app_config())
    app.start()
    try:
        app.await_caught_up()
    finally:
        app.close()

    table = read_files(out)
    got = sorted(
        (r["key"], r["player"], r["amount"], r["item"], r["timestamp"], str(r["date"]))
        for r in table.to_pylist()
    )
    want = sorted(
        (
            k,
            v["player"],
            v["amount"],
            v["item"],
            dt.datetime.fromtimestamp(ts / 1000, dt.UTC).replace(tzinfo=None),
            dt.datetime.fromtimestamp(ts / 1000, dt.UTC).date().isoformat(),
        )
        for k, v, ts in rows
        if v["amount"] > 3
    )
    assert got == want
    # Kafka coordinates: every input offset of the kept records once
    coords = collections.Counter(
        (r["topic"], r["partition"], r["offset"]) for r in table.to_pylist()
    )
    assert set(coords.values()) == {1} and {t for t, _, _ in coords} == {src}
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("date=")) == [
        "date=2026-11-18",
        "date=2026-11-19",
        "date=2026-11-20",
    ]
    assert all(f.suffix == ".parquet" for f in committed_files(out))


def test_an_aggregation_writes_its_update_stream(
    kafka_broker, spark, topic_name, app_config, tmp_path
):
    bs = kafka_broker.bootstrap_servers
    src = topic_name("clicks")
    ensure_topics(bs, {src: 2})
    produce_records(
        bs, src, [(f"u{i % 7}".encode(), struct.pack(">q", i), T0 + i) for i in range(200)]
    )
    out = tmp_path / "counts"
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=L).group_by_key().count(
        name="clicks"
    ).to_stream().to_files(out, value_serde=L)
    app = KafkaStreams(b.build(), app_config())
    app.start()
    try:
        app.await_caught_up()
    finally:
        app.close()
    table = read_files(out)
    assert table.schema.field("key").type == "string"
    assert table.schema.field("value").type == "int64"
    per_key = collections.defaultdict(list)
    for r in sorted(table.to_pylist(), key=lambda r: r["timestamp"]):
        per_key[r["key"]].append(r["value"])
        assert r["offset"] is None  # an aggregation's records are new records
    want = collections.Counter(f"u{i % 7}" for i in range(200))
    assert {k: v[-1] for k, v in per_key.items()} == dict(want)
    assert all(v == sorted(set(v)) for v in per_key.values())  # updates only rise


def test_a_fresh_run_over_an_earlier_runs_output_is_refused(
    kafka_broker, spark, topic_name, app_config, tmp_path
):
    bs = kafka_broker.bootstrap_servers
    src = topic_name("in")
    ensure_topics(bs, {src: 1})
    produce_records(bs, src, [(b"k", b"v", T0)])
    out = tmp_path / "out"

    def run(config):
        b = StreamsBuilder()
        b.stream(src, key_serde=S, value_serde=S).to_files(out)
        app = KafkaStreams(b.build(), config)
        app.start()
        try:
            app.await_caught_up()
        finally:
            app.close()

    run(app_config())
    assert len(read_files(out)) == 1
    with pytest.raises(StreamsError, match=r"already holds the files and the log .*new path"):
        run(app_config())  # a new application.id: a new checkpoint, the old log
    assert len(read_files(out)) == 1


def test_an_unwritable_path_is_named(kafka_broker, spark, topic_name, app_config, tmp_path):
    src = topic_name("in")
    ensure_topics(kafka_broker.bootstrap_servers, {src: 1})
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=S).to_files(blocker / "out")
    app = KafkaStreams(b.build(), app_config())
    with pytest.raises(StreamsError, match=r"cannot create its output directory .*a-file/out"):
        app.start()
    app.close()


def test_topologies_that_cannot_be_written_are_refused_at_compile_time(
    kafka_broker, spark, topic_name, app_config, tmp_path
):
    src = topic_name("in")
    ensure_topics(kafka_broker.bootstrap_servers, {src: 1})
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=TRADE).to_files(tmp_path / "x", partition_by="country")
    with pytest.raises(
        TopologyError, match=r"partition_by names \['country'\].*'player', 'amount'"
    ):
        KafkaStreams(b.build(), app_config()).start()

    b = StreamsBuilder()
    stream = b.stream(src, key_serde=S, value_serde=S)
    stream.to_files(tmp_path / "same")
    stream.filter(lambda k, v: True).to_files(str(tmp_path / "same") + "/")
    with pytest.raises(TopologyError, match="allows one writer per path"):
        KafkaStreams(b.build(), app_config()).start()

    b = StreamsBuilder()
    clash = Serdes.json({"offset": "long"})
    b.stream(src, key_serde=S, value_serde=clash).to_files(tmp_path / "y")
    with pytest.raises(TopologyError, match=r"fields \['offset'\] have the names"):
        KafkaStreams(b.build(), app_config()).start()


def test_the_test_driver_writes_the_files_too(spark, tmp_path):
    from streamtable.testing import TopologyTestDriver

    i32 = Serdes.integer()
    b = StreamsBuilder()
    b.stream("in", key_serde=i32, value_serde=L).to_files(tmp_path / "out", format="parquet")
    with TopologyTestDriver(b.build()) as driver:
        topic = driver.create_input_topic("in", i32, L)
        values = [(-(2**31), -(2**63)), (-1, -1), (0, 0), (2**31 - 1, 2**63 - 1), (7, None)]
        for i, (k, v) in enumerate(values):
            topic.pipe_input(k, v, timestamp=T0 + i)
    table = read_files(tmp_path / "out")
    assert table.schema.field("key").type == "int32"
    assert sorted((r["key"], r["value"]) for r in table.to_pylist()) == sorted(values)


def test_a_windowed_count_reaches_the_files_without_a_python_stage(spark, tmp_path):
    """A windowed aggregation's keys are its windowed serde's bytes and a count's values the
    Long serde's already: no Python stage re-encodes them after the aggregation.
    """
    from datetime import timedelta

    from streamtable import TimeWindows
    from streamtable.testing import TopologyTestDriver

    windowed = Serdes.time_windowed(S, 60_000)
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
        .count()
        .to_stream()
        .to_files(tmp_path / "out", key_serde=windowed, value_serde=L, format="parquet")
    )
    with TopologyTestDriver(b.build()) as driver:
        topic = driver.create_input_topic("in", S, S)
        for key, ts in [("a", 1_000), ("a", 2_000), ("b", 3_000), ("a", 61_000)]:
            topic.pipe_input(key, "v", timestamp=ts)
        plans = [p.df._jdf.queryExecution().analyzed().toString() for p in driver._plans]
    (plan,) = plans
    assert "MapInArrow RecordStage" not in plan.split("TransformWithState")[0], plan
    last = {}
    for r in sorted(read_files(tmp_path / "out").to_pylist(), key=lambda r: r["offset"]):
        w = windowed.deserialize(r["key"])
        last[(w.key, w.start)] = r["value"]
    assert last == {("a", 0): 2, ("b", 0): 1, ("a", 60_000): 1}
