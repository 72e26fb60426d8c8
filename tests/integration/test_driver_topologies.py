"""TopologyTestDriver on windowed, joined and error-handling topologies, and the pytest plugin."""

from datetime import timedelta

import pytest

from streamtable import Serdes, StreamsBuilder, Suppressed, TimeWindow, TimeWindows, Windows
from streamtable.errors import StreamsError
from streamtable.runtime.state_lock import StateDirLock
from streamtable.serde import Windowed
from streamtable.testing import TestRecord, assert_stream_equal, assert_table_equal

S, L = Serdes.string(), Serdes.long()
SIZE = 10_000
HOUR, DAY = 3_600_000, 86_400_000
NOV_24 = 1_795_478_400_000  # 2026-11-24T00:00Z


class DailyFrom18Utc(Windows):
    """Kafka's custom-window example: days that start at 18:00 UTC, one hour of grace."""

    def windows_for(self, timestamp):
        start = (timestamp - 18 * HOUR) // DAY * DAY + 18 * HOUR
        return {start: TimeWindow(start, start + DAY)}

    def size(self):
        return timedelta(days=1)

    def grace_period(self):
        return timedelta(hours=1)


def test_windowed_count_emits_final_results_and_captures_late_records(topology_driver):
    """until_window_closes emits once per window when stream time passes its end + grace;
    a record for a closed window goes to the late-records topic (written from a Python task)."""
    b = StreamsBuilder()
    (
        b.stream("clicks", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(SIZE, 0), late_records_topic="clicks-late")
        .count(name="clicks-per-window")
        .suppress(Suppressed.until_window_closes())
        .to_stream()
        .to("clicks-final", key_serde=Serdes.time_windowed(S, SIZE), value_serde=L)
    )
    driver = topology_driver(b.build())
    inp = driver.create_input_topic("clicks", S, S)
    final = driver.create_output_topic("clicks-final", Serdes.time_windowed(S, SIZE), L)
    late = driver.create_output_topic("clicks-late", S, S)

    inp.pipe_input("a", "x", timestamp=1_000)
    inp.pipe_input("a", "y", timestamp=2_000)
    inp.pipe_input("b", "z", timestamp=9_999)
    assert final.is_empty()  # stream time 9,999 < window end 10,000
    inp.pipe_input("a", "w", timestamp=10_000)  # closes [0, 10000)
    assert_stream_equal(final, [(Windowed("a", 0, SIZE), 2), (Windowed("b", 0, SIZE), 1)])
    inp.pipe_input("b", "too late", timestamp=5_000)
    assert final.is_empty()
    assert_stream_equal(late, [TestRecord("b", "too late", 5_000)])


def test_user_defined_daily_windows_with_grace_suppression_and_late_records(topology_driver):
    """A Windows subclass runs where the aggregation runs (Spark's Python workers): each day
    from 18:00 UTC is emitted once when stream time passes 19:00 the next day."""
    b = StreamsBuilder()
    (
        b.stream("trades", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(DailyFrom18Utc(), late_records_topic="trades-late")
        .count(name="trades-per-day", retention=timedelta(days=2))
        .suppress(Suppressed.until_window_closes())
        .to_stream()
        .to("trades-daily", key_serde=Serdes.time_windowed(S, DAY), value_serde=L)
    )
    driver = topology_driver(b.build())
    inp = driver.create_input_topic("trades", S, S)
    daily = driver.create_output_topic("trades-daily", Serdes.time_windowed(S, DAY), L)
    late = driver.create_output_topic("trades-late", S, S)
    day = NOV_24 - 6 * HOUR  # 2026-11-23T18:00Z

    inp.pipe_input("p1", "t1", timestamp=NOV_24 + 9 * HOUR)
    inp.pipe_input("p2", "t2", timestamp=NOV_24 + 17 * HOUR)
    inp.pipe_input("p1", "t3", timestamp=NOV_24 + 18 * HOUR)  # the next day
    inp.pipe_input("p1", "t4", timestamp=NOV_24 + 17 * HOUR + 30 * 60_000)  # within grace
    assert daily.is_empty()
    inp.pipe_input("p2", "t5", timestamp=NOV_24 + 19 * HOUR)  # the first day closes
    finals = sorted(daily.read_key_values_to_list(), key=lambda kv: kv[0].key)
    assert finals == [(Windowed("p1", day, day + DAY), 2), (Windowed("p2", day, day + DAY), 1)]
    inp.pipe_input("p2", "too late", timestamp=NOV_24 + 12 * HOUR)
    assert daily.is_empty()
    assert_stream_equal(late, [TestRecord("p2", "too late", NOV_24 + 12 * HOUR)])


def clicks_joined_with_users(topology_driver, **table_options):
    """A driver of clicks joined with the users table: its users, clicks and output topics."""
    b = StreamsBuilder()
    table = b.table("users", key_serde=S, value_serde=S, **table_options)
    (
        b.stream("clicks", key_serde=S, value_serde=S)
        .join(table, lambda click, region: f"{click}@{region}")
        .to("enriched", key_serde=S, value_serde=S)
    )
    driver = topology_driver(b.build())
    return (
        driver.create_input_topic("users", S, S),
        driver.create_input_topic("clicks", S, S),
        driver.create_output_topic("enriched", S, S),
    )


def test_stream_table_join_looks_up_the_table_as_of_each_record(topology_driver):
    users, clicks, out = clicks_joined_with_users(topology_driver)
    clicks.pipe_input("alice", "home", timestamp=1)  # no table row yet: inner join drops it
    users.pipe_input("alice", "eu", timestamp=2)
    clicks.pipe_input("alice", "cart", timestamp=3)
    users.pipe_input("alice", "us", timestamp=4)
    clicks.pipe_input("alice", "pay", timestamp=5)
    assert_stream_equal(out, [("alice", "cart@eu"), ("alice", "pay@us")])


def test_a_versioned_table_expires_late_updates_and_old_lookups(topology_driver):
    """``history_retention`` is the versioned store's grace period too (Kafka Streams'
    ``RocksDBVersionedStore``): an update more than 10 ms older than the table time is not
    applied, and a click more than 10 ms older than it finds only alice's latest version.
    """
    users, clicks, out = clicks_joined_with_users(topology_driver, history_retention=10)
    users.pipe_input("alice", "eu", timestamp=100)
    users.pipe_input("alice", "late", timestamp=50)  # older than 100 - 10: dropped
    clicks.pipe_input("alice", "a", timestamp=95)  # nothing at or before 95
    users.pipe_input("alice", "us", timestamp=200)
    clicks.pipe_input("alice", "b", timestamp=150)  # past the retention; "us" is newer
    clicks.pipe_input("alice", "c", timestamp=195)  # within it: "eu" was valid at 195
    assert_stream_equal(out, [("alice", "c@eu")])


def test_failing_record_goes_to_the_dead_letter_topic_and_processing_continues(topology_driver):
    def parse(v):
        return int(v)  # raises on "oops"

    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).map_values(parse).to("out", value_serde=L)
    driver = topology_driver(
        b.build(),
        {
            "processing.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": "in-dlq",
        },
    )
    inp = driver.create_input_topic("in", S, S)
    out = driver.create_output_topic("out", S, L)
    dlq = driver.create_output_topic("in-dlq", S, S)
    inp.pipe_key_value_list([("k1", "1"), ("k2", "oops"), ("k3", "3")])
    assert_stream_equal(out, [("k1", 1), ("k3", 3)])
    [dead] = dlq.read_records_to_list()
    assert (dead.key, dead.value) == ("k2", "oops")
    # the dead letter's headers come back as production writes them (Kafka's driver keeps
    # a record's headers)
    headers = dict(dead.headers)
    assert headers["__streams.errors.exception"] == b"ValueError"
    assert (headers["__streams.errors.topic"], headers["__streams.errors.offset"]) == (b"in", b"1")


def test_close_deletes_the_application_folder_of_a_given_state_dir(topology_driver, tmp_path):
    """Kafka's driver cleans its state directory on close: a second driver with the same
    ``state.dir`` and ``application.id`` starts afresh instead of resuming the first one's
    checkpoint (whose source offsets lie past the new driver's empty topics).
    """
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).group_by_key().count().to_stream().to(
        "out", key_serde=S, value_serde=L
    )
    config = {"application.id": "ttd-app", "state.dir": str(tmp_path)}
    driver = topology_driver(b.build(), config)
    inp = driver.create_input_topic("in", S, S)
    out = driver.create_output_topic("out", S, L)
    inp.pipe_input("a", "x")
    assert out.read_key_values_to_list() == [("a", 1)]
    driver.close()
    assert not (tmp_path / "ttd-app").exists()
    with pytest.raises(StreamsError, match=r"The TopologyTestDriver is closed"):
        driver.advance_wall_clock_time(timedelta(seconds=1))
    # the second driver starts afresh; closed while a running application holds the
    # folder's lock (as KafkaStreams does), it leaves the folder and says so
    driver = topology_driver(b.build(), config)
    inp = driver.create_input_topic("in", S, S)
    out = driver.create_output_topic("out", S, L)
    inp.pipe_input("a", "x")
    assert out.read_key_values_to_list() == [("a", 1)]
    with StateDirLock(tmp_path / "ttd-app").acquire("ttd-app"):
        with pytest.warns(UserWarning, match=r"close\(\) left .*ttd-app.*holds its lock"):
            driver.close()
    assert (tmp_path / "ttd-app").exists()


def test_input_topics_stamp_records_with_the_wall_clock_of_their_creation(topology_driver):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(SIZE, 0))
        .count()
        .suppress(Suppressed.until_window_closes())
        .to_stream()
        .to("out", key_serde=Serdes.time_windowed(S, SIZE), value_serde=L)
    )
    driver = topology_driver(b.build(), initial_wall_clock_time=50_000)
    inp = driver.create_input_topic("in", S, S)
    out = driver.create_output_topic("out", Serdes.time_windowed(S, SIZE), L)
    inp.pipe_input("a", "x")  # timestamp: the wall clock, 50,000
    driver.advance_wall_clock_time(timedelta(minutes=5))
    # the wall clock moves neither stream time (Kafka's suppression) nor the topic's time
    # (Kafka's TestInputTopic keeps the time of its creation)
    inp.pipe_input("a", "y")
    assert out.is_empty()
    later = driver.create_input_topic("in", S, S)  # created at 350,000
    later.pipe_input("b", "z")  # stream time passes 60,000
    assert_stream_equal(out, [TestRecord(Windowed("a", 50_000, 60_000), 2, None)])
    with pytest.raises(ValueError, match=r"advance_wall_clock_time needs a non-negative"):
        driver.advance_wall_clock_time(timedelta(seconds=-1))


def test_table_output_compared_as_a_table(topology_driver):
    b = StreamsBuilder()
    (
        b.stream("words", key_serde=S, value_serde=S)
        .group_by(lambda k, w: w, key_serde=S)
        .count()
        .to_stream()
        .to("counts", key_serde=S, value_serde=L)
    )
    driver = topology_driver(b.build())
    inp = driver.create_input_topic("words", S, S)
    out = driver.create_output_topic("counts", S, L)
    inp.pipe_value_list(["a", "b", "a"])
    assert_table_equal(out, {"a": 2, "b": 1})


def test_user_code_error_names_the_operator_and_record(topology_driver):
    def parse(v):
        return int(v)

    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).map_values(parse, name="parse").to(
        "out", value_serde=L
    )
    driver = topology_driver(b.build())
    inp = driver.create_input_topic("in", S, S)
    with pytest.raises(StreamsError) as failed:
        inp.pipe_input("k", "oops")
    assert str(failed.value).startswith(
        "User code raised ValueError: invalid literal for int() with base 10: 'oops' in operator "
        "'parse' on the record at topic 'in' partition 0 offset 0."
    )


def test_a_closed_driver_refuses_input(topology_driver):
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).to("out")
    driver = topology_driver(b.build())
    inp = driver.create_input_topic("in", S, S)
    driver.close()
    with pytest.raises(StreamsError, match=r"The TopologyTestDriver is closed"):
        inp.pipe_input("k", "v")


def test_embedded_kafka_fixture_gives_created_topics_unique_to_the_test(embedded_kafka, request):
    topic = embedded_kafka.topic("in", partitions=2)
    assert topic.startswith(f"{request.node.name[:60]}-in-")
    assert embedded_kafka.topic("out") != topic
    embedded_kafka.produce(topic, [(b"k", b"v", 1_000)])
    assert embedded_kafka.read(topic) == [(b"k", b"v", 1_000)]
    cfg = embedded_kafka.app_config()
    assert cfg["bootstrap.servers"] == embedded_kafka.bootstrap_servers
    assert cfg["application.id"] != embedded_kafka.app_config()["application.id"]
