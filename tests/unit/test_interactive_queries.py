"""Interactive queries' read-only views and the replica's position, without a broker.

The replica's consumer thread is not started: changelog records are applied the way the thread
applies them, and its Kafka calls (positions, end offsets) are answered by a stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from streamtable import Position, PositionBound, Serdes
from streamtable.compiler.changelog import ChangelogInfo
from streamtable.errors import InvalidStateStoreException, StreamsError
from streamtable.state.queries import ReadOnlyKeyValueStore
from streamtable.state.replica import StoreReplica

pytestmark = pytest.mark.unit


@dataclass
class Msg:
    """A changelog record as confluent-kafka's consumer returns it."""

    _topic: str
    _partition: int
    _offset: int
    _key: bytes
    _value: bytes | None

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def error(self):
        return None


@dataclass
class TP:
    topic: str
    partition: int
    offset: int = -1


class Changelog:
    """Stand-in for the consumer's view of the changelog partitions: end offsets and the
    consumer's position.
    """

    def __init__(self):
        self.start = {}
        self.end = {}
        self.read_to = {}

    def get_watermark_offsets(self, tp, timeout, cached):
        where = (tp.topic, tp.partition)
        return self.start.get(where, 0), self.end.get(where, 0)

    def position(self, assignment):
        return [
            TP(t.topic, t.partition, self.read_to.get((t.topic, t.partition), -1001))
            for t in assignment
        ]


def restored(rep):
    """``rep`` with its (empty) changelogs read to their end, as its consumer thread marks
    them at start; the tests then feed it records.
    """
    assignment = [
        TP(info.topic, p) for info in rep.changelogs.values() for p in range(info.partitions)
    ]
    rep._restore(Changelog(), assignment)
    assert not rep._state.restoring
    return rep


def replica(key_serde, value_serde, partitions=1):
    info = ChangelogInfo(
        "s", "app-s-changelog", partitions, "key_value", key_serde, value_serde, "q"
    )
    return restored(StoreReplica("unused:9092", {"s": info})), info


def test_a_store_is_not_queryable_until_its_changelog_is_read_to_the_end_it_had_at_start():
    """After a restart the replica reads each changelog from its beginning; until it has
    reached the end offsets of its start it raises, as Kafka Streams does for a store whose
    task is restoring, instead of answering from part of the store.
    """
    s = Serdes.string()
    info = ChangelogInfo("s", "app-s-changelog", 2, "key_value", s, s, "q")
    rep = StoreReplica("unused:9092", {"s": info})
    store = ReadOnlyKeyValueStore(info, rep)
    with pytest.raises(
        InvalidStateStoreException,
        match=r"Store 's' is restoring from its changelog topic 'app-s-changelog' \(its "
        r"changelog's end offsets are not known yet\)\. Retry shortly, or wait for a position",
    ):
        store.get("a")
    kafka = Changelog()
    kafka.end = {(info.topic, 0): 3, (info.topic, 1): 1}
    assignment = [TP(info.topic, 0), TP(info.topic, 1)]
    rep._apply([Msg(info.topic, 0, 0, b"a", b"1"), Msg(info.topic, 0, 1, b"b", b"1")])
    kafka.read_to = {(info.topic, 0): 2}
    rep._restore(kafka, assignment)
    with pytest.raises(InvalidStateStoreException, match=r"\(2 of 4 changelog offsets read\)"):
        store.all()
    assert store.position() == Position.empty()  # the position stays readable
    rep._apply([Msg(info.topic, 0, 2, b"a", None), Msg(info.topic, 1, 0, b"c", b"2")])
    kafka.read_to = {(info.topic, 0): 3, (info.topic, 1): 1}
    kafka.end = {(info.topic, 0): 5, (info.topic, 1): 1}  # later writes: not waited for
    rep._restore(kafka, assignment)
    assert store.all() == [("b", "1"), ("c", "2")]


def test_a_store_view_stops_answering_once_the_application_leaves_running():
    """A view taken while RUNNING raises after close() or a failure, as Kafka Streams'
    stores do (``WrappingStoreProvider``), instead of answering from a replica that no
    longer follows the application.
    """
    from streamtable import KafkaStreams, StreamsBuilder
    from streamtable.runtime.kafka_streams import State

    s = Serdes.string()
    rep, info = replica(s, s)
    rep._apply([Msg(info.topic, 0, 0, b"alice", b"7")])
    store = ReadOnlyKeyValueStore(info, rep)
    assert store.get("alice") == "7"
    b = StreamsBuilder()
    b.stream("in").to("out")
    app = KafkaStreams(b.build(), {"application.id": "a", "bootstrap.servers": "unused:9092"})
    app._state, app._replica = State.RUNNING, rep
    app._transition(State.PENDING_SHUTDOWN)
    with pytest.raises(
        InvalidStateStoreException,
        match=r"Cannot query store 's': the application is PENDING_SHUTDOWN, not RUNNING\. "
        r"Kafka Streams' stores stop answering too",
    ):
        store.get("alice")
    with pytest.raises(InvalidStateStoreException, match="PENDING_SHUTDOWN"):
        store.position()
    with pytest.raises(InvalidStateStoreException, match="PENDING_SHUTDOWN"):
        store.wait_for(PositionBound.at(Position.empty()), timedelta(seconds=30))


def test_no_position_moves_and_no_wait_ends_before_the_store_is_restored():
    """A batch committed while the replica restores (its changelog ends read before the
    restoration's ends were known) does not move the position; wait_for, even for an empty
    bound, waits for the restoration and says so when it times out.
    """
    s = Serdes.string()
    info = ChangelogInfo("s", "app-s-changelog", 1, "key_value", s, s, "q")
    rep = StoreReplica("unused:9092", {"s": info})
    kafka, assignment = Changelog(), [TP(info.topic, 0)]
    kafka.end = {(info.topic, 0): 2}
    rep.batch_committed("q", {("in", 0): 5})
    rep._apply([Msg(info.topic, 0, 0, b"a", b"1"), Msg(info.topic, 0, 1, b"b", b"1")])
    kafka.read_to = {(info.topic, 0): 2}
    rep._advance(kafka, assignment)  # the restoration's ends are not known yet
    assert rep.position("s") == {}
    with pytest.raises(StreamsError, match=r"Store 's' is restoring .* Waited 0.05 s for it"):
        rep.wait_for("s", {}, 0.05)
    kafka.end = {(info.topic, 0): 3}  # a later write: restoration waits for it
    rep._restore(kafka, assignment)
    rep._advance(kafka, assignment)
    assert rep.position("s") == {}
    kafka.read_to = {(info.topic, 0): 3}
    rep._restore(kafka, assignment)
    rep._advance(kafka, assignment)
    assert rep.position("s") == {("in", 0): 4}
    assert rep.wait_for("s", {}, 0.05) == {("in", 0): 4}


def test_a_changelog_partition_with_nothing_left_to_read_counts_as_read():
    # e.g. its records deleted (start = end = 7): the consumer's position never moves there
    s = Serdes.string()
    info = ChangelogInfo("s", "app-s-changelog", 1, "key_value", s, s, "q")
    rep = StoreReplica("unused:9092", {"s": info})
    kafka = Changelog()
    kafka.start = kafka.end = {(info.topic, 0): 7}
    rep._restore(kafka, [TP(info.topic, 0)])
    assert ReadOnlyKeyValueStore(info, rep).all() == []


def test_keys_iterate_in_serialized_byte_order_as_in_kafka_streams_stores():
    """Big-endian ints: negative keys sort after positive ones, as in Kafka's stores."""
    ints, longs = Serdes.integer(), Serdes.long()
    rep, info = replica(ints, longs)
    keys = [5, -1, 0, 300, -300]
    rep._apply(
        [
            Msg(info.topic, 0, i, ints.serialize(k), longs.serialize(k * 10))
            for i, k in enumerate(keys)
        ]
    )
    store = ReadOnlyKeyValueStore(info, rep)
    assert [k for k, _ in store.all()] == [0, 5, 300, -300, -1]
    assert [k for k, _ in store.reverse_all()] == [-1, -300, 300, 5, 0]
    assert store.range(0, 300) == [(0, 0), (5, 50), (300, 3000)]
    assert store.range(None, 5) == [(0, 0), (5, 50)]
    assert store.range(300, None) == [(300, 3000), (-300, -3000), (-1, -10)]
    assert store.reverse_range(5, 300) == [(300, 3000), (5, 50)]
    assert store.range(300, 5) == []
    assert store.get(-300) == -3000
    assert store.approximate_num_entries() == 5


def test_tombstones_delete_and_later_updates_win():
    s = Serdes.string()
    rep, info = replica(s, s)
    rep._apply(
        [
            Msg(info.topic, 0, 0, b"a", b"1"),
            Msg(info.topic, 0, 1, b"b", b"2"),
            Msg(info.topic, 0, 2, b"a", None),
            Msg(info.topic, 0, 3, b"b", b"3"),
        ]
    )
    store = ReadOnlyKeyValueStore(info, rep)
    assert store.get("a") is None
    assert store.all() == [("b", "3")]


def test_prefix_scan_matches_serialized_prefixes():
    s = Serdes.string()
    rep, info = replica(s, s)
    rep._apply(
        [
            Msg(info.topic, 0, i, k.encode(), b"v")
            for i, k in enumerate(["ab", "a", "abc", "b", "aa"])
        ]
    )
    store = ReadOnlyKeyValueStore(info, rep)
    assert [k for k, _ in store.prefix_scan("ab")] == ["ab", "abc"]
    assert [k for k, _ in store.prefix_scan("a")] == ["a", "aa", "ab", "abc"]
    assert store.prefix_scan("z") == []


def test_a_query_key_that_cannot_be_serialized_names_the_store_and_the_key():
    rep, info = replica(Serdes.integer(), Serdes.long())
    store = ReadOnlyKeyValueStore(info, rep)
    with pytest.raises(StreamsError, match="Store 's': cannot serialize query key 'x'"):
        store.get("x")
    with pytest.raises(StreamsError, match="Store 's': a query key cannot be None"):
        store.get(None)


def test_the_position_advances_only_when_the_batch_s_changelog_records_are_read():
    """A committed batch joins the position once the replica has read its changelog up to
    the end offsets seen after the commit; Kafka's Position holds the last processed offset.
    """
    s = Serdes.string()
    rep, info = replica(s, s, partitions=2)
    kafka = Changelog()
    assignment = [TP(info.topic, 0), TP(info.topic, 1)]
    store = ReadOnlyKeyValueStore(info, rep)

    kafka.end = {(info.topic, 0): 3, (info.topic, 1): 1}
    rep.batch_committed("q", {("in", 0): 10, ("in", 1): 4})
    rep.batch_committed("other-query", {("in", 0): 99})  # writes no changelog: ignored
    rep._apply([Msg(info.topic, 0, 0, b"a", b"1"), Msg(info.topic, 0, 1, b"b", b"1")])
    rep._advance(kafka, assignment)
    assert store.position() == Position.empty()  # partition 0 read to 2 of 3, 1 not at all

    kafka.read_to = {(info.topic, 0): 3, (info.topic, 1): 1}  # past the commit markers
    rep._advance(kafka, assignment)
    assert dict(store.position()) == {("in", 0): 9, ("in", 1): 3}
    assert store.wait_for(
        PositionBound.at(Position.empty().with_component("in", 0, 9)), timedelta(seconds=1)
    ).dominates({("in", 1): 3})
    with pytest.raises(StreamsError, match=r"did not reach position \{in-0: 10\}.*at \{in-0: 9\}"):
        store.wait_for(
            PositionBound.at(Position.empty().with_component("in", 0, 10)),
            timedelta(milliseconds=50),
        )


def test_position_and_bound_follow_kafka_streams_iqv2():
    p = Position.empty().with_component("t", 1, 5).with_component("t", 0, 7)
    assert p.get_topics() == {"t"}
    assert p.get_partition_positions("t") == {0: 7, 1: 5}
    assert not p.dominates({("t", 0): 8})
    assert PositionBound.unbounded().position == Position.empty()


def test_window_store_fetches_follow_kafka_streams_window_key_schema():
    from streamtable import Windowed
    from streamtable.state.window_queries import ReadOnlyWindowStore, window_store_key

    s, longs = Serdes.string(), Serdes.long()
    info = ChangelogInfo("w", "app-w-changelog", 1, "window", s, longs, "q", window_size_ms=10)
    rep = restored(StoreReplica("unused:9092", {"w": info}))
    rows = [("a", 0, 1), ("a", 10, 2), ("a", 20, 3), ("ab", 10, 7), ("b", 10, 5)]
    rep._apply(
        [
            Msg(info.topic, 0, i, window_store_key(k.encode(), t), longs.serialize(v))
            for i, (k, t, v) in enumerate(rows)
        ]
        + [Msg(info.topic, 0, 9, window_store_key(b"a", 20), None)]  # a tombstone
    )
    store = ReadOnlyWindowStore(info, rep)
    assert store.fetch("a", 0, 100) == [(0, 1), (10, 2)]
    assert store.fetch("a", 5, 10) == [(10, 2)]
    assert store.backward_fetch("a", 0, 100) == [(10, 2), (0, 1)]
    assert store.fetch("a", 10) == 2 and store.fetch("a", 20) is None
    assert store.fetch("a", 100, 0) == []  # inverted time range: empty, as Kafka Streams
    assert store.fetch_all(10, 10) == [
        (Windowed("a", 10, 20), 2),
        (Windowed("ab", 10, 20), 7),
        (Windowed("b", 10, 20), 5),
    ]
    assert store.fetch("a", "ab", 0, 100) == [
        (Windowed("a", 0, 10), 1),
        (Windowed("a", 10, 20), 2),
        (Windowed("ab", 10, 20), 7),
    ]
    assert [w.key for w, _ in store.backward_all()] == ["b", "ab", "a", "a"]


def test_session_store_fetch_and_find_sessions_follow_kafka_streams():
    import struct

    from streamtable import Windowed
    from streamtable.state.window_queries import ReadOnlySessionStore

    s, longs = Serdes.string(), Serdes.long()
    info = ChangelogInfo("ss", "app-ss-changelog", 1, "session", s, longs, "q")
    rep = restored(StoreReplica("unused:9092", {"ss": info}))

    def key(k, start, end):
        return k.encode() + struct.pack(">qq", end, start)

    sessions = [("u", 0, 5, 2), ("u", 100, 130, 3), ("v", 10, 10, 1)]
    rep._apply(
        [
            Msg(info.topic, 0, i, key(k, st, en), longs.serialize(n))
            for i, (k, st, en, n) in enumerate(sessions)
        ]
    )
    store = ReadOnlySessionStore(info, rep)
    assert store.fetch("u") == [(Windowed("u", 0, 5), 2), (Windowed("u", 100, 130), 3)]
    assert store.backward_fetch("u")[0] == (Windowed("u", 100, 130), 3)
    assert store.find_sessions("u", 6, 1_000) == [(Windowed("u", 100, 130), 3)]
    assert store.find_sessions("u", 0, 50) == [(Windowed("u", 0, 5), 2)]
    assert store.fetch_session("v", 10, 10) == 1
    assert store.fetch("u", "v")[-1] == (Windowed("v", 10, 10), 1)
    # ReadOnlySessionStore.fetch(keyFrom, keyTo): a null bound is open, not "keyFrom only"
    everything = [(Windowed(k, st, en), n) for k, st, en, n in sessions]
    assert store.fetch("u", None) == everything == store.fetch("u", key_to=None)
    assert store.fetch(None, "u") == everything[:2]
    assert store.backward_fetch(None, None) == everything[::-1]
    with pytest.raises(ValueError, match=r"fetch\(key\): the key must not be None"):
        store.fetch(None)


def test_windows_and_sessions_past_the_retention_are_not_returned():
    """Kafka Streams' segmented stores return nothing at or before their observed stream
    time (largest window start, largest session end) minus the retention, though the
    changelog (and so the replica) still holds it; a tombstone moves that time too.
    """
    import struct

    from streamtable import Windowed
    from streamtable.state.window_queries import (
        ReadOnlySessionStore,
        ReadOnlyWindowStore,
        window_store_key,
    )

    s, longs = Serdes.string(), Serdes.long()
    info = ChangelogInfo(
        "w", "app-w", 1, "window", s, longs, "q", window_size_ms=10, retention_ms=20
    )
    rep = restored(StoreReplica("unused:9092", {"w": info}))
    rows = [("a", 0, 1), ("a", 20, 2), ("a", 30, 3), ("b", 40, 4)]
    msgs = [
        Msg(info.topic, 0, i, window_store_key(k.encode(), t), longs.serialize(v))
        for i, (k, t, v) in enumerate(rows)
    ]
    rep._apply(msgs)
    store = ReadOnlyWindowStore(info, rep)
    # observed 40, retention 20: windows starting at or before 20 are gone
    assert store.fetch("a", 0, 100) == [(30, 3)]
    assert store.fetch("a", 20) is None and store.fetch("a", 30) == 3
    assert store.all() == [(Windowed("a", 30, 40), 3), (Windowed("b", 40, 50), 4)]
    rep._apply([Msg(info.topic, 0, 9, window_store_key(b"c", 50), None)])  # observed 50
    assert store.fetch("a", 0, 100) == []
    # a task (changelog partition) far behind: Kafka Streams' store of that task still
    # returns its windows, so a query judges by the partition furthest behind
    rep._apply([Msg(info.topic, 1, 0, window_store_key(b"slow", 0), longs.serialize(9))])
    assert store.fetch("slow", 0) == 9 and store.fetch("a", 30) == 3

    info = ChangelogInfo("ss", "app-ss", 1, "session", s, longs, "q", retention_ms=10)
    rep = restored(StoreReplica("unused:9092", {"ss": info}))
    sessions = [("u", 0, 5, 2), ("u", 100, 130, 3), ("v", 110, 120, 1)]
    rep._apply(
        [
            Msg(info.topic, 0, i, k.encode() + struct.pack(">qq", en, st), longs.serialize(n))
            for i, (k, st, en, n) in enumerate(sessions)
        ]
    )
    sess = ReadOnlySessionStore(info, rep)
    # observed 130, retention 10: sessions ending at or before 120 are gone
    assert sess.fetch("u") == [(Windowed("u", 100, 130), 3)]
    assert sess.fetch("v") == [] and sess.fetch_session("v", 110, 120) is None
    assert sess.fetch_session("u", 100, 130) == 3


def test_a_replica_whose_consumer_cannot_be_built_fails_its_readers_with_the_cause():
    info = ChangelogInfo(
        "s", "app-s-changelog", 1, "key_value", Serdes.string(), Serdes.long(), "q"
    )
    # a value librdkafka refuses (StreamsConfig's start() refuses it first; this is the
    # replica's own guard): readers must hear why instead of waiting out their timeout
    rep = StoreReplica("unused:9092", {"s": info}, {"session.timeout.ms": "soon"})
    rep.start()
    try:
        with pytest.raises(StreamsError) as e:
            rep.wait_for("s", {("in", 0): 5}, timeout_s=120)
        assert str(e.value).startswith(
            "The stores' replica stopped reading the changelog topics: KafkaError{code=_INVALID_ARG"
        )
        assert 'Invalid value for configuration property "session.timeout.ms"' in str(e.value)
    finally:
        rep.close()
