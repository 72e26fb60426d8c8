"""Topologies cut into sub-topologies through repartition topics: real broker, real Spark.

Each case is a chain Kafka Streams runs as two or more sub-topologies; the expected results are
computed here from the input by the rule the topology states.
"""

import struct
from datetime import timedelta

import pytest
from confluent_kafka.admin import OffsetSpec

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams, Serdes, StreamsBuilder, TimeWindows
from streamtable.runtime.kafka_admin import KafkaAdmin

S, L = Serdes.string(), Serdes.long()


def long_bytes(n):
    return struct.pack(">q", n)


def as_long(b):
    return struct.unpack(">q", b)[0]


def final_table(records, decode_value=as_long):
    table = {}
    for k, v, _ in records:
        if v is None:
            table.pop(k.decode(), None)
        else:
            table[k.decode()] = decode_value(v)
    return table


def run(topology, config, timeout=timedelta(minutes=3), *, purge=False):
    app = KafkaStreams(topology, config)
    app.start()
    try:
        app.await_caught_up(timeout=timeout)
        if purge:  # one more purge after the last commit (the monitor's may have run before)
            app._purger.update(app.queries, force=True)
        return app.metrics()
    finally:
        app.close()


USERS = {"alice": "eu", "bob": "us", "carol": "eu", "dave": "apac"}


def clicks_input(n=300):
    """(user, clicks, ts) with out-of-order timestamps, an unknown user and null keys."""
    users = [*USERS, "erin"]  # erin has no region
    out = []
    for i in range(n):
        user = users[(i * 7) % len(users)]
        ts = 1_000 + ((i * 37) % 101) * 10  # out of order
        out.append((user, 1 + i % 5, ts))
    out.append((None, 9, 2_000))  # null key: dropped by the join
    return out


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_join_rekey_reduce_through_a_repartition_topic(
    kafka_broker, spark, topic_name, app_config, guarantee
):
    """Kafka Streams' canonical example: clicks joined with user regions, then per region."""
    bs = kafka_broker.bootstrap_servers
    clicks, regions, out = topic_name("clicks"), topic_name("regions"), topic_name("out")
    ensure_topics(bs, {clicks: 3, regions: 3, out: 1})
    produce_records(bs, regions, [(u.encode(), r.encode(), 1) for u, r in USERS.items()])
    data = clicks_input()
    produce_records(
        bs, clicks, [(None if u is None else u.encode(), long_bytes(c), ts) for u, c, ts in data]
    )

    b = StreamsBuilder()
    table = b.table(regions, key_serde=S, value_serde=S)
    (
        b.stream(clicks, key_serde=S, value_serde=L)
        .left_join(table, lambda c, region: (region or "UNKNOWN", c))
        .map(lambda user, rc: (None if rc[0] == "apac" else rc[0], rc[1]))  # apac: no key
        .group_by_key(key_serde=S, value_serde=L)
        .reduce(lambda a, b: a + b, name="clicks-per-region")
        .to_stream()
        .to(out, value_serde=L)
    )
    config = app_config(**{"processing.guarantee": guarantee, "repartition.purge.interval.ms": 0})
    metrics = run(b.build(), config, purge=True)

    expected: dict[str, int] = {}
    for user, c, _ in data:
        # a null-key click of a left join joins with null (KIP-962): region UNKNOWN
        region = USERS.get(user, "UNKNOWN")
        if region != "apac":
            expected[region] = expected.get(region, 0) + c
    assert final_table(read_topic(bs, out)) == expected
    # records re-keyed to null never reach the repartition topic (Kafka Streams' repartition
    # filter); streamtable counts them
    apac = sum(1 for user, _, _ in data if USERS.get(user) == "apac")
    assert metrics["dropped-records"].get("null_key", 0) == apac

    rep = f"{config['application.id']}-clicks-per-region-repartition"
    admin = KafkaAdmin(bs)
    assert admin.topic_partitions([rep]) == {rep: 3}  # the most partitions of its inputs
    # purged: every record below the committed offsets is gone
    low = admin.list_offsets({rep: 3}, OffsetSpec.earliest())
    high = admin.end_offsets([rep])
    assert sum(high.values()) > 0 and low == high


def test_windowed_count_then_rekeyed_max_three_levels(kafka_broker, spark, topic_name, app_config):
    """A three-level chain: windowed count -> to_stream -> re-key -> count of windows per key
    over a threshold -> re-key -> total. Each stage reads the records of the one before.
    """
    bs = kafka_broker.bootstrap_servers
    inp, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {inp: 2, out: 1})
    # 3 keys, 7 windows, in time order (the windows have no grace)
    events = sorted(
        ((f"k{i % 3}", 10_000 + 1_000 * (i % 7) + i) for i in range(60)), key=lambda e: e[1]
    )
    produce_records(bs, inp, [(k.encode(), b"x", ts) for k, ts in events])

    b = StreamsBuilder()
    (
        b.stream(inp, key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=1)))
        .count(name="per-window")
        .to_stream()
        .map(lambda wk, n: (wk.key, n))  # level 2: per key, the running window counts
        .group_by_key(key_serde=S, value_serde=L, name="by-key")
        .reduce(max, name="max-window")
        .to_stream()
        .map(lambda k, m: ("all", m))  # level 3: one key, each key's max as it grows
        .group_by_key(key_serde=S, value_serde=L, name="all")
        .reduce(max, name="max-all")
        .to_stream()
        .to(out, value_serde=L)
    )
    topology = b.build()
    assert str(topology.describe()).count("Sub-topology:") == 3
    run(topology, app_config())

    per_window: dict[tuple[str, int], int] = {}
    for k, ts in events:
        per_window[(k, ts // 1000)] = per_window.get((k, ts // 1000), 0) + 1
    assert final_table(read_topic(bs, out)) == {"all": max(per_window.values())}


def test_explicit_repartition_then_windowed_count(kafka_broker, spark, topic_name, app_config):
    """repartition(num_partitions=4) writes a four-partition topic; the windows downstream
    track the stream time of its partitions (once refused as a shuffle).
    """
    bs = kafka_broker.bootstrap_servers
    inp, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {inp: 1, out: 1})
    events = [(f"k{i % 5}", 10_000 + 100 * i) for i in range(50)]
    produce_records(bs, inp, [(k.encode(), b"v", ts) for k, ts in events])
    b = StreamsBuilder()
    (
        b.stream(inp, key_serde=S, value_serde=S)
        .repartition(name="spread", num_partitions=4)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=1), timedelta(hours=1)))
        .count(name="c")
        .to_stream()
        .to(out, key_serde=Serdes.time_windowed(S, 1000), value_serde=L)
    )
    config = app_config(**{"repartition.purge.interval.ms": 3_600_000})  # keep the records
    run(b.build(), config)
    expected: dict[tuple[str, int], int] = {}
    for k, ts in events:
        expected[(k, ts // 1000 * 1000)] = expected.get((k, ts // 1000 * 1000), 0) + 1
    got = {}
    for k, v, _ in read_topic(bs, out):
        got[(k[:-8].decode(), struct.unpack(">q", k[-8:])[0])] = as_long(v)
    assert got == expected
    rep = f"{config['application.id']}-spread-repartition"
    assert KafkaAdmin(bs).topic_partitions([rep]) == {rep: 4}
    # a repartition record carries its upstream record's timestamp (Kafka Streams' rule)
    written = sorted((k.decode(), ts) for k, _, ts in read_topic(bs, rep))
    assert written == sorted(events)


def test_driver_runs_sub_topologies_record_by_record(spark):
    """The TopologyTestDriver keeps the repartition topic in memory: every piped click comes
    out as its region's new sum before pipe_input returns, as in Kafka's driver.
    """
    from streamtable.testing import TopologyTestDriver

    b = StreamsBuilder()
    table = b.table("regions", key_serde=S, value_serde=S)
    (
        b.stream("clicks", key_serde=S, value_serde=L)
        .left_join(table, lambda c, region: (region or "UNKNOWN", c))
        .map(lambda user, rc: rc)
        .group_by_key(key_serde=S, value_serde=L)
        .reduce(lambda a, b: a + b, name="clicks-per-region")
        .to_stream()
        .to("out", value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        regions = driver.create_input_topic("regions", S, S)
        clicks = driver.create_input_topic("clicks", S, L)
        out = driver.create_output_topic("out", S, L)
        regions.pipe_key_value_list([("alice", "eu"), ("bob", "us")])
        for user, n in [("alice", 1), ("bob", 2), ("alice", 3), ("erin", 4)]:
            clicks.pipe_input(user, n)
        assert out.read_key_values_to_list() == [
            ("eu", 1),
            ("us", 2),
            ("eu", 4),
            ("UNKNOWN", 4),
        ]
        assert driver.get_key_value_store("clicks-per-region").get("eu") == 4


def test_existing_repartition_topic_with_other_partition_count_is_refused(
    kafka_broker, spark, topic_name, app_config
):
    """Kafka Streams refuses an existing repartition topic whose partition count differs; so
    does streamtable, before any query starts, and says how to fix it.
    """
    from streamtable.errors import TopologyError

    bs = kafka_broker.bootstrap_servers
    inp, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {inp: 1, out: 1})
    config = app_config()
    rep = f"{config['application.id']}-spread-repartition"
    ensure_topics(bs, {rep: 2})
    b = StreamsBuilder()
    b.stream(inp, key_serde=S, value_serde=S).repartition(name="spread", num_partitions=3).to(out)
    app = KafkaStreams(b.build(), config)
    with pytest.raises(TopologyError) as e:
        app.start()
    msg = str(e.value)
    assert f"Repartition topic {rep!r} has 2 partitions, but the topology needs 3" in msg
    assert "streamtable reset" in msg
    assert app.queries == []


def test_reset_deletes_repartition_topics_and_the_next_run_recomputes(
    kafka_broker, spark, topic_name, app_config
):
    """`streamtable reset` deletes the repartition topic (an internal topic of the app) and
    keeps no position in it: the next run recomputes from the input through a new topic.
    """
    from streamtable.errors import TopologyError
    from streamtable.runtime.reset import reset_application

    bs = kafka_broker.bootstrap_servers
    inp, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {inp: 2, out: 1})
    produce_records(bs, inp, [(f"k{i % 4}".encode(), long_bytes(i), 10_000 + i) for i in range(40)])

    def topology():
        b = StreamsBuilder()
        (
            b.stream(inp, key_serde=S, value_serde=L)
            .group_by_key()
            .reduce(lambda a, b: a + b, name="per-key")
            .to_stream()
            .map(lambda k, total: ("all", total))
            .group_by_key(key_serde=S, value_serde=L, name="all")
            .reduce(max, name="max")
            .to_stream()
            .to(out, value_serde=L)
        )
        return b.build()

    config = app_config()
    rep = f"{config['application.id']}-all-repartition"
    expected = {"all": max(sum(i for i in range(40) if i % 4 == k) for k in range(4))}
    run(topology(), config)
    assert final_table(read_topic(bs, out)) == expected
    assert rep in KafkaAdmin(bs).topic_partitions([rep])

    result = reset_application(config, [inp])
    assert rep in result.deleted_topics
    assert rep not in result.positions  # nothing kept for a topic that starts empty again
    assert rep not in KafkaAdmin(bs).topic_partitions([rep])

    n_before = len(read_topic(bs, out))
    run(topology(), config)
    rerun = read_topic(bs, out)[n_before:]
    assert rerun, "the run after the reset wrote nothing"
    assert final_table(rerun) == expected

    # deleted behind the application's back, after its checkpoint read it: refused, not
    # recreated empty (the records the reading query had not processed would be lost)
    KafkaAdmin(bs).delete_topics([rep])
    with pytest.raises(
        TopologyError,
        match=rf"Repartition topic '{rep}' does not exist, but the application's checkpoint "
        r"has read it up to partition 0: offset \d+.*Reset the application \(`streamtable "
        r"reset`",
    ):
        app = KafkaStreams(topology(), config)
        app.start()
    assert app.queries == []
