"""A compatible new version restarts from the checkpoints, as ``streamtable upgrade --dry-run``
said: the outputs of the queries that resume are not written again, a new sink starts."""

from __future__ import annotations

import struct
from datetime import timedelta
from pathlib import Path

from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.config import StreamsConfig
from streamtable.runtime.upgrade import check_upgrade

S = Serdes.string()


def version(source: str, counts: str, lengths: str | None) -> object:
    b = StreamsBuilder()
    events = b.stream(source, key_serde=S, value_serde=S)
    events.group_by_key().count(name="n").to_stream().to(
        counts, value_serde=Serdes.long(), name="counts-sink"
    )
    if lengths is not None:  # version 2: a new sink with a function of its own
        events.map_values(len).to(lengths, value_serde=Serdes.long(), name="lengths-sink")
    return b.build()


def test_a_new_sink_restarts_from_the_checkpoints_without_rewriting_the_others(
    kafka_broker, topic_name, app_config
):
    from _support import ensure_topics, produce_values, read_topic

    bs = kafka_broker.bootstrap_servers
    source, counts, lengths = topic_name("in"), topic_name("counts"), topic_name("lengths")
    ensure_topics(bs, {source: 2, counts: 1, lengths: 1})
    config = app_config()
    produce_values(bs, source, [(f"k{i % 5}", "abc") for i in range(40)])
    with KafkaStreams(version(source, counts, None), config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
    first = read_topic(bs, counts)
    assert first

    v2 = version(source, counts, lengths)
    report = check_upgrade(v2, StreamsConfig.from_mapping(config))
    assert report.compatible
    assert {q.name: q.action for q in report.queries} == {
        "counts-sink": "resumes",
        "lengths-sink": "new",
    }

    produce_values(bs, source, [("k0", "defgh")])
    with KafkaStreams(v2, config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
        assert app.metrics()["replayed-records"] == 0
    # counts resumed: only the new record's update was written, k0's count going 8 -> 9
    after = read_topic(bs, counts)
    assert after[: len(first)] == first
    assert [(k, struct.unpack(">q", v)[0]) for k, v, _ in after[len(first) :]] == [(b"k0", 9)]
    # the new sink read its input from auto.offset.reset (earliest): all 41 records
    assert len(read_topic(bs, lengths)) == 41


def generated(source: str, counts: str, step: bool) -> object:
    b = StreamsBuilder()
    # a Python reduce: transformWithState, whose operator metadata holds absolute paths into
    # the checkpoint folder
    joined = (
        b.stream(source, key_serde=S, value_serde=S)
        .group_by_key()
        .reduce(lambda a, v: a + v, name="joined")
    )
    out = joined.to_stream()
    if step:  # version 2: a stateless step after the aggregation shifts the sink's name
        out.map_values(len).to(counts, value_serde=Serdes.long())  # a generated sink name
    else:
        out.to(counts, value_serde=S)
    return b.build()


def test_a_step_after_an_aggregation_keeps_its_state_though_the_sink_name_changes(
    kafka_broker, topic_name, app_config
):
    from _support import ensure_topics, produce_values, read_topic
    from streamtable.runtime.checkpoint import query_outputs

    bs = kafka_broker.bootstrap_servers
    source, counts = topic_name("in"), topic_name("counts")
    ensure_topics(bs, {source: 2, counts: 1})
    config = app_config(**{"processing.guarantee": "exactly_once_v2"})
    produce_values(bs, source, [(f"k{i % 4}", "x") for i in range(20)])
    v1, v2 = generated(source, counts, False), generated(source, counts, True)
    (old_name,), (new_name,) = list(query_outputs(v1)), list(query_outputs(v2))
    assert old_name != new_name
    with KafkaStreams(v1, config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
    first = read_topic(bs, counts)
    assert (b"k1", b"xxxxx") in [(k, v) for k, v, _ in first]

    report = check_upgrade(v2, StreamsConfig.from_mapping(config))
    assert [(q.name, q.action) for q in report.queries] == [(new_name, "resumes")]

    produce_values(bs, source, [("k1", "y")])
    with KafkaStreams(v2, config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
        assert [q.name for q in app.queries] == [f"{config['application.id']}-{new_name}"]
        assert app.metrics()["replayed-records"] == 0
    # k1's state went on ("xxxxx" + "y", its length 6); nothing else was written again
    after = read_topic(bs, counts)
    assert after[: len(first)] == first
    assert [(k, struct.unpack(">q", v)[0]) for k, v, _ in after[len(first) :]] == [(b"k1", 6)]


def test_a_changed_shuffle_partitions_is_named_and_the_checkpoint_keeps_its_own(
    kafka_broker, topic_name, app_config, caplog
):
    from _support import ensure_topics, produce_values, read_topic

    bs = kafka_broker.bootstrap_servers
    source, counts = topic_name("in"), topic_name("counts")
    ensure_topics(bs, {source: 2, counts: 1})
    config = app_config(**{"streamtable.shuffle.partitions": 2})
    produce_values(bs, source, [(f"k{i % 3}", "x") for i in range(9)])
    topology = version(source, counts, None)
    with caplog.at_level("WARNING", logger="streamtable"):
        for _ in range(2):  # a first start, then a restart with the same setting
            with KafkaStreams(topology, config) as app:
                app.start()
                app.await_caught_up(timeout=timedelta(minutes=3))
        assert "shuffle.partitions" not in caplog.text
        produce_values(bs, source, [("k0", "y")])
        changed = {**config, "streamtable.shuffle.partitions": 3}
        with KafkaStreams(topology, changed) as app:
            app.start()
            app.await_caught_up(timeout=timedelta(minutes=3))
            state = app.queries[0].lastProgress["stateOperators"][0]
    notices = [r.getMessage() for r in caplog.records if "shuffle.partitions" in r.getMessage()]
    assert len(notices) == 1, caplog.text
    assert (
        f"[{config['application.id']}] streamtable.shuffle.partitions=3 does not apply"
        in (notices[0])
    )
    assert "(query counts-sink: 2), and they run with those" in notices[0]
    assert "Set streamtable.shuffle.partitions=2 to match" in notices[0]
    assert f"streamtable reset --application-id {config['application.id']}" in notices[0]
    # the restart ran on the checkpoint's 2 state partitions, and k0's count went on
    assert state["numShufflePartitions"] == 2
    last = read_topic(bs, counts)[-1]
    assert (last[0], struct.unpack(">q", last[1])[0]) == (b"k0", 4)


def merged(a: str, c: str, out: str, out2: str, merge: bool) -> object:
    b = StreamsBuilder()
    first = b.stream(a, key_serde=S, value_serde=S)
    second = b.stream(c, key_serde=S, value_serde=S)
    (first.merge(second) if merge else first).to(out, value_serde=S, name="out-sink")
    second.to(out2, value_serde=S, name="out2-sink")
    return b.build()


def test_a_query_whose_sources_changed_is_refused_naming_it(kafka_broker, topic_name, app_config):
    # the same source topics and no stateful operator: the fingerprint sees no change, but the
    # query out-sink now reads two Kafka sources where its checkpoint has one (Spark: "There
    # are [1] sources in the checkpoint offsets and now there are [2] sources")
    import pytest

    from _support import ensure_topics, produce_values
    from streamtable.errors import TopologyError

    bs = kafka_broker.bootstrap_servers
    a, c, out, out2 = (topic_name(n) for n in ("a", "c", "out", "out2"))
    ensure_topics(bs, {a: 1, c: 1, out: 1, out2: 1})
    produce_values(bs, a, [("k", "x")])
    produce_values(bs, c, [("k", "y")])
    config = app_config()
    with KafkaStreams(merged(a, c, out, out2, merge=False), config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
    app = KafkaStreams(merged(a, c, out, out2, merge=True), config)
    with pytest.raises(
        TopologyError,
        match=rf"Query 'out-sink' cannot resume from its checkpoint: the checkpoint's "
        rf"micro-batches read 1 Kafka source\(s\) \({a}\), this version of the topology reads "
        rf"2 in that query \({a}, {c}\).*Reset the application \(streamtable reset.*delete "
        r"this query's checkpoint folder '.*out-sink'",
    ):
        app.start()
    assert app.state.value != "RUNNING"
    app.close()
    # the remedy the message gives: without the query's checkpoint it starts afresh
    import shutil

    shutil.rmtree(Path(config["state.dir"]) / config["application.id"] / "out-sink")
    with KafkaStreams(merged(a, c, out, out2, merge=True), config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
