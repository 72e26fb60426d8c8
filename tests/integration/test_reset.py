"""`streamtable reset`: the next start recomputes; positions rewound or kept; refusals.

Also: processed offsets are committed to the consumer group ``application.id``, and a restart
with an incompatible topology names the full reset command.
"""

import shlex
import time
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from _support import ensure_topics, produce_records, produce_values, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.cli import cli
from streamtable.demo import wordcount
from streamtable.errors import StateDirLockedError, TopologyError
from streamtable.runtime.kafka_admin import KafkaAdmin
from streamtable.runtime.starting_offsets import read_starting_offsets
from streamtable.serde.murmur2 import default_partition

WORDS = {"all": 1, "streams": 2, "lead": 1, "to": 1, "kafka": 3, "hello": 1, "join": 1, "summit": 1}
LINES = ["all streams lead to kafka", "hello kafka streams", "join kafka summit"]
CAUGHT_UP = timedelta(minutes=3)
#: keys only Java's Kafka client knows (Spark's source and sink take them); librdkafka refuses
#: them, and streamtable's own clients (offset committer, changelog writer) must leave them out
JAVA_ONLY_CLIENT_KEYS = {
    "consumer.default.api.timeout.ms": 30000,
    "producer.max.block.ms": 60000,
    "producer.buffer.memory": 33554432,
}


def reset(*args):
    return CliRunner().invoke(cli, ["reset", *args])


def run_to_caught_up(topology, config):
    app = KafkaStreams(topology, config)
    app.start()
    try:
        app.await_caught_up(timeout=CAUGHT_UP)
    finally:
        app.close()
    return app


def group_offsets(bs, group, topics):
    admin = AdminClient({"bootstrap.servers": bs})
    request = ConsumerGroupTopicPartitions(group)
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.topic in topics and tp.offset >= 0
    }


def records_after(bs, offsets):
    """The records of each ``(topic, partition)`` from ``offsets`` to the current end."""
    ends = KafkaAdmin(bs).end_offsets({t for t, _ in offsets})
    c = Consumer(
        {"bootstrap.servers": bs, "group.id": "test-reset-reader", "enable.auto.commit": False}
    )
    c.assign([TopicPartition(t, p, off) for (t, p), off in offsets.items()])
    out, left = [], {tp for tp, off in offsets.items() if ends[tp] > off}
    deadline = time.monotonic() + 60
    while left and time.monotonic() < deadline:
        for msg in c.consume(100, timeout=0.5):
            if msg.error():
                continue
            out.append((msg.key(), msg.value(), msg.timestamp()[1]))
            if msg.offset() + 1 >= ends[(msg.topic(), msg.partition())]:
                left.discard((msg.topic(), msg.partition()))
    c.close()
    assert not left, f"could not read {left} to the end"
    return out


def base_args(config, topics):
    return [
        "--application-id",
        config["application.id"],
        "--bootstrap-servers",
        config["bootstrap.servers"],
        "--input-topics",
        topics,
        "--state-dir",
        config["state.dir"],
    ]


def test_reset_makes_the_next_start_recompute(kafka_broker, spark, topic_name, app_config):
    src, out = topic_name("in"), topic_name("out")
    bs = kafka_broker.bootstrap_servers
    config = app_config(**JAVA_ONLY_CLIENT_KEYS)
    app_id = config["application.id"]
    changelog, markers = f"{app_id}-counts-changelog", f"{app_id}-eos-markers-streamtable-internal"
    unrelated = f"{app_id}-notes"  # prefixed, but not an internal topic name
    ensure_topics(bs, {src: 2, out: 2, changelog: 1, markers: 1, unrelated: 1})
    eos_group = f"{app_id}-eos-0"
    c = Consumer({"bootstrap.servers": bs, "group.id": eos_group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(markers, 0, 0)], asynchronous=False)
    c.close()
    produce_values(bs, src, [(None, line) for line in LINES])

    topology = wordcount.build_topology(src, out)
    run_to_caught_up(topology, config)
    first = read_topic(bs, out)
    assert wordcount.final_counts(first) == WORDS
    # processed offsets are committed to the group application.id: Kafka's tools show no lag
    # (the Java-only consumer.* key in the config does not reach the librdkafka committer)
    ends = KafkaAdmin(bs).end_offsets([src])
    assert sum(ends.values()) == len(LINES)
    assert group_offsets(bs, app_id, {src}) == ends

    result = reset(*base_args(config, src))
    assert result.exit_code == 0, result.output
    out_text = result.output
    assert f"Reset of application {app_id!r}:" in out_text
    assert f"checkpoints and local state in {config['state.dir']}/{app_id}: " in out_text
    assert "topology.json" in out_text and "KSTREAM-SINK" in out_text
    # the store "counts-store" is named, so the application wrote its changelog too
    store_changelog = f"{app_id}-counts-store-changelog"
    assert f"deleted internal topics: {changelog}, {store_changelog}, {markers}" in out_text
    assert f"deleted consumer groups: {eos_group}" in out_text
    assert f"{src} (rewound to the earliest offsets): 0:0 1:0" in out_text
    remaining = set(AdminClient({"bootstrap.servers": bs}).list_topics(timeout=30).topics)
    assert changelog not in remaining and markers not in remaining and unrelated in remaining
    assert store_changelog not in remaining
    assert eos_group not in KafkaAdmin(bs).consumer_groups()
    assert group_offsets(bs, app_id, {src}) == {(src, 0): 0, (src, 1): 0}
    state = f"{config['state.dir']}/{app_id}"
    assert read_starting_offsets(state) == {src: {0: 0, 1: 0}}

    before = KafkaAdmin(bs).end_offsets([out])
    run_to_caught_up(topology, config)
    recomputed = records_after(bs, before)
    assert recomputed, "nothing was recomputed after the reset"
    # state restarted from zero: the recomputed counts equal the first run's, not twice them
    assert wordcount.final_counts(recomputed) == WORDS
    assert group_offsets(bs, app_id, {src}) == ends


def test_reset_to_datetime_rewinds_and_other_topics_keep_their_position(
    kafka_broker, spark, topic_name, app_config
):
    src, side, out = topic_name("in"), topic_name("side"), topic_name("out")
    bs = kafka_broker.bootstrap_servers
    ensure_topics(bs, {src: 2, side: 1, out: 1})
    t0 = int(datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp() * 1000)
    minute = 60_000
    keys = {
        p: [f"k{i}" for i in range(50) if default_partition(f"k{i}".encode(), 2) == p]
        for p in (0, 1)
    }
    # partition 0: records at minutes 0..5; partition 1: minutes 0..2 (none at or after minute 3)
    recs = [(keys[0][i].encode(), f"p0-{i}".encode(), t0 + i * minute) for i in range(6)]
    recs += [(keys[1][i].encode(), f"p1-{i}".encode(), t0 + i * minute) for i in range(3)]
    produce_records(bs, src, recs, partitions=2)
    produce_values(bs, side, [("s", f"side-{i}") for i in range(4)], ts=t0)

    b = StreamsBuilder()
    b.stream([src, side], key_serde=Serdes.string(), value_serde=Serdes.string()).map_values(
        str.upper
    ).to(out, key_serde=Serdes.string(), value_serde=Serdes.string())
    topology = b.build()
    config = app_config()
    run_to_caught_up(topology, config)
    assert len(read_topic(bs, out)) == 9 + 4

    # to 14:03+02:00 = 12:03Z: partition 0 from offset 3, partition 1 at its end (3)
    args = base_args(config, src)
    dry = reset(*args, "--to-datetime", "2024-05-01T14:03:00+02:00", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("Dry run: nothing changed.")
    assert "would delete checkpoints" in dry.output
    assert read_starting_offsets(f"{config['state.dir']}/{config['application.id']}") == {}

    result = reset(*args, "--to-datetime", "2024-05-01T14:03:00+02:00")
    assert result.exit_code == 0, result.output
    assert (
        f"{src} (rewound to the first offsets at or after 2024-05-01T14:03:00+02:00): 0:3 1:3"
        in result.output
    )
    assert f"{side} (kept from the checkpoint): 0:4" in result.output
    state = f"{config['state.dir']}/{config['application.id']}"
    assert read_starting_offsets(state) == {src: {0: 3, 1: 3}, side: {0: 4}}
    assert group_offsets(bs, config["application.id"], {src, side}) == {
        (src, 0): 3,
        (src, 1): 3,
        (side, 0): 4,
    }

    produce_values(bs, side, [("s", "side-new")], ts=t0)
    before = KafkaAdmin(bs).end_offsets([out])
    run_to_caught_up(topology, config)
    recomputed = sorted(v.decode() for _, v, _ in records_after(bs, before))
    assert recomputed == ["P0-3", "P0-4", "P0-5", "SIDE-NEW"]


def test_incompatible_restart_names_the_reset_command_that_works(
    kafka_broker, spark, topic_name, app_config
):
    src, out = topic_name("in"), topic_name("out")
    bs = kafka_broker.bootstrap_servers
    ensure_topics(bs, {src: 1, out: 1})
    produce_values(bs, src, [("a", "x"), ("b", "y"), ("a", "z")])

    def counting(store):
        b = StreamsBuilder()
        b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.string()).group_by_key().count(
            name=store
        ).to_stream().to(out, key_serde=Serdes.string(), value_serde=Serdes.long())
        return b.build()

    config = app_config()
    run_to_caught_up(counting("counts"), config)
    changed = KafkaStreams(counting("counts-by-key"), config)
    with pytest.raises(TopologyError) as err:
        changed.start()
    command = (
        f"streamtable reset --application-id {config['application.id']} --bootstrap-servers "
        f"{bs} --input-topics {src} --state-dir {config['state.dir']}"
    )
    message = str(err.value)
    assert "not compatible with its checkpoint" in message
    assert "'store': 'counts'" in message and "'store': 'counts-by-key'" in message
    assert f"stop every instance and run `{command}`" in message
    # the suggested command works, and then the changed topology starts
    result = CliRunner().invoke(cli, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    before = KafkaAdmin(bs).end_offsets([out])
    run_to_caught_up(counting("counts-by-key"), config)
    assert {k: v for k, v, _ in records_after(bs, before)} == {
        b"a": (2).to_bytes(8, "big"),
        b"b": (1).to_bytes(8, "big"),
    }


def test_a_running_application_refuses_reset_and_a_second_instance(
    kafka_broker, spark, topic_name, app_config
):
    src, out = topic_name("in"), topic_name("out")
    bs = kafka_broker.bootstrap_servers
    ensure_topics(bs, {src: 1, out: 1})
    produce_values(bs, src, [(None, "hello kafka")])
    config = app_config()
    topology = wordcount.build_topology(src, out)
    app = KafkaStreams(topology, config)
    app.start()
    try:
        app.await_caught_up(timeout=CAUGHT_UP)
        result = reset(*base_args(config, src))
        assert result.exit_code == 1
        assert result.output.startswith(
            f"Error: Application {config['application.id']!r} is still running: its state "
            f"directory '{config['state.dir']}/{config['application.id']}' is locked by process "
        )
        assert "Stop the application first" in result.output
        second = KafkaStreams(topology, config)
        with pytest.raises(
            StateDirLockedError,
            match=r"is locked by another running instance \(pid \d+\)\. Only one instance may "
            r"use a state directory",
        ):
            second.start()
        with pytest.raises(StateDirLockedError, match=r"cleanup\(\) refused"):
            second.cleanup()
    finally:
        app.close()
    result = reset(*base_args(config, src))
    assert result.exit_code == 0, result.output


def test_reset_names_a_missing_input_topic(kafka_broker, topic_name, app_config):
    src = topic_name("in")
    ensure_topics(kafka_broker.bootstrap_servers, {src: 1})
    missing = topic_name("nope")
    config = app_config()
    result = reset(*base_args(config, f"{src},{missing}"))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: Input topic(s) [{missing!r}] given to --input-topics do not exist on "
        f"{kafka_broker.bootstrap_servers}. Check the names (they are the topics the application "
        "reads and should reprocess), then run `streamtable reset` again."
    )


def test_group_offsets_show_no_lag_after_caught_up_with_two_queries(
    kafka_broker, spark, topic_name, app_config
):
    src, out1, out2 = topic_name("in"), topic_name("out1"), topic_name("out2")
    bs = kafka_broker.bootstrap_servers
    ensure_topics(bs, {src: 3, out1: 1, out2: 1})
    produce_values(bs, src, [(f"k{i}", f"v{i}") for i in range(20)])
    b = StreamsBuilder()
    s = b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.string())
    s.to(out1, key_serde=Serdes.string(), value_serde=Serdes.string())
    s.filter(lambda k, v: v.endswith("1")).to(
        out2, key_serde=Serdes.string(), value_serde=Serdes.string()
    )
    config = app_config()
    run_to_caught_up(b.build(), config)
    ends = KafkaAdmin(bs).end_offsets([src])
    assert group_offsets(bs, config["application.id"], {src}) == ends
    assert len(ends) == 3 and sum(ends.values()) == 20
