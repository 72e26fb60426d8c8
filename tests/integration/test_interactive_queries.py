"""Interactive queries of named stores while the application runs: real broker, real Spark.

The expected contents are computed here from the input; reads wait for the store's position
to cover the input produced so far (never on a fixed sleep).
"""

from __future__ import annotations

import collections
import struct
from datetime import timedelta

import pytest

from _support import end_position, ensure_topics, produce_records, read_topic, wait_until
from streamtable import (
    KafkaStreams,
    Position,
    PositionBound,
    QueryableStoreTypes,
    Reducers,
    Serdes,
    StoreQueryParameters,
    StreamsBuilder,
)
from streamtable.errors import InvalidStateStoreException, TopologyError
from streamtable.runtime.kafka_admin import KafkaAdmin

S, L = Serdes.string(), Serdes.long()
KV = QueryableStoreTypes.key_value_store()


def clicks(n, start):
    """(user, amount, ts): users u00..u11, ``n`` records from timestamp ``start``."""
    return [(f"u{i % 12:02d}", 1 + i % 4, start + i) for i in range(n)]


def encode(rows):
    return [(u.encode(), struct.pack(">q", a), ts) for u, a, ts in rows]


@pytest.mark.parametrize("guarantee", ["exactly_once_v2"])
def test_named_stores_answer_queries_while_the_application_runs(
    kafka_broker, spark, topic_name, app_config, guarantee
):
    bs = kafka_broker.bootstrap_servers
    src, profiles, out = topic_name("clicks"), topic_name("profiles"), topic_name("out")
    ensure_topics(bs, {src: 2, profiles: 2, out: 1})
    first = clicks(120, 1_000)
    produce_records(bs, src, encode(first))
    produce_records(
        bs, profiles, [(f"u{i:02d}".encode(), f"level-{i}".encode(), 1) for i in range(6)]
    )

    b = StreamsBuilder()
    stream = b.stream(src, key_serde=S, value_serde=L)
    grouped = stream.group_by_key(key_serde=S, value_serde=L)
    grouped.count(name="click-counts").to_stream().to(out, key_serde=S, value_serde=L)
    grouped.reduce(lambda a, v: a + v, name="amount-totals").to_stream().to(
        out, key_serde=S, value_serde=L
    )
    table = b.table(profiles, key_serde=S, value_serde=S, name="profiles")
    stream.join(table, lambda amount, level: f"{level}:{amount}").to(
        out, key_serde=S, value_serde=S
    )
    grouped.count().to_stream().to(out, key_serde=S, value_serde=L)  # unnamed: not queryable
    # named, but read by nothing downstream: materialized anyway, as in Kafka Streams
    b.table(profiles, key_serde=S, value_serde=S, name="profiles-only")
    grouped.count(name="bare-counts")
    config = app_config(
        **{
            "processing.guarantee": guarantee,
            # Java-client keys (Spark's source and sink take them): the store replica's and
            # the transactional writers' librdkafka clients must leave them out
            "consumer.default.api.timeout.ms": 30000,
            "consumer.request.timeout.ms": 15000,
            "producer.buffer.memory": 33554432,
        }
    )
    app = KafkaStreams(b.build(), config)

    with pytest.raises(InvalidStateStoreException, match="not RUNNING. Call start"):
        app.store(StoreQueryParameters.from_name_and_type("click-counts", KV))
    app.start()
    try:
        counts = app.store(StoreQueryParameters.from_name_and_type("click-counts", KV))
        totals = app.store(StoreQueryParameters.from_name_and_type("amount-totals", KV))
        levels = app.store(StoreQueryParameters.from_name_and_type("profiles", KV))
        bound = PositionBound.at(end_position(bs, src, 2))
        reached = counts.wait_for(bound, timeout=timedelta(minutes=3))
        assert reached.dominates(bound.position)
        totals.wait_for(bound, timeout=timedelta(minutes=1))
        levels.wait_for(
            PositionBound.at(end_position(bs, profiles, 2)), timeout=timedelta(minutes=1)
        )

        want_counts = collections.Counter(u for u, _, _ in first)
        want_totals = collections.Counter()
        for u, a, _ in first:
            want_totals[u] += a
        assert counts.all() == sorted(want_counts.items())
        assert dict(totals.all()) == dict(want_totals)
        assert counts.get("u03") == want_counts["u03"]
        assert counts.get("nobody") is None
        assert counts.approximate_num_entries() == 12
        assert counts.range("u02", "u05") == [
            (f"u0{i}", want_counts[f"u0{i}"]) for i in (2, 3, 4, 5)
        ]
        assert counts.reverse_range("u02", "u04") == [
            (f"u0{i}", want_counts[f"u0{i}"]) for i in (4, 3, 2)
        ]
        assert counts.range("u05", "u02") == []  # inverted: empty, as in Kafka Streams
        assert [k for k, _ in counts.prefix_scan("u1")] == ["u10", "u11"]
        assert [k for k, _ in counts.reverse_all()] == sorted(want_counts, reverse=True)
        assert levels.all() == [(f"u{i:02d}", f"level-{i}") for i in range(6)]
        bare = app.store(StoreQueryParameters.from_name_and_type("bare-counts", KV))
        bare.wait_for(bound, timeout=timedelta(minutes=1))
        assert bare.all() == sorted(want_counts.items())
        only = app.store(StoreQueryParameters.from_name_and_type("profiles-only", KV))
        only.wait_for(PositionBound.at(end_position(bs, profiles, 2)), timeout=timedelta(minutes=1))
        assert only.all() == levels.all()

        # more input: a profile deleted (tombstone), one changed, more clicks
        second = clicks(60, 5_000)
        produce_records(bs, profiles, [(b"u01", None, 2), (b"u02", b"level-99", 2)])
        produce_records(bs, src, encode(second))
        # await_caught_up returns once the stores reflect the input too: no wait_for needed
        app.await_caught_up(timeout=timedelta(minutes=2))
        assert counts.position().dominates(end_position(bs, src, 2))
        assert levels.position().dominates(end_position(bs, profiles, 2))
        want_counts.update(u for u, _, _ in second)
        assert counts.all() == sorted(want_counts.items())
        assert levels.get("u01") is None
        assert levels.get("u02") == "level-99"
        assert levels.approximate_num_entries() == 5

        # queries that cannot be answered say why
        unnamed = [n for n in app.topology.store_names if n.startswith("KSTREAM-AGGREGATE")]
        with pytest.raises(InvalidStateStoreException, match="only stores the topology names"):
            app.store(StoreQueryParameters.from_name_and_type(unnamed[0], KV))
        with pytest.raises(InvalidStateStoreException, match="has no store 'nope'.*click-counts"):
            app.store(StoreQueryParameters.from_name_and_type("nope", KV))
        with pytest.raises(Exception, match="did not reach position"):
            counts.wait_for(
                PositionBound.at(Position.empty().with_component(src, 0, 10**9)),
                timeout=timedelta(seconds=1),
            )
    finally:
        app.close()

    admin = KafkaAdmin(bs)
    changelogs = admin.topic_partitions(
        [f"{app.config.application_id}-{s}-changelog" for s in ("click-counts", "profiles")]
    )
    assert set(changelogs.values()) == {2}, changelogs  # one partition per input partition


def _records_by_partition(bootstrap_servers, topic):
    """``{partition: [(key, value, ts)]}`` of ``topic``'s committed records."""
    from confluent_kafka import Consumer, TopicPartition

    partitions = KafkaAdmin(bootstrap_servers).topic_partitions([topic])[topic]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        out = {}
        for p in range(partitions):
            end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            consumer.assign([TopicPartition(topic, p, 0)])
            records = out.setdefault(p, [])

            def read_to_end(p=p, end=end, records=records):
                for m in consumer.consume(num_messages=1000, timeout=0.5):
                    if not m.error():
                        records.append((m.key(), m.value(), m.timestamp()[1]))
                # a transactional partition ends with a commit marker no message reaches
                return end == 0 or consumer.position([TopicPartition(topic, p)])[0].offset >= end

            wait_until(read_to_end, 60, f"{topic} partition {p} read to offset {end}", 0)
        return out
    finally:
        consumer.close()


def _plan_and_store(topology, config, store):
    """Run ``topology`` until caught up: its one query's analyzed plan, and ``store.all()``."""
    app = KafkaStreams(topology, config)
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
        (query,) = app.queries
        plan = query._jsq.streamingQuery().lastExecution().analyzed().toString()
        return plan, app.store(StoreQueryParameters.from_name_and_type(store, KV)).all()
    finally:
        app.close()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_count_of_a_string_topic_writes_its_changelog_with_the_sink_and_no_python(
    kafka_broker, spark, topic_name, app_config, guarantee
):
    """A native count whose updates go straight to a sink: the sink's producer writes the
    store's changelog beside the output (no Python stage writes it), and the raw String records
    reach the count without a Python stage either. The changelog is Kafka Streams': every
    key's latest count as an 8-byte Long in the key's murmur2 partition (under exactly-once
    with the update's record timestamp); the store answers from it; null keys and values are
    not counted.
    """
    from streamtable.serde.murmur2 import default_partition

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("words"), topic_name("counts")
    ensure_topics(bs, {src: 2, out: 1})
    rows = [(f"w{i % 5}".encode(), b"x", 1_000 + i) for i in range(40)]
    produce_records(bs, src, [*rows, (b"w0", None, 2_000), (None, b"x", 2_001)])
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=S).group_by_key().count(name="counts").to_stream().to(
        out, key_serde=S, value_serde=L
    )
    config = app_config(**{"processing.guarantee": guarantee})
    plan, stored = _plan_and_store(b.build(), config, "counts")
    assert "MapInArrow" not in plan and "PythonUDF" not in plan, plan
    want = {f"w{i}": 8 for i in range(5)}
    assert stored == sorted(want.items())
    latest_ts = {f"w{i}": max(ts for k, _, ts in rows if k == f"w{i}".encode()) for i in range(5)}

    changelog = _records_by_partition(bs, f"{config['application.id']}-counts-changelog")
    assert len(changelog) == 2
    final = {}
    for partition, records in changelog.items():
        for key, value, ts in records:
            assert partition == default_partition(key, 2), (key, partition)
            final[key.decode()] = struct.unpack(">q", value)[0]
            if guarantee == "exactly_once_v2":
                assert ts <= latest_ts[key.decode()]
    assert final == want
    if guarantee == "exactly_once_v2":
        last = {k.decode(): ts for records in changelog.values() for k, _, ts in records}
        assert last == latest_ts
    outputs = {k.decode(): struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, out)}
    assert outputs == want


def test_a_python_reduce_emits_in_the_sinks_serde_so_neither_sink_nor_changelog_runs_python(
    kafka_broker, spark, topic_name, app_config
):
    """A Python ``reduce`` whose updates go straight to a sink emits them in the sink's serde:
    with the store's serde the same, the sink writes them and the changelog as they are (no
    Python stage after the fold). The store, the changelog and the output hold the maxima.
    """
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    rows = [(f"k{i % 3}".encode(), str((i * 7) % 23).encode(), 1_000 + i) for i in range(30)]
    produce_records(bs, src, rows)
    b = StreamsBuilder()
    (
        b.stream(src, key_serde=S, value_serde=S)
        .map_values(int)
        .group_by_key(key_serde=S, value_serde=L)
        .reduce(max, name="latest")
        .to_stream()
        .to(out, key_serde=S, value_serde=L)
    )
    config = app_config()
    plan, stored = _plan_and_store(b.build(), config, "latest")
    # one Python stage (map_values) before the fold's pack; none after it
    assert plan.count("RecordStage(") == 1 and "ChangelogWriter" not in plan, plan
    want = {}
    for k, v, _ in rows:
        want[k.decode()] = max(want.get(k.decode(), 0), int(v))
    assert stored == sorted(want.items())
    changelog = _records_by_partition(bs, f"{config['application.id']}-latest-changelog")
    latest = {k.decode(): struct.unpack(">q", v)[0] for r in changelog.values() for k, v, _ in r}
    assert latest == want
    outputs = {k.decode(): struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, out)}
    assert outputs == want


def test_a_reduce_written_in_another_serde_than_its_store_logs_the_aggregates_themselves(
    kafka_broker, spark, topic_name, app_config
):
    """The sink's serde (Double) differs from the store's (Long): the fold keeps its updates
    pickled, the changelog gets each aggregate in the store's serde, the sink in its own.
    """
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 1, out: 1})
    produce_records(bs, src, [(b"k", struct.pack(">q", v), 1_000 + v) for v in (3, 9, 4)])
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=L).group_by_key(key_serde=S, value_serde=L).reduce(
        max, name="latest"
    ).to_stream().to(out, key_serde=S, value_serde=Serdes.double())
    config = app_config()
    _, stored = _plan_and_store(b.build(), config, "latest")
    assert stored == [("k", 9)]
    changelog = _records_by_partition(bs, f"{config['application.id']}-latest-changelog")
    assert [v for r in changelog.values() for _, v, _ in r][-1] == struct.pack(">q", 9)
    assert [v for _, v, _ in read_topic(bs, out)][-1] == struct.pack(">d", 9.0)


def test_a_changelog_topic_with_another_partition_count_is_refused_with_the_reset_command(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("clicks"), topic_name("out")
    config = app_config()
    changelog = f"{config['application.id']}-click-counts-changelog"
    ensure_topics(bs, {src: 2, out: 1, changelog: 1})
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=L).group_by_key().count(
        name="click-counts"
    ).to_stream().to(out, key_serde=S, value_serde=L)
    app = KafkaStreams(b.build(), config)
    with pytest.raises(
        TopologyError,
        match=rf"Changelog topic '{changelog}' of store 'click-counts' has 1 partitions, but the "
        r"topology needs 2 .* Kafka Streams refuses such a topic too: reset the application "
        r"\(`streamtable reset`",
    ):
        app.start()
    assert app.state.value != "RUNNING"


@pytest.mark.parametrize(
    ("reducer", "serde", "cast", "fold"),
    [
        (Reducers.max(), L, "bigint", max),
        (Reducers.sum(), Serdes.integer(), "int", lambda a, v: a + v),
    ],
    ids=["max-long", "sum-integer"],
)
def test_a_built_in_reducer_runs_as_sparks_aggregation_with_the_python_folds_results(
    kafka_broker, spark, topic_name, app_config, reducer, serde, cast, fold
):
    """A built-in reducer over values Spark reads (a column expression's cast to the grouping's
    Long or Integer serde) runs with no Python stage at all; the store, its changelog (Kafka
    Streams' format: the serde's bytes in the key's murmur2 partition, each key's last update
    with the key's latest record timestamp under exactly-once) and the output hold what the
    Python fold gives, negative aggregates included; null keys and values are skipped.
    """
    from streamtable import functions as F
    from streamtable.serde.murmur2 import default_partition

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    rows = [(f"k{i % 4}".encode(), str((i * 37) % 101 - 50).encode(), 1_000 + i) for i in range(60)]
    rows += [(b"neg", str(-3 - i % 5).encode(), 1_100 + i) for i in range(7)]
    produce_records(bs, src, [*rows, (b"k0", None, 2_000), (None, b"7", 2_001)])
    b = StreamsBuilder()
    (
        b.stream(src, key_serde=S, value_serde=S)
        .map_values(F.col("value").cast(cast))
        .group_by_key(key_serde=S, value_serde=serde)
        .reduce(reducer, name="reduced")
        .to_stream()
        .to(out, key_serde=S, value_serde=serde)
    )
    config = app_config(**{"processing.guarantee": "exactly_once_v2"})
    plan, stored = _plan_and_store(b.build(), config, "reduced")
    assert "MapInArrow" not in plan and "TransformWithState" not in plan, plan
    assert "PythonUDF" not in plan, plan
    want: dict[str, int] = {}
    latest_ts: dict[str, int] = {}
    for k, v, ts in rows:
        key = k.decode()
        want[key] = int(v) if key not in want else fold(want[key], int(v))
        latest_ts[key] = max(latest_ts.get(key, 0), ts)
    assert want["neg"] < 0
    assert stored == sorted(want.items())
    changelog = _records_by_partition(bs, f"{config['application.id']}-reduced-changelog")
    final, last_ts = {}, {}
    for partition, records in changelog.items():
        for key, value, ts in records:
            assert partition == default_partition(key, 2), (key, partition)
            final[key.decode()] = serde.deserialize(value)
            last_ts[key.decode()] = ts
    assert final == want
    assert last_ts == latest_ts
    outputs = {k.decode(): serde.deserialize(v) for k, v, _ in read_topic(bs, out)}
    assert outputs == want


def test_a_replica_answers_only_once_its_changelog_is_read_to_the_end(kafka_broker):
    """After a restart the replica reads each changelog from its beginning (a real broker and
    changelog here, no Spark): every read before it has reached the end the changelog had at
    its start raises, as Kafka Streams does for a store whose task is restoring; no read
    answers from part of the store.
    """
    from streamtable.compiler.changelog import ChangelogInfo
    from streamtable.state.queries import ReadOnlyKeyValueStore
    from streamtable.state.replica import StoreReplica

    bs = kafka_broker.bootstrap_servers
    topic = "iq-restore-app-totals-changelog"
    ensure_topics(bs, {topic: 2}, recreate=True)
    records = [(f"k{i % 40_000:05d}".encode(), str(i).encode(), 1) for i in range(160_000)]
    records += [(f"k{i:05d}".encode(), None, 2) for i in range(0, 40_000, 7)]  # tombstones
    produce_records(bs, topic, records)
    expected = {}
    for key, value, _ in records:
        if value is None:
            expected.pop(key.decode(), None)
        else:
            expected[key.decode()] = value.decode()

    info = ChangelogInfo("totals", topic, 2, "key_value", S, S, "q")
    replica = StoreReplica(bs, {"totals": info})
    store = ReadOnlyKeyValueStore(info, replica)
    answers: list = []

    def answered():
        try:
            answers.append(store.approximate_num_entries())
        except InvalidStateStoreException as e:
            answers.append(str(e))
            return False
        return True

    replica.start()
    try:
        wait_until(answered, 120, lambda: f"the store restored; last answer {answers[-1:]}", 0.01)
        assert dict(store.all()) == expected
    finally:
        replica.close()
    assert "Store 'totals' is restoring from its changelog topic" in answers[0]
    assert all(isinstance(a, str) for a in answers[:-1])  # never a partial store
    assert answers[-1] == len(expected)


def test_a_filtered_count_on_a_broker_writes_only_passing_counts_and_keeps_its_store(
    kafka_broker, spark, topic_name, app_config
):
    # count().filter(): KTableFilter with the count's old values, so the alerts topic holds
    # only counts that pass and a tombstone for a count that stops passing (never None for a
    # count that never passed); the count's store still holds every count
    bs = kafka_broker.bootstrap_servers
    src, alerts = topic_name("logins"), topic_name("alerts")
    ensure_topics(bs, {src: 2, alerts: 1})
    users = ["ann"] * 3 + ["bob"] * 3 + ["cid"]
    produce_records(bs, src, [(u.encode(), b"x", 1_000 + i) for i, u in enumerate(users)])
    b = StreamsBuilder()
    (
        b.stream(src, key_serde=S, value_serde=S)
        .group_by_key()
        .count(name="login-counts")
        .filter(lambda user, n: n in (2, 3))
        .to_stream()
        .to(alerts, key_serde=S, value_serde=L)
    )
    config = app_config(**{"processing.guarantee": "exactly_once_v2"})

    def last_per_user():
        # one micro-batch or several: each user's last record is the same
        last = {}
        for k, v, _ in read_topic(bs, alerts):
            last[k.decode()] = None if v is None else struct.unpack(">q", v)[0]
        return last

    with KafkaStreams(b.build(), config) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
        assert last_per_user() == {"ann": 3, "bob": 3}  # cid's count 1 never passed
        produce_records(bs, src, [(b"bob", b"x", 2_000), (b"cid", b"x", 2_001)])
        app.await_caught_up(timeout=timedelta(minutes=2))
        counts = app.store(StoreQueryParameters.from_name_and_type("login-counts", KV))
        assert counts.all() == [("ann", 3), ("bob", 4), ("cid", 2)]
    assert last_per_user() == {"ann": 3, "bob": None, "cid": 2}  # bob's 4 stops passing
