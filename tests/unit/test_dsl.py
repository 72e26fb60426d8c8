import subprocess
import sys
from datetime import timedelta

import pytest

from streamtable import (
    BufferConfig,
    JoinWindows,
    Serdes,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
)
from streamtable.errors import TopologyError
from streamtable.topology.nodes import AggregateNode, RecordOpKind, RecordOpNode, RepartitionNode

# Kafka Streams 4.3's describe() of its WordCountDemo topology (count named "counts-store"),
# printed by the JVM for the same DSL calls.
WORDCOUNT_DESCRIPTION = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [streams-plaintext-input])
      --> KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])
      --> KSTREAM-KEY-SELECT-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
      --> counts-store-repartition-filter
      <-- KSTREAM-FLATMAPVALUES-0000000001
    Processor: counts-store-repartition-filter (stores: [])
      --> counts-store-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000002
    Sink: counts-store-repartition-sink (topic: counts-store-repartition)
      <-- counts-store-repartition-filter

  Sub-topology: 1
    Source: counts-store-repartition-source (topics: [counts-store-repartition])
      --> KSTREAM-AGGREGATE-0000000003
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts-store])
      --> KTABLE-TOSTREAM-0000000007
      <-- counts-store-repartition-source
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-AGGREGATE-0000000003
    Sink: KSTREAM-SINK-0000000008 (topic: streams-wordcount-output)
      <-- KTABLE-TOSTREAM-0000000007

"""


def wordcount_builder():
    builder = StreamsBuilder()
    lines = builder.stream(
        "streams-plaintext-input", key_serde=Serdes.string(), value_serde=Serdes.string()
    )
    counts = (
        lines.flat_map_values(lambda v: v.lower().split())
        .group_by(lambda k, w: w)
        .count(name="counts-store")
    )
    counts.to_stream().to("streams-wordcount-output", value_serde=Serdes.long())
    return builder


def test_describe_matches_kafka_streams_layout():
    assert str(wordcount_builder().build().describe()) == WORDCOUNT_DESCRIPTION


def test_names_are_deterministic():
    a = wordcount_builder().build()
    b = wordcount_builder().build()
    assert [n.name for n in a.graph.nodes] == [n.name for n in b.graph.nodes]
    assert a.fingerprint() == b.fingerprint()


def test_group_by_inserts_repartition_and_aggregate():
    nodes = wordcount_builder().build().graph.nodes
    kinds = [type(n).__name__ for n in nodes]
    assert kinds == [
        "SourceNode",
        "RecordOpNode",
        "RecordOpNode",
        "RepartitionNode",
        "AggregateNode",
        "RecordOpNode",
        "SinkNode",
    ]
    rep = next(n for n in nodes if isinstance(n, RepartitionNode))
    assert rep.topic_name == "counts-store-repartition"
    agg = next(n for n in nodes if isinstance(n, AggregateNode))
    assert agg.store_name == "counts-store" and agg.aggregation.native == "count"


def test_group_by_key_repartitions_only_after_key_change():
    b = StreamsBuilder()
    s = b.stream("in", key_serde=Serdes.string(), value_serde=Serdes.string())
    s.map_values(str.upper).group_by_key().count().to_stream().to("out")
    assert not any(isinstance(n, RepartitionNode) for n in b.build().graph.nodes)
    b = StreamsBuilder()
    s = b.stream("in")
    s.select_key(lambda k, v: v).group_by_key().count().to_stream().to("out")
    assert sum(isinstance(n, RepartitionNode) for n in b.build().graph.nodes) == 1


def test_sugar_is_expressed_through_core_nodes():
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter_not(lambda k, v: v is None).select_key(lambda k, v: v).map_values(len).to("out")
    ops = [n for n in b.build().graph.nodes if isinstance(n, RecordOpNode)]
    assert [n.kind for n in ops] == [
        RecordOpKind.FILTER,
        RecordOpKind.SELECT_KEY,
        RecordOpKind.MAP_VALUES,
    ]
    assert ops[0].fn("k", None) is False and ops[0].fn("k", "v") is True
    assert ops[1].fn("k", "v") == "v"


def test_split_routes_to_first_matching_branch():
    b = StreamsBuilder()
    branches = (
        b.stream("in")
        .split(name="s-")
        .branch(lambda k, v: v > 10, name="big")
        .branch(lambda k, v: v > 5, name="mid")
        .default_branch(name="small")
    )
    assert set(branches) == {"s-big", "s-mid", "s-small"}
    preds = {
        name: b._graph.nodes()[-3 + i].fn for i, name in enumerate(["s-big", "s-mid", "s-small"])
    }
    assert [preds["s-big"](None, v) for v in (11, 7, 1)] == [True, False, False]
    assert [preds["s-mid"](None, v) for v in (11, 7, 1)] == [False, True, False]
    assert [preds["s-small"](None, v) for v in (11, 7, 1)] == [False, False, True]


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda s: s.filter(5),
            r"KStream.filter expects a callable taking \(key, value\) or a column expression "
            r"\(streamtable.functions, e.g. F.col\(.value.\)\); got int 5",
        ),
        (
            lambda s: s.map_values(lambda k, v: v),
            r"KStream.map_values expects a callable taking \(value\), i.e. 1 positional",
        ),
        (lambda s: s.map(lambda v: v), r"KStream.map expects a callable taking \(key, value\)"),
        (lambda s: s.to("bad topic!"), r"KStream.to: 'bad topic!' is not a legal Kafka topic name"),
        (
            lambda s: s.group_by_key().aggregate(dict, lambda k, v: v),
            r"KGroupedStream.aggregate expects a callable taking \(key, value, aggregate\)",
        ),
        (lambda s: s.group_by_key().count(name="x y"), r"Illegal store name 'x y'"),
        (
            lambda s: s.repartition(num_partitions=0),
            r"num_partitions must be positive; got 0 \(Kafka Streams refuses it too: "
            r"'Number of partitions must be at least 1'\)",
        ),
    ],
)
def test_bad_definitions_fail_at_definition_time(build, message):
    s = StreamsBuilder().stream("in")
    with pytest.raises(TopologyError, match=message):
        build(s)


def test_duplicate_names_are_refused():
    s = StreamsBuilder().stream("in")
    s.filter(lambda k, v: True, name="f")
    with pytest.raises(
        TopologyError,
        match=r"The processor name 'f' is used twice.*\(Kafka Streams refuses it too: "
        r"'Processor \.\.\. is already added'\)",
    ):
        s.filter(lambda k, v: True, name="f")
    s.group_by_key().count(name="c")
    with pytest.raises(
        TopologyError, match=r"store name 'c' is used twice.*'A different StateStore has already"
    ):
        s.group_by_key().count(name="c")
    # Kafka Streams keeps the two namespaces apart; streamtable says it does not yet
    with pytest.raises(
        TopologyError,
        match=r"store name 'f' is used twice.*Kafka Streams keeps processor and store names "
        r"apart, streamtable does not yet",
    ):
        s.group_by_key().count(name="f")


def test_build_without_output_is_refused():
    b = StreamsBuilder()
    b.stream("in").filter(lambda k, v: True)
    with pytest.raises(
        TopologyError,
        match=r"has no output: end it with KStream.to\(topic\) or KStream.foreach\(fn\)\. "
        r"\(Kafka Streams also runs a topology without one.*streamtable does not yet",
    ):
        b.build()


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: TimeWindows.of_size_with_no_grace(timedelta(0)),
            r"size must be positive; got 0 ms \(Kafka Streams' TimeWindows.ofSizeAndGrace "
            r"rejects it too\)",
        ),
        (
            lambda: TimeWindows.of_size_and_grace(timedelta(seconds=1), timedelta(seconds=-1)),
            r"grace must not be negative; got -1000 ms \(Kafka Streams' "
            r"TimeWindows.ofSizeAndGrace rejects it too\)",
        ),
        (
            lambda: TimeWindows.of_size_with_no_grace(timedelta(seconds=1)).advance_by(
                timedelta(seconds=2)
            ),
            r"advance must be positive and at most the window size .*\(Kafka Streams' "
            r"TimeWindows.advanceBy rejects it too\)",
        ),
        (
            lambda: TimeWindows.of_size_with_no_grace("1h"),
            r"must be a datetime.timedelta .*Kafka Streams takes a java.time.Duration",
        ),
        (
            lambda: SlidingWindows.of_time_difference_with_no_grace(timedelta(0)),
            r"SlidingWindows time difference must be positive; got 0 ms \(Kafka Streams "
            r"accepts 0 .*streamtable does not yet",
        ),
        (
            lambda: SlidingWindows.of_time_difference_with_no_grace(-1),
            r"SlidingWindows time difference must be positive; got -1 ms \(Kafka Streams' "
            r"SlidingWindows.ofTimeDifferenceAndGrace rejects it too\)",
        ),
        (
            lambda: SlidingWindows.of_time_difference_and_grace(1000, -1),
            r"SlidingWindows grace must not be negative; got -1 ms \(Kafka Streams' "
            r"SlidingWindows.ofTimeDifferenceAndGrace rejects it too\)",
        ),
        (
            lambda: SessionWindows.of_inactivity_gap_with_no_grace(-5),
            r"SessionWindows inactivity gap must be positive; got -5 ms \(Kafka Streams' "
            r"SessionWindows.ofInactivityGapAndGrace rejects it too\)",
        ),
        (
            lambda: JoinWindows.of_time_difference_with_no_grace(-1),
            r"JoinWindows time difference must not be negative; got -1 ms \(Kafka Streams' "
            r"JoinWindows.ofTimeDifferenceAndGrace rejects it too\)",
        ),
        (
            lambda: JoinWindows.of_time_difference_with_no_grace(5).before(-6),
            r"before \+ after must not be negative; got before -6 ms, after 5 ms \(Kafka "
            r"Streams' JoinWindows.before rejects it too\)",
        ),
        (
            lambda: SessionWindows.of_inactivity_gap_and_grace(timedelta(hours=1), -1),
            "SessionWindows grace must not be negative",
        ),
        (
            lambda: Suppressed.until_time_limit(timedelta(seconds=-1)),
            r"time_to_wait must not be negative; got -1000 ms \(Kafka Streams does not check "
            r"it.*pass 0",
        ),
        (
            lambda: Suppressed.until_window_closes(
                BufferConfig.max_records(5).emit_early_when_full()
            ),
            r"until_window_closes needs a strict buffer.*untilWindowCloses takes only a "
            r"StrictBufferConfig",
        ),
        (
            # maxRecords is an EagerBufferConfig in Kafka Streams: untilWindowCloses does not
            # take it (a compile error there)
            lambda: Suppressed.until_window_closes(BufferConfig.max_records(5)),
            r"until_window_closes needs a strict buffer: use BufferConfig.unbounded\(\) or "
            r"....shut_down_when_full\(\)",
        ),
        (lambda: BufferConfig.max_bytes(0), "BufferConfig.max_bytes must be a positive int"),
    ],
)
def test_bad_windows(make, message):
    with pytest.raises(TopologyError, match=message):
        make()


def test_bounded_buffers_emit_early_when_full_unless_told_to_shut_down():
    # Kafka Streams' BufferConfig.maxRecords/maxBytes give an EagerBufferConfig
    assert BufferConfig.max_records(5).emit_early and BufferConfig.max_bytes(5).emit_early
    assert not BufferConfig.unbounded().emit_early
    assert Suppressed.until_time_limit(10, BufferConfig.max_records(5)).spec().emit_early
    strict = BufferConfig.max_records(5).shut_down_when_full()
    spec = Suppressed.until_window_closes(strict).spec()
    assert (spec.max_records, spec.emit_early) == (5, False)


@pytest.mark.parametrize(
    "size, advance, ts, starts",
    [
        (10, 10, 0, [0]),
        (10, 10, 9, [0]),
        (10, 10, 10, [10]),
        (10, 5, 12, [5, 10]),
        (10, 3, 12, [3, 6, 9, 12]),
        (10, 3, 1, [0]),  # no window starts before 0 (Kafka Streams' TimeWindows.windowsFor)
    ],
)
def test_window_assignment(size, advance, ts, starts):
    assert TimeWindows(size, advance, 0).windows_for(ts) == starts


def test_dsl_and_topology_do_not_import_pyspark():
    code = (
        "import sys, streamtable, streamtable.dsl.builder, streamtable.topology.topology;"
        "from streamtable import StreamsBuilder;"
        "StreamsBuilder().stream('a').to('b');"
        "print('pyspark' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _counts(windows=None):
    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=Serdes.string(), value_serde=Serdes.string()).group_by_key()
    return grouped if windows is None else grouped.windowed_by(windows)


def test_suppress_until_window_closes_needs_a_windowed_aggregation():
    with pytest.raises(
        TopologyError,
        match=r"until_window_closes needs a windowed table.*\(Kafka Streams refuses it too: "
        r"'Window close time is only defined for windowed computations'\)",
    ):
        _counts().count(name="c").suppress(Suppressed.until_window_closes())
    table = _counts(TimeWindows.of_size_with_no_grace(1000)).count(name="c")
    # a streamtable limitation: the message says Kafka Streams accepts it
    with pytest.raises(
        TopologyError,
        match=r"must follow the windowed aggregation directly.*Kafka Streams also accepts "
        r"operators in between.*streamtable does not yet: apply suppress\(\) first",
    ):
        table.filter(lambda k, v: v > 1).suppress(Suppressed.until_window_closes())
    with pytest.raises(TopologyError, match="expects a Suppressed"):
        table.suppress("final")
    # a time limit works on any table
    _counts().count(name="d").suppress(Suppressed.until_time_limit(timedelta(seconds=1)))


def test_windowed_aggregation_arguments_are_checked_at_definition():
    with pytest.raises(TopologyError, match=r"needs merger=fn.*requires a Merger too"):
        _counts(SessionWindows.of_inactivity_gap_with_no_grace(1000)).aggregate(
            lambda: 0, lambda k, v, a: a + 1
        )
    with pytest.raises(
        TopologyError,
        match=r"retention must be at least .* 1500 ms; got 1000 ms \(Kafka Streams' window and "
        r"session stores refuse a shorter one too\)",
    ):
        _counts(TimeWindows.of_size_and_grace(1000, 500)).count(retention=1000)
    with pytest.raises(TopologyError, match="retention must be at least .* 2500 ms"):
        _counts(SlidingWindows.of_time_difference_and_grace(1000, 500)).count(retention=2000)
    with pytest.raises(
        TopologyError,
        match=r"retention applies to windowed aggregations only.*Materialized.withRetention.*"
        r"drop retention=",
    ):
        _counts().count(retention=timedelta(hours=1))
    with pytest.raises(
        TopologyError,
        match="expects TimeWindows, SlidingWindows, SessionWindows or a Windows subclass",
    ):
        _counts().windowed_by(JoinWindows.of_time_difference_with_no_grace(10))
    with pytest.raises(TopologyError, match="late_records_topic"):
        _counts().windowed_by(TimeWindows.of_size_with_no_grace(10), late_records_topic="bad topic")


def test_windowed_table_limitations_say_kafka_streams_supports_them():
    windowed = _counts(TimeWindows.of_size_with_no_grace(1000)).count(name="w")
    other = windowed.filter(lambda k, v: True)
    with pytest.raises(
        TopologyError,
        match=r"Joins of windowed tables are not supported yet \(Kafka Streams joins KTables "
        r"keyed by Windowed like any other\): join the input streams",
    ):
        windowed.join(other, lambda a, b: a)
    with pytest.raises(
        TopologyError,
        match=r"KTable.group_by on a windowed table is not supported yet \(Kafka Streams groups "
        r"a windowed KTable like any other\); use to_stream\(\).group_by",
    ):
        windowed.group_by(lambda k, v: (k.key, v))


def test_stream_definition_errors_name_kafka_streams_behaviour():
    b = StreamsBuilder()
    with pytest.raises(
        TopologyError, match=r"needs at least one topic \(Kafka Streams refuses it too"
    ):
        b.stream([])
    with pytest.raises(
        TopologyError, match=r"'earliest' or 'latest'; got 'none'\. .*none\(\) and byDuration"
    ):
        b.stream("in", auto_offset_reset="none")
    with pytest.raises(TopologyError, match=r"Kafka refuses it with InvalidTopicException"):
        b.stream("bad topic")
    with pytest.raises(
        TopologyError,
        match=r"The topology is empty.*'Topology has no stream threads and no global threads'",
    ):
        StreamsBuilder().build()


def test_materialized_names_stores_and_sets_their_serdes_retention_and_logging():
    from datetime import timedelta

    from streamtable import Materialized, Serdes, StreamsBuilder, TimeWindows
    from streamtable.topology.nodes import AggregateNode, TableAggregateNode, TableSourceNode

    S, L = Serdes.string(), Serdes.long()
    b = StreamsBuilder()
    grouped = b.stream("in", value_serde=L).group_by_key()
    grouped.aggregate(
        lambda: 0,
        lambda k, v, a: a + v,
        Materialized.as_("totals").with_key_serde(S).with_value_serde(L),
    ).to_stream().to("out")
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1))).count(
        Materialized.as_("per-minute").with_retention(timedelta(hours=1))
    ).to_stream().to("out2")
    grouped.count(Materialized.as_("hidden").with_logging_disabled()).to_stream().to("out3")
    table = b.table("t", name=Materialized.as_("t-store").with_key_serde(S).with_value_serde(S))
    table.group_by(lambda k, v: (v, k)).count(Materialized.as_("per-value")).to_stream().to("o4")
    nodes = {getattr(n, "store_name", None): n for n in b.build().graph.nodes}
    totals = nodes["totals"]
    assert isinstance(totals, AggregateNode) and totals.queryable
    assert totals.key_serde == S and totals.store_value_serde == L
    assert nodes["per-minute"].retention_ms == 3_600_000
    assert not nodes["hidden"].queryable  # logging disabled: no changelog to serve it from
    source = nodes["t-store"]
    assert isinstance(source, TableSourceNode) and source.queryable and source.value_serde == S
    assert isinstance(nodes["per-value"], TableAggregateNode) and nodes["per-value"].queryable
    with pytest.raises(TopologyError, match="takes a store name or a Materialized; got int 3"):
        grouped.count(3)


@pytest.mark.parametrize("serde", [Serdes.string(), Serdes.bytes()])
def test_a_count_store_whose_value_serde_cannot_hold_an_int_is_refused_when_built(serde):
    """Kafka Streams' count takes a Materialized<K, Long, ...> (Java refuses another value
    serde at compile time); streamtable refuses it when the topology is built, naming the
    operator and the serde, for grouped streams, windowed streams and grouped tables.
    """
    from streamtable import Materialized
    from streamtable.serde import Serde

    def store() -> Materialized:
        return Materialized.as_("counts").with_value_serde(serde)

    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key()
    five_s = TimeWindows.of_size_with_no_grace(timedelta(seconds=5))
    table = b.table("t", key_serde=Serdes.string(), value_serde=Serdes.string())
    sessions = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(seconds=5))
    cases = {
        "KGroupedStream.count": lambda: grouped.count(store()),
        "TimeWindowedKStream.count": lambda: grouped.windowed_by(five_s).count(store()),
        "SessionWindowedKStream.count": lambda: grouped.windowed_by(sessions).count(store()),
        "KGroupedTable.count": lambda: table.group_by(lambda k, v: (v, k)).count(store()),
    }
    for operation, count in cases.items():
        with pytest.raises(TopologyError) as refused:
            count()
        assert str(refused.value).startswith(
            f"{operation}: the store's value serde {serde!r} cannot hold a count (an int); "
        ), refused.value
        assert "with_value_serde(Serdes.long())" in str(refused.value)

    # serdes that carry an int there and back are accepted, as is a serde of the user's class
    class Counts(Serde):
        def _serialize(self, obj):
            return str(obj).encode()

        def _deserialize(self, data):
            return int(data)

    for ok in (Serdes.long(), Serdes.integer(), Serdes.double(), Serdes.json(), Counts()):
        grouped.count(Materialized.as_(f"ok-{ok.kind}-{type(ok).__name__}").with_value_serde(ok))
    # a serde factory not called: named, not an AttributeError
    with pytest.raises(TopologyError, match=r"value serde must be a Serde \(e\.g\. Serdes"):
        grouped.count(Materialized.as_("not-a-serde").with_value_serde(Serdes.long))


def test_a_rekeyed_stream_joined_twice_reuses_its_repartition_as_kafka_streams_does():
    """``KStreamImpl.repartitionForJoin`` keeps the repartition of an unnamed join for the
    stream's next one (its name counter advancing all the same); the second join used to be
    refused as a processor name used twice.
    """
    S = Serdes.string()
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    t1 = b.table("t1", key_serde=S, value_serde=S)
    t2 = b.table("t2", key_serde=S, value_serde=S)
    s.join(t1, lambda v, t: v).to("o1", key_serde=S, value_serde=S)
    s.join(t2, lambda v, t: v).to("o2", key_serde=S, value_serde=S)
    text = str(b.build().describe())
    assert "--> KSTREAM-JOIN-0000000011, KSTREAM-JOIN-0000000016" in text
    assert text.count("(topic: KSTREAM-KEY-SELECT-0000000001-repartition)") == 1
    # the repartition a named join added is the one the next unnamed join reuses
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    t1 = b.table("t1", key_serde=S, value_serde=S)
    t2 = b.table("t2", key_serde=S, value_serde=S)
    s.join(t1, lambda v, t: v, name="x").to("o1", key_serde=S, value_serde=S)
    s.join(t2, lambda v, t: v).to("o2", key_serde=S, value_serde=S)
    text = str(b.build().describe())
    assert "(topic: x-repartition)" in text and "KEY-SELECT-0000000001-repartition" not in text
