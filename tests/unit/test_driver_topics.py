"""The test driver's input and output topics against Kafka's TestInputTopic/TestOutputTopic,
with a stand-in driver (no Spark): what they hand the driver and what they read back."""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta

import numpy
import pytest

from streamtable import Serdes
from streamtable.errors import StreamsError
from streamtable.testing.driver_topics import TestInputTopic, TestOutputTopic, TestRecord

pytestmark = pytest.mark.unit

S = Serdes.string()


class StandInDriver:
    """What the topics use of a TopologyTestDriver: the wall clock, pipes and output queues."""

    def __init__(self, wall_clock_ms: int = 0) -> None:
        self.wall_clock_ms = wall_clock_ms
        self.piped: list[tuple[str, bytes | None, bytes | None, int]] = []
        self._outputs: dict[str, deque] = {}

    def _pipe(self, topic, records):
        self.piped += [(topic, k, v, ts) for k, v, ts in records]


def test_auto_advance_without_a_start_starts_at_the_wall_clock_of_the_topic_creation():
    # Kafka's TestInputTopic advances its own time after each record; the driver's wall
    # clock moving later changes nothing (it used to give every record the wall clock)
    driver = StandInDriver(wall_clock_ms=5_000)
    topic = TestInputTopic(driver, "in", S, S, auto_advance=timedelta(seconds=1))
    topic.pipe_input("k", "a")
    driver.wall_clock_ms = 60_000
    topic.pipe_input("k", "b")
    topic.pipe_input("k", "c", timestamp=7)  # an explicit timestamp does not advance it
    topic.pipe_input("k", "d")
    assert [ts for *_, ts in driver.piped] == [5_000, 6_000, 7, 7_000]


def test_without_start_or_auto_advance_records_take_the_wall_clock_of_the_topic_creation():
    # Kafka's createInputTopic(name, ser, ser) starts the topic at the time of its creation
    # with no advance: a later wall clock changes nothing (it used to stamp each record)
    driver = StandInDriver(wall_clock_ms=5_000)
    topic = TestInputTopic(driver, "in", S, S)
    topic.pipe_input("k", "a")
    driver.wall_clock_ms = 60_000
    topic.pipe_input("k", "b")
    assert [ts for *_, ts in driver.piped] == [5_000, 5_000]
    TestInputTopic(driver, "in", S, S).pipe_input("k", "c")
    assert driver.piped[-1][-1] == 60_000


def test_a_lone_argument_is_refused_with_how_to_pipe_a_value_or_a_record():
    # Kafka's pipeInput(value) has a null key; in Python a lone argument could be either, so
    # it is refused (it used to pipe a tombstone keyed by the value)
    driver = StandInDriver()
    topic = TestInputTopic(driver, "in", S, S)
    with pytest.raises(
        TypeError,
        match=r"pipe_input\('hello'\) left out the value: .* "
        r"pipe_input\(None, 'hello'\) for a value with a null key",
    ):
        topic.pipe_input("hello")
    topic.pipe_input(TestRecord("k", "v", 42))  # Kafka's pipeInput(TestRecord)
    topic.pipe_input(value="w")
    assert driver.piped == [("in", b"k", b"v", 42), ("in", None, b"w", 0)]


def test_test_records_compare_times_in_ms_and_refuse_what_kafka_refuses():
    second = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert TestRecord("k", "v", second) == TestRecord("k", "v", 1000)
    assert TestRecord("k", "v", datetime(1970, 1, 1, 0, 0, 1)).timestamp == 1000  # naive: UTC
    with pytest.raises(ValueError, match=r"Invalid timestamp: -1\. Timestamp should always"):
        TestRecord("k", "v", -1)
    with pytest.raises(TypeError, match=r"Kafka's TestRecord takes the headers before"):
        TestRecord("k", "v", (("h", b"x"),), 10)  # Kafka's field order
    with pytest.raises(TypeError, match=r"headers must be \(name, bytes\) pairs"):
        TestRecord("k", "v", 10, ("h", b"x"))
    # as Kafka's: null headers are none; pairs may come as lists; any integral timestamp
    assert TestRecord("k", "v", 10, None).headers == ()
    assert TestRecord("k", "v", 10, [["h", b"x"]]).headers == (("h", b"x"),)
    assert TestRecord("k", "v", numpy.int64(10)) == TestRecord("k", "v", 10)


def test_advance_time_moves_the_topic_time_and_a_record_comes_alone():
    # Kafka's TestInputTopic.advanceTime
    driver = StandInDriver(wall_clock_ms=5_000)
    topic = TestInputTopic(driver, "in", S, S)
    topic.advance_time(timedelta(seconds=2))
    topic.pipe_input("k", "a")
    assert driver.piped == [("in", b"k", b"a", 7_000)]
    with pytest.raises(ValueError, match=r"advance_time needs a non-negative .* topic 'in'"):
        topic.advance_time(timedelta(seconds=-1))
    with pytest.raises(TypeError, match=r"pipe_input\(record\) takes a TestRecord alone"):
        topic.pipe_input(TestRecord("k", "v"), timestamp=5)


def test_a_negative_auto_advance_is_refused():
    with pytest.raises(ValueError, match=r"auto_advance must not be negative .* topic 'in'"):
        TestInputTopic(StandInDriver(), "in", S, S, auto_advance=timedelta(seconds=-1))


def test_read_key_values_to_map_keeps_a_tombstoned_key_with_none():
    # TestOutputTopic.readKeyValuesToMap: "If the last update to a key is a delete/tombstone,
    # the key will still be in the map (with null-value)"
    driver = StandInDriver()
    driver._outputs["out"] = deque(
        [(b"a", b"1", 0, ()), (b"b", b"2", 0, ()), (b"a", None, 1, ()), (b"b", b"3", 2, ())]
    )
    assert TestOutputTopic(driver, "out", S, S).read_key_values_to_map() == {"a": None, "b": "3"}


def test_read_key_values_to_map_refuses_a_null_key():
    driver = StandInDriver()
    driver._outputs["out"] = deque([(b"a", b"1", 0, ()), (None, b"x", 0, ())])
    with pytest.raises(StreamsError, match=r"'out' holds a record with a null key \(value 'x'\)"):
        TestOutputTopic(driver, "out", S, S).read_key_values_to_map()
