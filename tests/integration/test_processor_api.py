"""The Processor API through the TopologyTestDriver: a user processor with a state store,
stream-time punctuation on piped records, wall-clock punctuation on
``advance_wall_clock_time``, chains through repartition topics, and the errors user code meets.

Expected outputs follow Kafka Streams' TopologyTestDriver: each record is processed, then the
due stream-time punctuations fire (scheduled at 0, missed intervals collapsed, next aligned);
wall-clock punctuations fire only when the driver's clock is advanced.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamtable import (
    Processor,
    PunctuationType,
    Record,
    Serdes,
    Stores,
    StreamsBuilder,
    Topology,
)
from streamtable.errors import StreamsError, TopologyError
from streamtable.testing import TopologyTestDriver

S, L = Serdes.string(), Serdes.long()


class Counter(Processor):
    """Counts per key in store ``counts`` and forwards ``"<key>=<count>"``; every 10 s of stream
    time forwards ``"st:<count>"`` per key, every 60 s of wall-clock time the total.
    """

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("counts")
        context.schedule(timedelta(seconds=10), PunctuationType.STREAM_TIME, self.on_stream_time)
        context.schedule(timedelta(seconds=60), PunctuationType.WALL_CLOCK_TIME, self.on_wall)

    def process(self, record):
        n = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, n)
        self.context.forward(record.with_value(str(n)))

    def on_stream_time(self, ts):
        for k, v in self.store.all():
            self.context.forward(Record(k, f"st:{v}", ts))

    def on_wall(self, ts):
        total = sum(v for _, v in self.store.all())
        if total:
            self.context.forward(Record("total", f"wall:{total}", ts))


def counter_topology():
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), S, L)
    )
    b.stream("in", key_serde=S, value_serde=S).process(Counter, "counts").to(
        "out", key_serde=S, value_serde=S
    )
    return b.build()


def records(out):
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def test_store_and_both_punctuation_types_follow_kafka_streams_driver(spark):
    with TopologyTestDriver(counter_topology(), initial_wall_clock_time=0) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        inp.pipe_input("a", "x", 1_000)
        # the record, then the first stream-time punctuation (due at 0), next due at 10 s
        assert records(out) == [("a", "1", 1_000), ("a", "st:1", 1_000)]
        inp.pipe_input("b", "x", 2_000)
        inp.pipe_input("a", "x", 5_000)
        assert records(out) == [("b", "1", 2_000), ("a", "2", 5_000)]
        inp.pipe_input("a", "x", 12_000)
        assert records(out) == [
            ("a", "3", 12_000),
            ("a", "st:3", 12_000),
            ("b", "st:1", 12_000),
        ]
        inp.pipe_input("b", "x", 8_000)  # out of order: stream time stays 12 s
        assert records(out) == [("b", "2", 8_000)]
        inp.pipe_input("b", "x", 35_000)  # 20 s and 30 s missed: one punctuation at 35 s
        assert records(out) == [
            ("b", "3", 35_000),
            ("a", "st:3", 35_000),
            ("b", "st:3", 35_000),
        ]
        inp.pipe_input("a", "x", 39_999)  # next due at 40 s
        assert records(out) == [("a", "4", 39_999)]
        # wall clock: scheduled at construction (0) + 60 s
        driver.advance_wall_clock_time(timedelta(seconds=59))
        assert records(out) == []
        driver.advance_wall_clock_time(timedelta(seconds=1))
        assert records(out) == [("total", "wall:7", 60_000)]
        driver.advance_wall_clock_time(timedelta(seconds=150))  # 120 s and 180 s collapse
        assert records(out) == [("total", "wall:7", 210_000)]
        store = driver.get_key_value_store("counts")
        assert store.all() == [("a", 4), ("b", 3)]
        assert store.get("b") == 3


class Dedup(Processor):
    """process_values: forwards a value the first time it is seen for its key."""

    def init(self, context):
        self.context = context
        self.seen = context.get_state_store("seen")

    def process(self, record):
        k = f"{record.key}|{record.value}"
        if self.seen.put_if_absent(k, record.timestamp) is None:
            self.context.forward(record)


def test_process_values_and_process_feed_aggregations_through_repartition_topics(spark):
    class Explode(Processor):  # rekeys: one record per word
        def process(self, record):
            for w in record.value.split():
                self.context.forward(Record(w, 1, record.timestamp))

    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), S, L)
    )
    s = b.stream("in", key_serde=S, value_serde=S)
    s.process_values(Dedup, "seen").group_by_key().count(name="distinct").to_stream().to(
        "distinct-per-user", key_serde=S, value_serde=L
    )
    s.process(Explode).group_by_key(key_serde=S, value_serde=L).count().to_stream().to(
        "words", key_serde=S, value_serde=L
    )
    with TopologyTestDriver(b.build(), {"default.value.serde": S}) as driver:
        inp = driver.create_input_topic("in", S, S)
        per_user = driver.create_output_topic("distinct-per-user", S, L)
        words = driver.create_output_topic("words", S, L)
        for user, text, ts in [("u1", "a b", 1), ("u2", "b", 2), ("u1", "a b", 3), ("u1", "c", 4)]:
            inp.pipe_input(user, text, ts)
        assert per_user.read_key_values_to_list() == [("u1", 1), ("u2", 1), ("u1", 2)]
        assert words.read_key_values_to_map() == {"a": 2, "b": 3, "c": 1}
        assert driver.get_key_value_store("seen").all() == [
            ("u1|a b", 1),
            ("u1|c", 4),
            ("u2|b", 2),
        ]


def test_a_failing_processor_stops_the_driver_naming_processor_and_record(spark):
    class Picky(Processor):
        def process(self, record):
            if record.value == "boom":
                raise ValueError("cannot handle boom")
            self.context.forward(record)

    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).process(Picky, name="picky").to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("k", "fine", 1)
        with pytest.raises(
            StreamsError,
            match=r"Processor 'picky' raised ValueError: cannot handle boom on the record of "
            r"in-0@1 \(key 'k'\).*log_and_continue",
        ):
            inp.pipe_input("k", "boom", 2)
        # the failed query stays stopped: later input is refused, naming the failure
        with pytest.raises(
            StreamsError,
            match=r"stopped at an earlier failure \(.*cannot handle boom.*\).*Create a new "
            r"TopologyTestDriver",
        ):
            inp.pipe_input("k", "fine again", 3)


def test_a_record_with_a_negative_timestamp_never_reaches_a_processor(spark):
    # Kafka Streams drops it at the source (negative extracted timestamp); a Record refuses
    # one, so it must not be built for process(): dropped and counted as negative_timestamp
    class Echo(Processor):
        def process(self, record):
            self.context.forward(record)

    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).process(Echo, name="echo").to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        inp.pipe_input("k", "no time", -1)
        inp.pipe_input("k", "fine", 5)
        assert [(r.value, r.timestamp) for r in out.read_records_to_list()] == [("fine", 5)]


def test_an_aggregation_reading_a_join_directly_counts_the_joined_records(spark):
    # regression: the cut before such an aggregation used to replace the join by its source
    b = StreamsBuilder()
    regions = b.table("regions", key_serde=S, value_serde=S)
    joined = b.stream("clicks", key_serde=S, value_serde=S).join(regions, lambda c, r: r)
    joined.group_by_key().count().to_stream().to("counts", key_serde=S, value_serde=L)
    with TopologyTestDriver(b.build(), {"default.value.serde": S}) as driver:
        driver.create_input_topic("regions", S, S).pipe_input("u1", "eu", 1)
        clicks = driver.create_input_topic("clicks", S, S)
        for ts in (2, 3):
            clicks.pipe_input("u1", "c", ts)
        clicks.pipe_input("u2", "c", 4)  # no region: the inner join drops it
        out = driver.create_output_topic("counts", S, L)
        assert out.read_key_values_to_list() == [("u1", 1), ("u1", 2)]


class WordCountProcessor(Processor):
    """Kafka Streams' ``WordCountProcessorDemo`` processor: counts words in store ``Counts``
    and, every second of stream time, forwards every word's count as a string.
    """

    def init(self, context):
        self.context = context
        self.counts = context.get_state_store("Counts")
        context.schedule(timedelta(seconds=1), PunctuationType.STREAM_TIME, self.punctuate)

    def punctuate(self, ts):
        for word, n in self.counts.all():
            self.context.forward(Record(word, str(n), ts))

    def process(self, record):
        for word in record.value.lower().split(" "):
            self.counts.put(word, (self.counts.get(word) or 0) + 1)


def test_a_hand_built_topology_runs_kafka_streams_word_count_processor_demo(spark):
    topology = (
        Topology()
        .add_source("Source", "streams-plaintext-input", key_serde=S, value_serde=S)
        .add_processor("Process", WordCountProcessor, "Source")
        .add_state_store(
            Stores.key_value_store_builder(Stores.in_memory_key_value_store("Counts"), S, L),
            "Process",
        )
        .add_sink(
            "Sink", "streams-wordcount-processor-output", "Process", key_serde=S, value_serde=S
        )
    )
    with TopologyTestDriver(topology) as driver:
        inp = driver.create_input_topic("streams-plaintext-input", S, S)
        out = driver.create_output_topic("streams-wordcount-processor-output", S, S)
        inp.pipe_input(None, "all streams lead to kafka", 0)
        assert out.read_key_values_to_map() == {
            "all": "1",
            "streams": "1",
            "lead": "1",
            "to": "1",
            "kafka": "1",
        }
        inp.pipe_input(None, "hello kafka streams", 500)  # stream time 500 < 1000: no punctuation
        assert out.is_empty()
        inp.pipe_input(None, "join kafka summit", 1_000)
        assert out.read_key_values_to_map() == {
            "all": "1",
            "streams": "2",
            "lead": "1",
            "to": "1",
            "kafka": "3",
            "hello": "1",
            "join": "1",
            "summit": "1",
        }
        assert driver.get_key_value_store("Counts").get("kafka") == 3


def test_hand_built_topologies_refuse_what_kafka_streams_refuses():
    t = Topology().add_source("Source", "in")
    with pytest.raises(TopologyError, match="Processor Source is already added"):
        t.add_source("Source", "other")
    with pytest.raises(TopologyError, match="Parent processor Nope is not added yet for P"):
        t.add_processor("P", WordCountProcessor, "Nope")
    with pytest.raises(TopologyError, match="you must provide at least one topic"):
        t.add_source("S2")
    with pytest.raises(TopologyError, match="Processor Missing is not added yet"):
        t.add_state_store(
            Stores.key_value_store_builder(Stores.in_memory_key_value_store("Counts"), S, L),
            "Missing",
        )
    built = StreamsBuilder()
    built.stream("in").to("out")
    with pytest.raises(TopologyError, match="built by a StreamsBuilder and cannot be changed"):
        built.build().add_source("x", "y")


class WindowCounter(Processor):
    """Counts each key's records per 10 s window in window store ``per-10s`` (retention 30 s)
    and forwards ``"<window start>:<count>"``.
    """

    def init(self, context):
        self.context = context
        self.windows = context.get_state_store("per-10s")

    def process(self, record):
        start = record.timestamp // 10_000 * 10_000
        n = (self.windows.fetch(record.key, start) or 0) + 1
        self.windows.put(record.key, n, start)
        self.context.forward(record.with_value(f"{start}:{n}"))


def test_a_window_store_keeps_windows_within_its_retention(spark):
    b = StreamsBuilder()
    b.add_state_store(
        Stores.window_store_builder(
            Stores.persistent_window_store("per-10s", timedelta(seconds=30), timedelta(seconds=10)),
            S,
            L,
        )
    )
    b.stream("in", key_serde=S, value_serde=S).process(WindowCounter, "per-10s").to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        for key, ts in [("a", 1_000), ("a", 9_000), ("b", 12_000), ("a", 15_000)]:
            inp.pipe_input(key, "x", ts)
        assert out.read_values_to_list() == ["0:1", "0:2", "10000:1", "10000:1"]
        store = driver.get_window_store("per-10s")
        assert store.fetch("a", 0, 100_000) == [(0, 2), (10_000, 1)]
        # observed stream time 40 s: windows starting at or before 10 s have expired
        inp.pipe_input("a", "x", 40_000)
        inp.pipe_input("a", "x", 5_000)  # its window (0) expired: counted afresh, not stored
        assert out.read_values_to_list() == ["40000:1", "0:1"]
        assert store.fetch("a", 0, 100_000) == [(40_000, 1)]  # expired windows removed
        assert store.fetch("b", 0, 100_000) == []
