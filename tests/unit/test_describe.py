"""``Topology.describe()`` follows Kafka Streams' naming and layout rules (no JVM needed).

Each expected text below was printed by Kafka Streams 4.3's ``Topology.describe()`` for the same
DSL calls in Java (tests/integration/test_kstreams_describe.py compares the reference topologies
against the JVM itself).
"""

from datetime import timedelta

import pytest

from streamtable import JoinWindows, StreamsBuilder, Suppressed, TimeWindows
from streamtable.topology.describe import _java_hash_order, _java_string_hash, _JavaTreeSet

FIVE_MINUTES = JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5))


def _table_tostream(b):
    # an unnamed table only read as a stream: Kafka Streams does not materialize it (stores:
    # []), yet its store name took index 0 before the source
    b.table("users").to_stream().to("users-changes")


TABLE_TOSTREAM = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [users])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [])
      --> KTABLE-TOSTREAM-0000000003
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-TOSTREAM-0000000003 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000004 (topic: users-changes)
      <-- KTABLE-TOSTREAM-0000000003

"""


def _global_leftjoin_two(b):
    # a GlobalKTable is a 'global store' sub-topology numbered in writing order; the stream-
    # GlobalKTable join is KSTREAM-LEFTJOIN and lists no store
    s = b.stream("s")
    g = b.global_table("g")
    s.left_join(g, lambda k, v: v, lambda v, gv: v).to("o")
    b.stream("s2").to("o2")


GLOBAL_LEFTJOIN_TWO = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [s])
      --> KSTREAM-LEFTJOIN-0000000004
    Processor: KSTREAM-LEFTJOIN-0000000004 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-SOURCE-0000000000
    Sink: KSTREAM-SINK-0000000005 (topic: o)
      <-- KSTREAM-LEFTJOIN-0000000004

  Sub-topology: 1 for global store (will not generate tasks)
    Source: KSTREAM-SOURCE-0000000002 (topics: [g])
      --> KTABLE-SOURCE-0000000003
    Processor: KTABLE-SOURCE-0000000003 (stores: [g-STATE-STORE-0000000001])
      --> none
      <-- KSTREAM-SOURCE-0000000002
  Sub-topology: 2
    Source: KSTREAM-SOURCE-0000000006 (topics: [s2])
      --> KSTREAM-SINK-0000000007
    Sink: KSTREAM-SINK-0000000007 (topic: o2)
      <-- KSTREAM-SOURCE-0000000006

"""


def _ss_leftjoin(b):
    # a stream-stream left join: windowed processors, JOINTHIS/OUTEROTHER, the shared store,
    # stores printed in Java HashSet order
    left, right = b.stream("l"), b.stream("r")
    left.left_join(right, lambda a, c: a, FIVE_MINUTES).to("o")


SS_LEFTJOIN = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [l])
      --> KSTREAM-WINDOWED-0000000002
    Source: KSTREAM-SOURCE-0000000001 (topics: [r])
      --> KSTREAM-WINDOWED-0000000003
    Processor: KSTREAM-WINDOWED-0000000002 (stores: [KSTREAM-JOINTHIS-0000000004-store])
      --> KSTREAM-JOINTHIS-0000000004
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-WINDOWED-0000000003 (stores: [KSTREAM-OUTEROTHER-0000000005-store])
      --> KSTREAM-OUTEROTHER-0000000005
      <-- KSTREAM-SOURCE-0000000001
    Processor: KSTREAM-JOINTHIS-0000000004 (stores: [KSTREAM-OUTEROTHER-0000000005-store, KSTREAM-OUTERSHARED-0000000004-store])
      --> KSTREAM-MERGE-0000000006
      <-- KSTREAM-WINDOWED-0000000002
    Processor: KSTREAM-OUTEROTHER-0000000005 (stores: [KSTREAM-JOINTHIS-0000000004-store, KSTREAM-OUTERSHARED-0000000004-store])
      --> KSTREAM-MERGE-0000000006
      <-- KSTREAM-WINDOWED-0000000003
    Processor: KSTREAM-MERGE-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- KSTREAM-JOINTHIS-0000000004, KSTREAM-OUTEROTHER-0000000005
    Sink: KSTREAM-SINK-0000000007 (topic: o)
      <-- KSTREAM-MERGE-0000000006

"""


def _split_unnamed(b):
    # split() without a name: the KSTREAM-BRANCH splitter and its children <splitter><position
    # or name>
    branches = b.stream("in").split().branch(lambda k, v: len(v) > 3).default_branch(name="rest")
    for name in sorted(branches):
        branches[name].to("o-" + name)


SPLIT_UNNAMED = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-BRANCH-0000000001
    Processor: KSTREAM-BRANCH-0000000001 (stores: [])
      --> KSTREAM-BRANCH-00000000011, KSTREAM-BRANCH-0000000001rest
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-BRANCH-00000000011 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KSTREAM-BRANCH-0000000001
    Processor: KSTREAM-BRANCH-0000000001rest (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-BRANCH-0000000001
    Sink: KSTREAM-SINK-0000000004 (topic: o-KSTREAM-BRANCH-00000000011)
      <-- KSTREAM-BRANCH-00000000011
    Sink: KSTREAM-SINK-0000000005 (topic: o-KSTREAM-BRANCH-0000000001rest)
      <-- KSTREAM-BRANCH-0000000001rest

"""


def _peek_foreach(b):
    # successors are ordered when they are linked: FOREACH (1 node) before MAPVALUES (3 nodes)
    s = b.stream("in").peek(lambda k, v: None)
    s.foreach(lambda k, v: None)
    s.map_values(lambda v: v).flat_map(lambda k, v: [(k, v)]).to("o")


PEEK_FOREACH = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-PEEK-0000000001
    Processor: KSTREAM-PEEK-0000000001 (stores: [])
      --> KSTREAM-FOREACH-0000000002, KSTREAM-MAPVALUES-0000000003
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-MAPVALUES-0000000003 (stores: [])
      --> KSTREAM-FLATMAP-0000000004
      <-- KSTREAM-PEEK-0000000001
    Processor: KSTREAM-FLATMAP-0000000004 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-MAPVALUES-0000000003
    Processor: KSTREAM-FOREACH-0000000002 (stores: [])
      --> none
      <-- KSTREAM-PEEK-0000000001
    Sink: KSTREAM-SINK-0000000005 (topic: o)
      <-- KSTREAM-FLATMAP-0000000004

"""


def _repartition(b):
    # repartition(): unnamed (KSTREAM-REPARTITION prefix, generated sink/filter/source) and named
    b.stream("in").repartition().map_values(lambda v: v).repartition(name="by-user").to("o")


REPARTITION = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-FILTER-0000000003
    Processor: KSTREAM-FILTER-0000000003 (stores: [])
      --> KSTREAM-SINK-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Sink: KSTREAM-SINK-0000000002 (topic: KSTREAM-REPARTITION-0000000001-repartition)
      <-- KSTREAM-FILTER-0000000003

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000004 (topics: [KSTREAM-REPARTITION-0000000001-repartition])
      --> KSTREAM-MAPVALUES-0000000005
    Processor: KSTREAM-MAPVALUES-0000000005 (stores: [])
      --> by-user-repartition-filter
      <-- KSTREAM-SOURCE-0000000004
    Processor: by-user-repartition-filter (stores: [])
      --> by-user-repartition-sink
      <-- KSTREAM-MAPVALUES-0000000005
    Sink: by-user-repartition-sink (topic: by-user-repartition)
      <-- by-user-repartition-filter

  Sub-topology: 2
    Source: by-user-repartition-source (topics: [by-user-repartition])
      --> KSTREAM-SINK-0000000009
    Sink: KSTREAM-SINK-0000000009 (topic: o)
      <-- by-user-repartition-source

"""


def _fk_leftjoin_named(b):
    # a named foreign-key join: TableJoined.as names every processor and topic; two sub-topologies
    orders, customers = b.table("orders"), b.table("customers")
    joined = orders.left_join(
        customers, lambda o, c: o, foreign_key_extractor=lambda o: o, name="oc"
    )
    joined.to_stream().to("o")


FK_LEFTJOIN_NAMED = """\
Topologies:
   Sub-topology: 0
    Source: oc-subscription-response-source (topics: [oc-subscription-response-topic])
      --> oc-subscription-response-resolver
    Source: KSTREAM-SOURCE-0000000001 (topics: [orders])
      --> KTABLE-SOURCE-0000000002
    Processor: oc-subscription-response-resolver (stores: [orders-STATE-STORE-0000000000])
      --> oc-result
      <-- oc-subscription-response-source
    Processor: KTABLE-SOURCE-0000000002 (stores: [orders-STATE-STORE-0000000000])
      --> oc-subscription-registration-processor
      <-- KSTREAM-SOURCE-0000000001
    Processor: oc-result (stores: [])
      --> KTABLE-TOSTREAM-0000000020
      <-- oc-subscription-response-resolver
    Processor: KTABLE-TOSTREAM-0000000020 (stores: [])
      --> KSTREAM-SINK-0000000021
      <-- oc-result
    Processor: oc-subscription-registration-processor (stores: [])
      --> oc-subscription-registration-sink
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000021 (topic: o)
      <-- KTABLE-TOSTREAM-0000000020
    Sink: oc-subscription-registration-sink (topic: oc-subscription-registration-topic)
      <-- oc-subscription-registration-processor

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000004 (topics: [customers])
      --> KTABLE-SOURCE-0000000005
    Source: oc-subscription-registration-source (topics: [oc-subscription-registration-topic])
      --> oc-subscription-receive
    Processor: KTABLE-SOURCE-0000000005 (stores: [customers-STATE-STORE-0000000003])
      --> oc-foreign-join-subscription
      <-- KSTREAM-SOURCE-0000000004
    Processor: oc-subscription-receive (stores: [oc-subscription-store])
      --> oc-subscription-join-foreign
      <-- oc-subscription-registration-source
    Processor: oc-foreign-join-subscription (stores: [oc-subscription-store])
      --> oc-subscription-response-sink
      <-- KTABLE-SOURCE-0000000005
    Processor: oc-subscription-join-foreign (stores: [customers-STATE-STORE-0000000003])
      --> oc-subscription-response-sink
      <-- oc-subscription-receive
    Sink: oc-subscription-response-sink (topic: oc-subscription-response-topic)
      <-- oc-subscription-join-foreign, oc-foreign-join-subscription

"""


def _named_everything(b):
    # user names replace generated ones, but named processors still advance the counter
    (
        b.stream("in", name="src")
        .filter(lambda k, v: True, name="f")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
        .count(name="c")
        .suppress(Suppressed.until_window_closes(), name="final")
        .to_stream(name="ts")
        .to("o", name="snk")
    )
    b.table("t").filter(lambda k, v: True, name="tf").map_values(
        lambda v: v, name="tm"
    ).to_stream().to("o2")


NAMED_EVERYTHING = """\
Topologies:
   Sub-topology: 0
    Source: src (topics: [in])
      --> f
    Processor: f (stores: [])
      --> KSTREAM-AGGREGATE-0000000002
      <-- src
    Processor: KSTREAM-AGGREGATE-0000000002 (stores: [c])
      --> final
      <-- f
    Processor: final (stores: [final-store])
      --> ts
      <-- KSTREAM-AGGREGATE-0000000002
    Processor: ts (stores: [])
      --> snk
      <-- final
    Sink: snk (topic: o)
      <-- ts

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [t])
      --> KTABLE-SOURCE-0000000007
    Processor: KTABLE-SOURCE-0000000007 (stores: [])
      --> tf
      <-- KSTREAM-SOURCE-0000000006
    Processor: tf (stores: [])
      --> tm
      <-- KTABLE-SOURCE-0000000007
    Processor: tm (stores: [])
      --> KTABLE-TOSTREAM-0000000010
      <-- tf
    Processor: KTABLE-TOSTREAM-0000000010 (stores: [])
      --> KSTREAM-SINK-0000000011
      <-- tm
    Sink: KSTREAM-SINK-0000000011 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000010

"""


def _tt_join_named(b):
    # a named table-table join: <name>-join-this, <name>-join-other and the merge <name>
    left, right = b.table("l"), b.table("r")
    left.join(right, lambda x, y: x, name="lr").to_stream().to("o")


TT_JOIN_NAMED = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [l])
      --> KTABLE-SOURCE-0000000002
    Source: KSTREAM-SOURCE-0000000004 (topics: [r])
      --> KTABLE-SOURCE-0000000005
    Processor: KTABLE-SOURCE-0000000002 (stores: [l-STATE-STORE-0000000000])
      --> lr-join-this
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-SOURCE-0000000005 (stores: [r-STATE-STORE-0000000003])
      --> lr-join-other
      <-- KSTREAM-SOURCE-0000000004
    Processor: lr-join-other (stores: [l-STATE-STORE-0000000000])
      --> lr
      <-- KTABLE-SOURCE-0000000005
    Processor: lr-join-this (stores: [r-STATE-STORE-0000000003])
      --> lr
      <-- KTABLE-SOURCE-0000000002
    Processor: lr (stores: [])
      --> KTABLE-TOSTREAM-0000000009
      <-- lr-join-this, lr-join-other
    Processor: KTABLE-TOSTREAM-0000000009 (stores: [])
      --> KSTREAM-SINK-0000000010
      <-- lr
    Sink: KSTREAM-SINK-0000000010 (topic: o)
      <-- KTABLE-TOSTREAM-0000000009

"""


def _table_groupby_unnamed(b):
    # KTable.group_by: KTABLE-SELECT, a repartition without filter (KSTREAM-SINK/SOURCE),
    # KTABLE-AGGREGATE
    b.table("t").group_by(lambda k, v: (v, k)).count().to_stream().to("o")


TABLE_GROUPBY_UNNAMED = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [t])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [t-STATE-STORE-0000000000])
      --> KTABLE-SELECT-0000000003
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-SELECT-0000000003 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000005 (topic: KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition)
      <-- KTABLE-SELECT-0000000003

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition])
      --> KTABLE-AGGREGATE-0000000007
    Processor: KTABLE-AGGREGATE-0000000007 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000004])
      --> KTABLE-TOSTREAM-0000000008
      <-- KSTREAM-SOURCE-0000000006
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- KTABLE-AGGREGATE-0000000007
    Sink: KSTREAM-SINK-0000000009 (topic: o)
      <-- KTABLE-TOSTREAM-0000000008

"""


def _multi_topic(b):
    # a source's topics are printed in Java HashSet order
    b.stream(["b-topic", "a-topic", "c"]).to("o")


MULTI_TOPIC = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [c, b-topic, a-topic])
      --> KSTREAM-SINK-0000000001
    Sink: KSTREAM-SINK-0000000001 (topic: o)
      <-- KSTREAM-SOURCE-0000000000

"""


def _named_grouping_reuse(b):
    # two aggregations of one named grouping share its repartition topic
    grouped = b.stream("in").select_key(lambda k, v: v).group_by_key(name="g")
    grouped.count().to_stream().to("o1")
    grouped.reduce(lambda x, y: x + y).to_stream().to("o2")


NAMED_GROUPING_REUSE = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> g-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: g-repartition-filter (stores: [])
      --> g-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: g-repartition-sink (topic: g-repartition)
      <-- g-repartition-filter

  Sub-topology: 1
    Source: g-repartition-source (topics: [g-repartition])
      --> KSTREAM-AGGREGATE-0000000003, KSTREAM-REDUCE-0000000010
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> KTABLE-TOSTREAM-0000000007
      <-- g-repartition-source
    Processor: KSTREAM-REDUCE-0000000010 (stores: [KSTREAM-REDUCE-STATE-STORE-0000000009])
      --> KTABLE-TOSTREAM-0000000014
      <-- g-repartition-source
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-AGGREGATE-0000000003
    Processor: KTABLE-TOSTREAM-0000000014 (stores: [])
      --> KSTREAM-SINK-0000000015
      <-- KSTREAM-REDUCE-0000000010
    Sink: KSTREAM-SINK-0000000008 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000007
    Sink: KSTREAM-SINK-0000000015 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000014

"""


def _ss_join_named_rekey(b):
    # a named stream-stream outer join after key changes: <name>-left/-right repartitions,
    # named window stores
    left = b.stream("l").select_key(lambda k, v: v)
    right = b.stream("r").select_key(lambda k, v: v)
    left.outer_join(right, lambda a, c: a, FIVE_MINUTES, name="x").to("o")


SS_JOIN_NAMED_REKEY = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [l])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> x-left-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: x-left-repartition-filter (stores: [])
      --> x-left-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: x-left-repartition-sink (topic: x-left-repartition)
      <-- x-left-repartition-filter

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000002 (topics: [r])
      --> KSTREAM-KEY-SELECT-0000000003
    Processor: KSTREAM-KEY-SELECT-0000000003 (stores: [])
      --> x-right-repartition-filter
      <-- KSTREAM-SOURCE-0000000002
    Processor: x-right-repartition-filter (stores: [])
      --> x-right-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000003
    Sink: x-right-repartition-sink (topic: x-right-repartition)
      <-- x-right-repartition-filter

  Sub-topology: 2
    Source: x-left-repartition-source (topics: [x-left-repartition])
      --> x-this-windowed
    Source: x-right-repartition-source (topics: [x-right-repartition])
      --> x-other-windowed
    Processor: x-other-windowed (stores: [x-outer-other-join-store])
      --> x-outer-other-join
      <-- x-right-repartition-source
    Processor: x-this-windowed (stores: [x-outer-this-join-store])
      --> x-outer-this-join
      <-- x-left-repartition-source
    Processor: x-outer-other-join (stores: [x-outer-shared-join-store, x-outer-this-join-store])
      --> x-merge
      <-- x-other-windowed
    Processor: x-outer-this-join (stores: [x-outer-other-join-store, x-outer-shared-join-store])
      --> x-merge
      <-- x-this-windowed
    Processor: x-merge (stores: [])
      --> KSTREAM-SINK-0000000015
      <-- x-outer-this-join, x-outer-other-join
    Sink: KSTREAM-SINK-0000000015 (topic: o)
      <-- x-merge

"""


def _table_ops_join(b):
    # a stream-table join lists the store its lookups read through unmaterialized table
    # operations, and is no successor of the table
    table = b.table("t").filter(lambda k, v: v is not None).map_values(lambda v: v + "!")
    b.stream("s").join(table, lambda v, tv: v).to("o")


TABLE_OPS_JOIN = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [t])
      --> KTABLE-SOURCE-0000000002
    Source: KSTREAM-SOURCE-0000000005 (topics: [s])
      --> KSTREAM-JOIN-0000000006
    Processor: KTABLE-SOURCE-0000000002 (stores: [t-STATE-STORE-0000000000])
      --> KTABLE-FILTER-0000000003
      <-- KSTREAM-SOURCE-0000000001
    Processor: KSTREAM-JOIN-0000000006 (stores: [t-STATE-STORE-0000000000])
      --> KSTREAM-SINK-0000000007
      <-- KSTREAM-SOURCE-0000000005
    Processor: KTABLE-FILTER-0000000003 (stores: [])
      --> KTABLE-MAPVALUES-0000000004
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000007 (topic: o)
      <-- KSTREAM-JOIN-0000000006
    Processor: KTABLE-MAPVALUES-0000000004 (stores: [])
      --> none
      <-- KTABLE-FILTER-0000000003

"""


def _reuse_interleaved(b):
    # the second aggregation of a named grouping adds its repartition to Kafka Streams' graph
    # again, which writes it (and the first aggregation) after the stream created in between
    grouped = b.stream("in").select_key(lambda k, v: v).group_by_key(name="g")
    grouped.count().to_stream().to("o1")
    b.stream("other").to("o3")
    grouped.reduce(lambda x, y: x + y).to_stream().to("o2")


REUSE_INTERLEAVED = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> g-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: g-repartition-filter (stores: [])
      --> g-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: g-repartition-sink (topic: g-repartition)
      <-- g-repartition-filter

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000009 (topics: [other])
      --> KSTREAM-SINK-0000000010
    Sink: KSTREAM-SINK-0000000010 (topic: o3)
      <-- KSTREAM-SOURCE-0000000009

  Sub-topology: 2
    Source: g-repartition-source (topics: [g-repartition])
      --> KSTREAM-AGGREGATE-0000000003, KSTREAM-REDUCE-0000000012
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> KTABLE-TOSTREAM-0000000007
      <-- g-repartition-source
    Processor: KSTREAM-REDUCE-0000000012 (stores: [KSTREAM-REDUCE-STATE-STORE-0000000011])
      --> KTABLE-TOSTREAM-0000000016
      <-- g-repartition-source
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-AGGREGATE-0000000003
    Processor: KTABLE-TOSTREAM-0000000016 (stores: [])
      --> KSTREAM-SINK-0000000017
      <-- KSTREAM-REDUCE-0000000012
    Sink: KSTREAM-SINK-0000000008 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000007
    Sink: KSTREAM-SINK-0000000017 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000016

"""


CASES = {
    "table-tostream": (_table_tostream, TABLE_TOSTREAM),
    "global-leftjoin-two": (_global_leftjoin_two, GLOBAL_LEFTJOIN_TWO),
    "ss-leftjoin": (_ss_leftjoin, SS_LEFTJOIN),
    "split-unnamed": (_split_unnamed, SPLIT_UNNAMED),
    "peek-foreach": (_peek_foreach, PEEK_FOREACH),
    "repartition": (_repartition, REPARTITION),
    "fk-leftjoin-named": (_fk_leftjoin_named, FK_LEFTJOIN_NAMED),
    "named-everything": (_named_everything, NAMED_EVERYTHING),
    "tt-join-named": (_tt_join_named, TT_JOIN_NAMED),
    "table-groupby-unnamed": (_table_groupby_unnamed, TABLE_GROUPBY_UNNAMED),
    "multi-topic": (_multi_topic, MULTI_TOPIC),
    "named-grouping-reuse": (_named_grouping_reuse, NAMED_GROUPING_REUSE),
    "ss-join-named-rekey": (_ss_join_named_rekey, SS_JOIN_NAMED_REKEY),
    "table-ops-join": (_table_ops_join, TABLE_OPS_JOIN),
    "reuse-interleaved": (_reuse_interleaved, REUSE_INTERLEAVED),
}


@pytest.mark.parametrize("case", list(CASES))
def test_describe_prints_what_kafka_streams_prints(case):
    build, expected = CASES[case]
    b = StreamsBuilder()
    build(b)
    assert str(b.build().describe()) == expected


def test_global_store_is_marked_in_the_description():
    b = StreamsBuilder()
    _global_leftjoin_two(b)
    subs = b.build().describe().subtopologies
    assert [s.for_global_store for s in subs] == [False, True, False]
    assert subs[1].node_names == ("KSTREAM-SOURCE-0000000002", "KTABLE-SOURCE-0000000003")


def test_java_string_hash_and_hash_set_order():
    assert _java_string_hash("hello") == 99162322
    # Integer overflow wraps as in Java: "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert _java_string_hash("polygenelubricants") == 0x80000000
    assert _java_hash_order(["b-topic", "a-topic", "c"]) == ["c", "b-topic", "a-topic"]
    # "Aa" and "BB" collide: one bucket, insertion order
    assert _java_hash_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert _java_hash_order(["Aa", "BB"]) == ["Aa", "BB"]


def test_tree_set_orders_by_the_sizes_at_insertion():
    size = {"a": 1, "b": 2}
    s = _JavaTreeSet(size)
    s.add("a")
    s.add("b")  # larger first
    assert list(s) == ["b", "a"]
    s.add("a")  # already present
    size["a"] = 5  # a later change of size does not move an element
    assert list(s) == ["b", "a"]


def test_tree_set_rebalances_like_java_tree_map():
    names = [f"n{i:02d}" for i in range(40)]
    s = _JavaTreeSet(dict.fromkeys(names, 1))
    for n in reversed(names):
        s.add(n)
    assert list(s) == names
