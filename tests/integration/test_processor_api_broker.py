"""The Processor API on a real broker and Spark: a processor's store is exactly-once state,
queryable through its changelog, and wall-clock punctuation fires while no records arrive
(Spark's processing-time timers in no-data micro-batches).
"""

from __future__ import annotations

import collections
import struct
import time
from datetime import timedelta

import pytest

from streamtable import (
    KafkaStreams,
    PositionBound,
    Processor,
    PunctuationType,
    QueryableStoreTypes,
    Record,
    Serdes,
    StoreQueryParameters,
    Stores,
    StreamsBuilder,
)
from streamtable.errors import InvalidStateStoreException
from streamtable.serde.murmur2 import default_partition
from streamtable.state import HostInfo

S, L = Serdes.string(), Serdes.long()


class CountWithHeartbeat(Processor):
    """Counts per key in ``per-user``; forwards ``(key, count)``; every second of wall-clock
    time forwards ``("heartbeat-<task>", total)``.
    """

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("per-user")
        context.schedule(timedelta(seconds=1), PunctuationType.WALL_CLOCK_TIME, self.heartbeat)

    def process(self, record):
        n = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, n)
        self.context.forward(record.with_value(n))

    def heartbeat(self, now):
        total = sum(n for _, n in self.store.all())
        self.context.forward(Record(f"heartbeat-{self.context.task_id()}", total, now))


def test_processor_store_is_queryable_and_wall_clock_punctuation_fires_when_idle(
    kafka_broker, spark, topic_name, app_config
):
    # imported here: Spark's Python workers unpickle the processor class by reference to this
    # module, and they do not have the tests folder on their path
    from _support import end_position, ensure_topics, produce_records, read_topic

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("clicks"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    users = [f"u{i % 7}" for i in range(60)]
    produce_records(bs, src, [(u.encode(), b"x", 1_000 + i) for i, u in enumerate(users)])

    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store("per-user"), S, L)
    )
    b.stream(src, key_serde=S, value_serde=S).process(CountWithHeartbeat, "per-user").to(
        out, key_serde=S, value_serde=L
    )
    app = KafkaStreams(b.build(), app_config(**{"processing.guarantee": "exactly_once_v2"}))
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
        store = app.store(
            StoreQueryParameters.from_name_and_type(
                "per-user", QueryableStoreTypes.key_value_store()
            )
        )
        want = collections.Counter(users)
        store.wait_for(PositionBound.at(end_position(bs, src, 2)), timeout=timedelta(minutes=1))
        assert store.all() == sorted(want.items())
        assert store.get("u3") == want["u3"]
        # Kafka Streams' metadata: this instance serves every key; the partition is murmur2's
        meta = app.query_metadata_for_key("per-user", "u3")
        assert meta.active_host == HostInfo.unavailable()  # no application.server configured
        assert meta.partition == default_partition(b"u3", 2)
        (instance,) = app.streams_metadata_for_store("per-user")
        assert instance.state_store_names == {"per-user"}
        assert instance.topic_partitions == {(src, 0), (src, 1)}
        with pytest.raises(InvalidStateStoreException, match="no queryable store 'nope'"):
            app.query_metadata_for_key("nope", "u3")

        # no more input: heartbeats keep coming, each with the wall-clock time it fired at
        caught_up_ms = int(time.time() * 1000)
        beats: list[tuple[str, int, int]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            beats = [
                (k.decode(), struct.unpack(">q", v)[0], ts)
                for k, v, ts in read_topic(bs, out)
                if k.startswith(b"heartbeat") and ts > caught_up_ms
            ]
            per_task = collections.Counter(k for k, _, _ in beats)
            if len(per_task) == 2 and min(per_task.values()) >= 2:
                break
        per_task = collections.Counter(k for k, _, _ in beats)
        assert sorted(per_task) == ["heartbeat-0_0", "heartbeat-0_1"], beats
        assert min(per_task.values()) >= 2, beats
        # each task's total is the count of its partition's records; together all of them
        last = {k: total for k, total, _ in sorted(beats, key=lambda b: b[2])}
        assert sum(last.values()) == len(users)
    finally:
        app.close()

    counts = [(k.decode(), struct.unpack(">q", v)[0]) for k, v, _ in read_topic(bs, out)]
    per_key = [(k, n) for k, n in counts if not k.startswith("heartbeat")]
    assert sorted(per_key) == sorted(
        (u, n) for u, total in collections.Counter(users).items() for n in range(1, total + 1)
    )


class CountPerKey(Processor):
    """Counts per key in ``per-region``; forwards ``(key, count)``."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("per-region")

    def process(self, record):
        n = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, n)
        self.context.forward(record.with_value(n))


def test_a_processor_after_repartition_counts_each_new_key_in_one_task(
    kafka_broker, spark, topic_name, app_config
):
    """Re-keyed by region and repartitioned, every region's records reach one task, as Kafka
    Streams' repartition topic places them: each region counts 1..n once. Before, the
    processor ran in the source partitions' tasks and a region read from both counted twice.
    """
    from _support import ensure_topics, produce_records, read_topic

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("users"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 1})
    users = [(f"u{i}", "eu" if i < 6 else "us") for i in range(12)]
    # each region's users are read from both source partitions
    for region in ("eu", "us"):
        assert {default_partition(u.encode(), 2) for u, r in users if r == region} == {0, 1}
    produce_records(
        bs, src, [(u.encode(), r.encode(), 1_000 + i) for i, (u, r) in enumerate(users)]
    )

    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store("per-region"), S, L)
    )
    (
        b.stream(src, key_serde=S, value_serde=S)
        .map(lambda user, region: (region, user))
        .repartition(name="by-region", key_serde=S, value_serde=S)
        .process(CountPerKey, "per-region")
        .to(out, key_serde=S, value_serde=L)
    )
    app = KafkaStreams(b.build(), app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
    finally:
        app.close()
    counts = sorted((k.decode(), struct.unpack(">q", v)[0]) for k, v, _ in read_topic(bs, out))
    assert counts == [(r, n) for r in ("eu", "us") for n in range(1, 7)]
