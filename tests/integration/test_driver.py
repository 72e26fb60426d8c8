"""TopologyTestDriver (prototype): the compiled plan on in-memory topics, one record per batch."""

from datetime import timedelta

import pytest

from streamtable import Serdes, StreamsBuilder, TimeWindows
from streamtable.errors import StreamsError, TopologyError
from streamtable.testing import TopologyTestDriver

S, L = Serdes.string(), Serdes.long()


def test_stateless_records_come_out_in_order(spark):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .filter(lambda k, v: v != "skip")
        .flat_map_values(lambda v: v.split())
        .to("out", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        inp.pipe_input("k1", "a b", timestamp=1000)
        assert out.get_queue_size() == 2
        inp.pipe_input("k2", "skip", timestamp=1001)
        assert out.is_empty() is False
        inp.pipe_key_value_list([("k3", "c"), ("k4", "d e")])
        records = out.read_records_to_list()
        assert [(r.key, r.value) for r in records] == [
            ("k1", "a"),
            ("k1", "b"),
            ("k3", "c"),
            ("k4", "d"),
            ("k4", "e"),
        ]
        assert records[0].timestamp == 1000
        assert out.is_empty()


def test_count_emits_every_update_and_store_is_readable(spark):
    b = StreamsBuilder()
    (
        b.stream("words", key_serde=S, value_serde=S)
        .group_by(lambda k, v: v, key_serde=S)
        .count(name="Counts")
        .to_stream()
        .to("counts", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("words", S, S)
        out = driver.create_output_topic("counts", S, L)
        store = driver.get_key_value_store("Counts")
        assert store.all() == []
        inp.pipe_value_list(["a", "b", "a", "a"])
        # Kafka's driver: one update per piped record, none coalesced
        assert out.read_key_values_to_list() == [("a", 1), ("b", 1), ("a", 2), ("a", 3)]
        assert store.get("a") == 3
        assert store.all() == [("a", 3), ("b", 1)]
        inp.pipe_input(None, "b")
        assert out.read_key_value() == ("b", 2)
        assert store.get("b") == 2


def test_a_repartition_drops_null_keys_unless_a_left_join_downstream_joins_them(spark):
    """Kafka Streams' repartition filter: a record re-keyed to null is dropped before the
    repartition topic, except where a join downstream joins such records with None
    (KIP-962). ``repartition()`` straight to a sink used to pass them on.
    """
    b = StreamsBuilder()
    rekeyed = b.stream("in", key_serde=S, value_serde=S).select_key(
        lambda k, v: None if v.startswith("x") else v
    )
    table = b.table("t", key_serde=S, value_serde=S)
    rekeyed.repartition(name="r", key_serde=S, value_serde=S).to("plain", key_serde=S)
    rekeyed.left_join(table, lambda v, t: f"{v}|{t}").to("joined", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        plain = driver.create_output_topic("plain", S, S)
        joined = driver.create_output_topic("joined", S, S)
        inp.pipe_input("k1", "a")
        inp.pipe_input("k2", "xb")
        assert plain.read_key_values_to_list() == [("a", "a")]
        assert joined.read_key_values_to_list() == [("a", "a|None"), (None, "xb|None")]


def test_unknown_topics_and_stores_are_named(spark):
    b = StreamsBuilder()
    (
        b.stream("words", key_serde=S, value_serde=S)
        .group_by(lambda k, v: v, key_serde=S)
        .count(name="Counts")
        .to_stream()
        .to("counts", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        with pytest.raises(TopologyError, match=r"'wrods'.*\['words'\].*'Unknown topic'"):
            driver.create_input_topic("wrods", S, S)
        with pytest.raises(TopologyError, match=r"'words'.*\['counts'\]"):
            driver.create_output_topic("words", S, L)
        with pytest.raises(TopologyError, match=r"'counts'.*\['Counts'\]"):
            driver.get_key_value_store("counts")


def test_table_regroup_emits_subtraction_then_addition(spark):
    b = StreamsBuilder()
    users = b.table("users", key_serde=S, value_serde=S, name="users-store")
    (
        users.group_by(lambda user, region: (region, user), key_serde=S)
        .count(name="region-counts")
        .to_stream()
        .to("counts", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("users", S, S)
        out = driver.create_output_topic("counts", S, L)
        inp.pipe_key_value_list([("alice", "A"), ("bob", "A")])
        assert out.read_key_values_to_list() == [("A", 1), ("A", 2)]
        inp.pipe_input("alice", "E")
        # Kafka Streams: the subtraction from the old group, then the addition to the new one
        assert out.read_key_values_to_list() == [("A", 1), ("E", 1)]
        inp.pipe_input("alice", "A")  # the old group sorts after the new one
        assert out.read_key_values_to_list() == [("E", 0), ("A", 2)]
        inp.pipe_input("bob", None)
        assert out.read_key_values_to_list() == [("A", 1)]


def test_filter_over_a_table_aggregation_sends_a_tombstone_only_for_a_row_that_passed(spark):
    # Kafka Streams' KTableFilter gets the old aggregate from KTableAggregate: a count that
    # neither passes nor passed forwards nothing, one that stops passing a tombstone
    b = StreamsBuilder()
    users = b.table("users", key_serde=S, value_serde=S)
    (
        users.group_by(lambda user, region: (region, user), key_serde=S)
        .count()
        .filter(lambda region, n: n >= 2)
        .map_values(lambda n: n * 10)
        .to_stream()
        .to("crowded", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("users", S, S)
        out = driver.create_output_topic("crowded", S, L)
        inp.pipe_input("alice", "A")  # A: 1, never passed
        assert out.is_empty()
        inp.pipe_input("bob", "A")
        assert out.read_key_values_to_list() == [("A", 20)]
        inp.pipe_input("alice", "E")  # A: 2 -> 1 stops passing; E: 1 never passed
        assert out.read_key_values_to_list() == [("A", None)]
        inp.pipe_input("carol", "E")
        assert out.read_key_values_to_list() == [("E", 20)]


@pytest.mark.parametrize("grouped", ["KTable.group_by", "KStream.group_by_key", "windowed"])
def test_a_failing_filter_over_an_aggregation_skips_the_change_under_log_and_continue(
    spark, grouped
):
    # KTableFilter calls the predicate on the new and the old aggregate: a change is skipped
    # when either call raises (the processing exception handler), and the application goes on
    b = StreamsBuilder()
    if grouped == "KTable.group_by":
        table = b.table("in", key_serde=S, value_serde=S)
        counts = table.group_by(lambda user, region: (region, user), key_serde=S).count()
        records = [("alice", "A"), ("bob", "A"), ("carol", "A")]  # three users in region A
    else:
        grouping = b.stream("in", key_serde=S, value_serde=S).group_by_key()
        if grouped == "windowed":
            grouping = grouping.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(hours=1)))
        counts = grouping.count()
        records = [("A", "x")] * 3
    counts.filter(lambda key, n: 1 // (n - 1) >= 0, name="ratio").to_stream().map(
        lambda key, n: (str(key), n)
    ).to("counts", key_serde=S, value_serde=L)  # the predicate raises for a count of 1
    config = {
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "in-dlq",
    }
    with TopologyTestDriver(b.build(), config) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("counts", S, L)
        dlq = driver.create_output_topic("in-dlq", Serdes.bytes(), Serdes.bytes())
        for i, (key, value) in enumerate(records):
            inp.pipe_input(key, value, timestamp=1_000 + i)
        # A: 1 (new raises), A: 2 (old raises), A: 3 (old and new pass)
        assert [v for _, v in out.read_key_values_to_list()] == [3]
        # each skipped change is dead-lettered, as Kafka Streams 4.x's handler does for an
        # error in its record cache's flush: the change's key bytes, no value (the aggregate
        # is not a source record), the timestamp and coordinates of the record that made it
        letters = dlq.read_records_to_list()
        assert len(letters) == 2
        for d in letters:
            headers = dict(d.headers)
            assert d.key.startswith(b"A") and d.value is None  # windowed: A + window start
            assert headers["__streams.errors.exception"] == b"ZeroDivisionError"
            assert headers["streamtable.errors.operator"] == b"ratio"
            assert headers["streamtable.errors.reason"] == b"processing"
        assert [d.timestamp for d in letters] == [1_000, 1_001]
        coordinates = [
            (dict(d.headers)["__streams.errors.topic"], dict(d.headers)["__streams.errors.offset"])
            for d in letters
        ]
        if grouped == "windowed":  # a window carries the record that changed it last
            assert coordinates == [(b"in", b"0"), (b"in", b"1")]
        elif grouped == "KStream.group_by_key":  # an unwindowed fold's updates carry none
            assert coordinates == [(None, b"-1"), (None, b"-1")]


def test_a_failing_filter_over_an_aggregation_stops_the_driver_under_log_and_fail(spark):
    # the default handler (LogAndFail) stops the application, and the message says how to
    # skip such changes instead (the handler covers a table filter read as upserts)
    b = StreamsBuilder()
    counts = b.stream("in", key_serde=S, value_serde=S).group_by_key().count()
    counts.filter(lambda key, n: 1 // (n - 1) >= 0, name="ratio").to_stream().to(
        "counts", key_serde=S, value_serde=L
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        with pytest.raises(
            StreamsError,
            match=r"User code raised ZeroDivisionError: .* in operator 'ratio' \(filter\) on "
            r"an update of an upstream stateful operator .*set "
            r"'processing.exception.handler'='log_and_continue' to skip such changes",
        ):
            inp.pipe_input("A", "x")


def _login_alerts(table_ops):
    """A driver of logins counted per user, ``table_ops(counts)`` written to ``alerts``."""
    b = StreamsBuilder()
    counts = b.stream("logins", key_serde=S, value_serde=S).group_by_key().count()
    table_ops(counts).to_stream().to("alerts", key_serde=S, value_serde=L)
    return TopologyTestDriver(b.build())


def test_filter_over_a_stream_count_sends_nothing_for_a_count_that_never_passed(spark):
    # KTableFilter gets old values from KStreamAggregate (materialized): the classic
    # "count >= 2" alert emits only counts that pass, and a tombstone only for a row that
    # passed and stops passing (here through map_values, which forwards old values too)
    with _login_alerts(
        lambda counts: counts.map_values(lambda n: n % 3).filter(lambda user, n: n >= 1)
    ) as driver:
        inp = driver.create_input_topic("logins", S, S)
        out = driver.create_output_topic("alerts", S, L)
        inp.pipe_input("alice", "x")  # 1: passes
        assert out.read_key_values_to_list() == [("alice", 1)]
        inp.pipe_key_value_list([("alice", "x"), ("alice", "x")])  # 2, then 0: stops passing
        assert out.read_key_values_to_list() == [("alice", 2), ("alice", None)]
        inp.pipe_input("alice", "x")
        assert out.read_key_values_to_list() == [("alice", 1)]
    with _login_alerts(lambda counts: counts.filter(lambda user, n: n >= 3)) as driver:
        inp = driver.create_input_topic("logins", S, S)
        out = driver.create_output_topic("alerts", S, L)
        inp.pipe_key_value_list([("bob", "x"), ("bob", "x"), ("carol", "x")])
        assert out.is_empty()  # counts 1, 2 and 1: no tombstone for a row that never passed
        inp.pipe_input("bob", "x")
        assert out.read_key_values_to_list() == [("bob", 3)]


def test_a_deleted_aggregate_s_tombstone_carries_the_deleting_record_s_timestamp(spark):
    # Kafka Streams' record cache forwards a deletion with the timestamp of the put that
    # deleted (TimestampedCacheFlushListener: record.timestamp() when the new value is null),
    # not the aggregate's largest timestamp; unwindowed and per time window alike
    from datetime import timedelta

    from streamtable import TimeWindows

    def total(key, value, agg):
        return None if value == "del" else agg + int(value)

    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=S, value_serde=S).group_by_key()
    grouped.aggregate(lambda: 0, total).to_stream().to("totals", key_serde=S, value_serde=L)
    (
        grouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10)))
        .aggregate(lambda: 0, total)
        .to_stream()
        .map(lambda wk, n: (f"{wk.key}@{wk.start}", n))
        .to("windowed", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("a", "5", timestamp=8_000)
        inp.pipe_input("a", "del", timestamp=3_000)  # out of order: deletes both
        totals = driver.create_output_topic("totals", S, L).read_records_to_list()
        windowed = driver.create_output_topic("windowed", S, L).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in totals] == [
            ("a", 5, 8_000),
            ("a", None, 3_000),
        ]
        assert [(r.key, r.value, r.timestamp) for r in windowed] == [
            ("a@0", 5, 8_000),
            ("a@0", None, 3_000),
        ]


def test_filter_over_a_stream_aggregation_whose_aggregator_deletes_the_row(spark):
    # an aggregator returning None deletes the row (KStreamAggregate): the filter forwards a
    # tombstone only when the deleted aggregate passed; a list aggregate changed in place
    # still has its old value judged as it was
    def collect(user, value, agg):
        if value == "reset":
            return None
        agg.append(value)
        return agg

    b = StreamsBuilder()
    (
        b.stream("events", key_serde=S, value_serde=S)
        .group_by_key()
        .aggregate(list, collect)
        .filter(lambda user, items: len(items) >= 2)
        .map_values(",".join)
        .to_stream()
        .to("lists", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("events", S, S)
        out = driver.create_output_topic("lists", S, S)
        inp.pipe_key_value_list([("a", "1"), ("a", "reset"), ("b", "1")])
        assert out.is_empty()  # a: [1] then deleted, never passed; b: [1]
        inp.pipe_input("b", "2")
        assert out.read_key_values_to_list() == [("b", "1,2")]
        inp.pipe_input("b", "reset")
        assert out.read_key_values_to_list() == [("b", None)]


def test_filter_over_hopping_windows_judges_each_window_by_its_own_old_aggregate(spark):
    # KTableFilter over KStreamWindowAggregate (old values from the window store): a record
    # updates two hopping windows; each window forwards by its own new and old aggregate, and
    # a window its aggregator deletes sends a tombstone only if its old aggregate passed
    from datetime import timedelta

    from streamtable import TimeWindows

    def total(user, value, agg):
        return None if value == "reset" else agg + int(value)

    b = StreamsBuilder()
    (
        b.stream("spend", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(
            TimeWindows.of_size_with_no_grace(timedelta(seconds=10)).advance_by(
                timedelta(seconds=5)
            )
        )
        .aggregate(lambda: 0, total)
        .filter(lambda wk, n: n >= 10)
        .to_stream()
        .map(lambda wk, n: (f"{wk.key}@{wk.start}", n))
        .to("big", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("spend", S, S)
        out = driver.create_output_topic("big", S, L)
        inp.pipe_input("ann", "4", timestamp=6_000)  # windows [0, 10) and [5, 15): 4, 4
        inp.pipe_input("ann", "7", timestamp=2_000)  # [0, 10): 11 passes
        assert out.read_key_values_to_list() == [("ann@0", 11)]
        inp.pipe_input("ann", "6", timestamp=7_000)  # [0, 10): 17; [5, 15): 10 passes
        assert sorted(out.read_key_values_to_list()) == [("ann@0", 17), ("ann@5000", 10)]
        # deletes [5, 15), which passed; [10, 20) is deleted as it starts: never passed
        inp.pipe_input("ann", "reset", timestamp=11_000)
        assert out.read_key_values_to_list() == [("ann@5000", None)]
        inp.pipe_input("ann", "reset", timestamp=12_000)  # both deleted as they start again
        inp.pipe_input("ann", "3", timestamp=13_000)  # [5, 15) and [10, 20) anew: 3 fails
        assert out.is_empty()
        inp.pipe_input("ann", "9", timestamp=14_000)  # 12 and 12 pass
        assert sorted(out.read_key_values_to_list()) == [("ann@10000", 12), ("ann@5000", 12)]


def test_output_to_a_topic_the_topology_reads_is_processed_again(spark):
    # Kafka's driver re-enqueues records written to a source topic
    # (captureOutputsAndReEnqueueInternalResults): they are processed and stay readable
    b = StreamsBuilder()
    b.stream("a", key_serde=S, value_serde=S).map_values(str.upper).to("b", value_serde=S)
    b.stream("b", key_serde=S, value_serde=S).group_by_key().count(name="counts").to_stream().to(
        "c", value_serde=L
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("a", S, S)
        inp.pipe_input("k", "x", timestamp=10)
        inp.pipe_input("k", "y", timestamp=20)
        assert driver.create_output_topic("b", S, S).read_key_values_to_list() == [
            ("k", "X"),
            ("k", "Y"),
        ]
        c = driver.create_output_topic("c", S, L).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in c] == [("k", 1, 10), ("k", 2, 20)]


def test_aggregation_results_carry_kafka_streams_default_serdes(spark):
    # Materialized defaults: count's values are Long, reduce's the grouped values' serde, and a
    # windowed result's keys are windowed (FullTimeWindowedSerde / SessionWindowedSerde), so
    # to_stream().to(topic) needs no serdes
    from datetime import timedelta

    from streamtable import SessionWindows, TimeWindows

    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=S, value_serde=L).group_by_key()
    grouped.count().to_stream().to("counts")
    grouped.reduce(lambda a, v: a + v).to_stream().to("sums")
    windowed = grouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=5)))
    windowed.count().to_stream().to("windowed")
    sessions = grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(timedelta(1)))
    sessions.count().to_stream().to("sessions")
    with TopologyTestDriver(b.build()) as driver:
        driver.create_input_topic("in", S, L).pipe_input("k", 7, timestamp=6_000)
        assert driver.create_output_topic("counts", S, L).read_key_values_to_list() == [("k", 1)]
        assert driver.create_output_topic("sums", S, L).read_key_values_to_list() == [("k", 7)]
        ((w, n),) = driver.create_output_topic(
            "windowed", Serdes.time_windowed(S, 5_000), L
        ).read_key_values_to_list()
        assert (w.key, w.start, w.end, n) == ("k", 5_000, 10_000, 1)
        ((s, n),) = driver.create_output_topic(
            "sessions", Serdes.session_windowed(S), L
        ).read_key_values_to_list()
        assert (s.key, s.start, s.end, n) == ("k", 6_000, 6_000, 1)


def test_a_merge_of_streams_with_different_serdes_writes_with_the_defaults(spark):
    # KStreamImpl.merge drops the serdes when the inputs' differ: the sink writes with the
    # configured defaults, not with the first input's serde
    b = StreamsBuilder()
    a = b.stream("a", key_serde=S, value_serde=Serdes.json())
    c = b.stream("c", key_serde=S, value_serde=S)
    a.merge(c).to("out")
    config = {"default.key.serde": "String", "default.value.serde": "String"}
    with TopologyTestDriver(b.build(), config) as driver:
        driver.create_input_topic("a", S, Serdes.json()).pipe_input("k", "x", timestamp=1)
        driver.create_input_topic("c", S, S).pipe_input("k", "y", timestamp=2)
        out = driver.create_output_topic("out", S, S).read_values_to_list()
        assert sorted(out) == ["x", "y"]
