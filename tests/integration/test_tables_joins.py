"""Tables and joins end to end: real broker, real Spark, final tables checked per key."""

import struct
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_records, read_topic
from streamtable import JoinWindows, KafkaStreams, Serdes, StreamsBuilder
from streamtable.errors import TopologyError

S = Serdes.string()


def rec(key, value, ts):
    return (key.encode() if key else None, None if value is None else value.encode(), ts)


def final_table(records, decode=lambda b: b.decode()):
    """The table a compacted topic holds: the last value per key, tombstones delete."""
    table = {}
    for k, v, _ in records:
        if v is None:
            table.pop(k.decode(), None)
        else:
            table[k.decode()] = decode(v)
    return table


def run(topology, config, timeout=timedelta(minutes=3)):
    app = KafkaStreams(topology, config)
    app.start()
    try:
        app.await_caught_up(timeout=timeout)
        return app.metrics()
    finally:
        app.close()


# The grouped-table walkthrough of the Kafka Streams DSL guide (adder +len, subtractor -len).
WALKTHROUGH = [
    rec("alice", "E", 1),
    rec("bob", "A", 2),
    rec("charlie", "A", 3),
    rec("alice", "A", 4),
    rec("charlie", None, 5),
    rec(None, "E", 6),
    rec("bob", "E", 7),
]


@pytest.mark.parametrize("per_trigger", [None, 1])
def test_table_aggregate_subtractor_regroups(
    kafka_broker, spark, topic_name, app_config, per_trigger
):
    bs = kafka_broker.bootstrap_servers
    users, lengths, counts = topic_name("users"), topic_name("lengths"), topic_name("counts")
    ensure_topics(bs, {users: 2, lengths: 1, counts: 1})
    produce_records(bs, users, WALKTHROUGH)
    b = StreamsBuilder()
    table = b.table(users, key_serde=S, value_serde=S, name="users-store")
    grouped = table.group_by(lambda user, region: (region, user), key_serde=S)
    grouped.aggregate(
        lambda: 0,
        lambda region, user, agg: agg + len(user),
        lambda region, user, agg: agg - len(user),
        name="lengths",
    ).to_stream().to(lengths, value_serde=Serdes.long())
    grouped_again = b.table(users, key_serde=S, value_serde=S, name="users-store-2").group_by(
        lambda user, region: (region, user), key_serde=S, name="regroup-2"
    )
    grouped_again.count(name="region-counts").to_stream().to(counts, value_serde=Serdes.long())
    extra = {} if per_trigger is None else {"streamtable.max.offsets.per.trigger": per_trigger}
    metrics = run(b.build(), app_config(**extra))
    as_long = lambda v: struct.unpack(">q", v)[0]  # noqa: E731
    # step 7 of the walkthrough: A = alice (5), E = bob (3)
    assert final_table(read_topic(bs, lengths), as_long) == {"A": 5, "E": 3}
    # E had alice, then nobody (count 0 is emitted as 0, not deleted), then bob
    assert final_table(read_topic(bs, counts), as_long) == {"A": 1, "E": 1}
    assert metrics["dropped-records"].get("null_key") == 2  # the (null, E) record, per table


LEFT = [
    rec("k", "A", 3),
    rec("k", "B", 5),
    rec("k", None, 7),
    rec("k", "C", 9),
    rec("k", None, 12),
    rec("k", "D", 15),
]
RIGHT = [
    rec("k", "a", 4),
    rec("k", "b", 6),
    rec("k", None, 8),
    rec("k", "c", 10),
    rec("k", None, 11),
    rec("k", "d", 14),
]


@pytest.mark.parametrize(
    ("method", "expected"),
    [("join", {"k": "D|d"}), ("left_join", {"k": "D|d"}), ("outer_join", {"k": "D|d"})],
)
def test_table_table_join_final_table(
    kafka_broker, spark, topic_name, app_config, method, expected
):
    bs = kafka_broker.bootstrap_servers
    lt, rt, out, partial = topic_name("l"), topic_name("r"), topic_name("o"), topic_name("p")
    ensure_topics(bs, {lt: 2, rt: 2, out: 1, partial: 1})
    produce_records(bs, lt, [*LEFT, rec("only-left", "L", 1)])
    produce_records(bs, rt, [*RIGHT, rec("only-right", "R", 1)])
    b = StreamsBuilder()
    left = b.table(lt, key_serde=S, value_serde=S)
    right = b.table(rt, key_serde=S, value_serde=S)
    joined = getattr(left, method)(right, lambda lv, rv: f"{lv}|{rv}")
    joined.to_stream().to(out, value_serde=S)
    run(b.build(), app_config())
    want = dict(expected)
    if method in ("left_join", "outer_join"):
        want["only-left"] = "L|None"
    if method == "outer_join":
        want["only-right"] = "None|R"
    assert final_table(read_topic(bs, out)) == want


def test_string_tables_join_without_a_python_source_stage(
    kafka_broker, spark, topic_name, app_config
):
    """String and Bytes serdes accept any bytes, so the tables' raw records go straight to
    the join's pack: no Python stage deserializes them first; and the kernel serializes its
    results with the sink's serde, so none encodes them after. The results are as with one:
    invalid UTF-8 reaches the joiner replaced as Java's String deserializer does, and a
    null-key record is dropped and counted (Kafka Streams' ``KTableSource``).
    """
    bs = kafka_broker.bootstrap_servers
    lt, rt, out = topic_name("l"), topic_name("r"), topic_name("o")
    ensure_topics(bs, {lt: 2, rt: 2, out: 1})
    produce_records(bs, lt, [(b"k", b"bad \xff utf-8", 1), (None, b"no key", 2)])
    produce_records(bs, rt, [rec("k", "r", 1)])
    b = StreamsBuilder()
    left = b.table(lt, key_serde=S, value_serde=S)
    right = b.table(rt, key_serde=S, value_serde=S)
    left.join(right, lambda lv, rv: f"{lv}|{rv}").to_stream().to(out, value_serde=S)
    app = KafkaStreams(b.build(), app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
        (query,) = app.queries
        plan = query._jsq.streamingQuery().lastExecution().analyzed().toString()
        dropped = [
            m.value
            for m in app.metrics()["metrics"]
            if m.name == "dropped-records-total" and m.tags.get("reason") == "null_key"
        ]
    finally:
        app.close()
    # no record stage at all: the join's kernel emits its results in the sink's serde
    assert plan.count("RecordStage(") == 0, plan
    assert plan.count("KernelPack(") == 2, plan
    assert final_table(read_topic(bs, out)) == {"k": "bad \ufffd utf-8|r"}
    assert dropped == [1]


def test_stream_table_join_is_temporal(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    st, tt, out, lout = (topic_name(t) for t in ("s", "t", "o", "lo"))
    ensure_topics(bs, {st: 2, tt: 2, out: 1, lout: 1})
    # table updates out of timestamp order: v20 is written before v10
    produce_records(
        bs, tt, [rec("k", "v20", 20), rec("k", "v10", 10), rec("k", None, 40), rec("j", "j5", 5)]
    )
    produce_records(
        bs,
        st,
        [
            rec("k", "s5", 5),
            rec("k", "s15", 15),
            rec("k", "s25", 25),
            rec("k", "s45", 45),
            rec("j", "s7", 7),
            rec("x", "s9", 9),
        ],
    )
    b = StreamsBuilder()
    stream = b.stream(st, key_serde=S, value_serde=S)
    table = b.table(tt, key_serde=S, value_serde=S)
    stream.join(table, lambda s, t: f"{s}+{t}").to(out, value_serde=S)
    stream.left_join(table, lambda s, t: f"{s}+{t}").to(lout, value_serde=S)
    run(b.build(), app_config())
    # (output timestamps are the write time: the 4.2.0 Kafka sink cannot set them)
    inner = sorted(v.decode() for _, v, _ in read_topic(bs, out))
    assert inner == ["s15+v10", "s25+v20", "s7+j5"]
    left = sorted(v.decode() for _, v, _ in read_topic(bs, lout))
    assert left == ["s15+v10", "s25+v20", "s45+None", "s5+None", "s7+j5", "s9+None"]


def test_a_global_table_is_read_in_full_under_auto_offset_reset_latest(
    kafka_broker, spark, topic_name, app_config
):
    # GlobalStateManagerImpl restores a global table from the beginning whatever
    # auto.offset.reset says; the stream starts at its end (orders produced after the start)
    bs = kafka_broker.bootstrap_servers
    orders, customers, out = topic_name("orders"), topic_name("customers"), topic_name("o")
    ensure_topics(bs, {orders: 1, customers: 1, out: 1})
    produce_records(bs, customers, [rec("c1", "Ann", 1), rec("c2", "Bob", 1)])
    produce_records(bs, orders, [rec("o0", "c1:old", 2)])  # before the start: not read
    b = StreamsBuilder()
    cust = b.global_table(customers, key_serde=S, value_serde=S)
    b.stream(orders, key_serde=S, value_serde=S).join(
        cust, lambda _k, order: order.split(":")[0], lambda order, name: f"{name}:{order}"
    ).to(out, value_serde=S)
    with KafkaStreams(b.build(), app_config(**{"auto.offset.reset": "latest"})) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
        produce_records(bs, orders, [rec("o1", "c1:pen", 10), rec("o2", "c2:ink", 11)])
        app.await_caught_up(timeout=timedelta(minutes=3))
    got = sorted(v.decode() for _, v, _ in read_topic(bs, out))
    assert got == ["Ann:c1:pen", "Bob:c2:ink"]


def test_a_global_table_is_loaded_in_full_before_rate_limited_stream_batches(
    kafka_broker, spark, topic_name, app_config
):
    """Kafka Streams bootstraps a global table before it processes a record; with
    streamtable.max.offsets.per.trigger=2 the table used to come 2 records per micro-batch,
    and orders for customers not read yet were dropped by the inner join.
    """
    bs = kafka_broker.bootstrap_servers
    orders, customers, out = topic_name("orders"), topic_name("customers"), topic_name("o")
    ensure_topics(bs, {orders: 1, customers: 1, out: 1})
    produce_records(bs, customers, [rec(f"c{i}", f"name{i}", 1) for i in range(12)])
    # the first orders are for the customers read last
    produce_records(bs, orders, [rec(f"o{i}", f"c{11 - i}", 2 + i) for i in range(12)])
    b = StreamsBuilder()
    cust = b.global_table(customers, key_serde=S, value_serde=S)
    b.stream(orders, key_serde=S, value_serde=S).join(
        cust, lambda _k, customer: customer, lambda customer, name: name
    ).to(out, value_serde=S)
    config = app_config(**{"streamtable.max.offsets.per.trigger": 2})
    with KafkaStreams(b.build(), config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
    got = sorted(v.decode() for _, v, _ in read_topic(bs, out))
    assert got == sorted(f"name{i}" for i in range(12))


def test_stream_global_table_join_by_selected_key(kafka_broker, spark, topic_name, app_config):
    """The lookup key decides, never the record's own key (a null-key order is looked up);
    a null lookup key drops the record, except a null-key one in a left join (KIP-962).
    """
    bs = kafka_broker.bootstrap_servers
    orders, customers = topic_name("orders"), topic_name("customers")
    out, lout = topic_name("o"), topic_name("lo")
    ensure_topics(bs, {orders: 3, customers: 1, out: 1, lout: 1})
    produce_records(bs, customers, [rec("c1", "Ann", 1), rec("c2", "Bob", 1)])
    produce_records(
        bs,
        orders,
        [
            rec("o1", "c1:pen", 10),
            rec("o2", "c2:ink", 11),
            rec("o3", "c9:cup", 12),
            rec(None, "c1:mug", 13),
            rec(None, "-:cap", 14),
            rec("o4", "-:hat", 15),
        ],
    )
    b = StreamsBuilder()
    cust = b.global_table(customers, key_serde=S, value_serde=S)
    stream = b.stream(orders, key_serde=S, value_serde=S)

    def customer(_key, order):
        return None if order.startswith("-") else order.split(":")[0]

    def bought(order, name):
        return f"{name} bought {order.split(':')[1]}"

    stream.join(cust, customer, bought).to(out, value_serde=S)
    stream.left_join(cust, customer, bought).to(lout, value_serde=S)
    metrics = run(b.build(), app_config())

    def got(topic):
        return [(k and k.decode(), v.decode()) for k, v, _ in read_topic(bs, topic)]

    key = lambda kv: (kv[0] or "", kv[1])  # noqa: E731
    assert sorted(got(out), key=key) == [
        (None, "Ann bought mug"),
        ("o1", "Ann bought pen"),
        ("o2", "Bob bought ink"),
    ]
    assert sorted(got(lout), key=key) == [
        (None, "Ann bought mug"),
        (None, "None bought cap"),
        ("o1", "Ann bought pen"),
        ("o2", "Bob bought ink"),
        ("o3", "None bought cup"),
    ]
    # null lookup keys: "-:cap" in the inner join, "-:hat" in both
    assert metrics["dropped-records"]["null_lookup_key"] == 3


def test_stream_stream_windowed_join(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    lt, rt, out = topic_name("l"), topic_name("r"), topic_name("o")
    ensure_topics(bs, {lt: 1, rt: 1, out: 1})
    produce_records(bs, lt, [rec("k", "A", 1000), rec("k", "B", 30_000)])
    produce_records(bs, rt, [rec("k", "a", 3000), rec("k", "late-match", 20_000)])
    b = StreamsBuilder()
    ls = b.stream(lt, key_serde=S, value_serde=S)
    rs = b.stream(rt, key_serde=S, value_serde=S)
    window = JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=5))
    ls.join(rs, lambda lv, rv: f"{lv}{rv}", window).to(out, value_serde=S)
    run(b.build(), app_config())
    assert sorted(v.decode() for _, v, _ in read_topic(bs, out)) == ["Aa"]


def test_stream_stream_left_join_joins_a_null_key_record_with_none_at_once(
    kafka_broker, spark, topic_name, app_config
):
    """KIP-962 (Kafka Streams 3.7+): a left join's left record with a null key and a value is
    emitted at once as joiner(value, None); a right one takes no part, as in an inner join.
    """
    bs = kafka_broker.bootstrap_servers
    lt, rt, out = topic_name("l"), topic_name("r"), topic_name("o")
    ensure_topics(bs, {lt: 1, rt: 1, out: 1})
    produce_records(bs, lt, [rec("k", "A", 1000), rec(None, "N", 2000)])
    produce_records(bs, rt, [rec("k", "a", 3000), rec(None, "n", 2500)])
    b = StreamsBuilder()
    ls = b.stream(lt, key_serde=S, value_serde=S)
    rs = b.stream(rt, key_serde=S, value_serde=S)
    window = JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=5))
    ls.left_join(rs, lambda lv, rv: f"{lv}{rv}", window).to(out, value_serde=S)
    run(b.build(), app_config())
    written = [(k, v.decode()) for k, v, _ in read_topic(bs, out)]
    assert sorted(written, key=lambda r: r[1]) == [(b"k", "Aa"), (None, "NNone")]


def test_join_of_non_copartitioned_topics_is_refused(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    st, tt, out = topic_name("s"), topic_name("t"), topic_name("o")
    ensure_topics(bs, {st: 3, tt: 2, out: 1})
    b = StreamsBuilder()
    b.stream(st, key_serde=S, value_serde=S).join(
        b.table(tt, key_serde=S, value_serde=S), lambda s, t: s
    ).to(out, value_serde=S)
    app = KafkaStreams(b.build(), app_config())
    with pytest.raises(TopologyError, match=r"co-partitioned.*\(3 partitions\).*\(2 partitions\)"):
        app.start()
    app.close()
