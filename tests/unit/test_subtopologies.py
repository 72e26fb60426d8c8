"""Where the compiler cuts a topology into sub-topologies (no JVM)."""

from datetime import timedelta

import pytest

from streamtable import Serdes, StreamsBuilder, TimeWindows
from streamtable.compiler.subtopologies import cut_topology, repartition_partitions
from streamtable.errors import TopologyError
from streamtable.topology.nodes import SinkNode, SourceNode

S, L = Serdes.string(), Serdes.long()


def clicks_per_region(value_serde=L):
    b = StreamsBuilder()
    table = b.table("regions", key_serde=S, value_serde=S)
    (
        b.stream("clicks", key_serde=S, value_serde=L)
        .join(table, lambda c, r: (r, c))
        .map(lambda user, rc: rc)
        .group_by_key(key_serde=S, value_serde=value_serde)
        .reduce(lambda a, b: a + b, name="clicks-per-region")
        .to_stream()
        .to("out", value_serde=L)
    )
    return b.build()


def test_aggregation_after_a_join_is_cut_at_its_repartition_topic():
    topology = clicks_per_region()
    graph, cuts = cut_topology(topology.graph, "app")
    assert [c.topic for c in cuts] == ["app-clicks-per-region-repartition"]
    cut = cuts[0]
    source = graph.by_name[cut.source]
    assert isinstance(source, SourceNode) and source.internal
    assert source.topics == (cut.topic,) and source.auto_offset_reset == "earliest"
    assert source.parents == ()
    sink = graph.by_name[cut.sink]
    assert isinstance(sink, SinkNode) and sink.internal and sink.topic == cut.topic
    assert graph.by_name[sink.parents[0]].name == cut.upstream
    assert (source.key_serde, source.value_serde) == (S, L)
    # the sink comes before the nodes reading the topic (queries start upstream first)
    names = [n.name for n in graph.nodes]
    assert names.index(cut.sink) < names.index(cut.source)
    # the user's topology is not changed
    assert cut.source not in {n.name for n in topology.graph.of_type(SourceNode)}


def test_topologies_one_query_can_hold_are_not_cut():
    b = StreamsBuilder()
    (
        b.stream("lines", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, key_serde=S)
        .count(name="Counts")
        .group_by(lambda w, n: (str(n), w), key_serde=S, value_serde=S)  # a table re-grouping
        .count(name="histogram")
        .to_stream()
        .to("out", value_serde=L)
    )
    topology = b.build()
    graph, cuts = cut_topology(topology.graph, "app")
    assert cuts == [] and graph is topology.graph


def test_aggregation_without_key_change_after_an_aggregation_gets_a_topic_of_its_own():
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .count(name="c")
        .to_stream()
        .group_by_key(key_serde=S, value_serde=L)
        .reduce(max, name="max")
        .to_stream()
        .to("out", value_serde=L)
    )
    graph, cuts = cut_topology(b.build().graph, "app")
    assert len(cuts) == 1
    assert cuts[0].topic.startswith("app-KSTREAM-REDUCE-")
    assert cuts[0].topic.endswith("-input-streamtable-internal")


def test_explicit_repartition_is_cut_with_its_partition_count():
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .repartition(name="spread", num_partitions=6)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=1)))
        .count()
        .to_stream()
        .foreach(print)
    )
    graph, cuts = cut_topology(b.build().graph, "app")
    assert [(c.topic, c.num_partitions) for c in cuts] == [("app-spread-repartition", 6)]
    assert repartition_partitions(graph, cuts, {"in": 2}) == {"app-spread-repartition": 6}


def test_process_after_an_explicit_repartition_reads_the_repartition_topic():
    """Kafka Streams' ``repartition()`` writes a topic, and a processor after it runs in that
    topic's tasks, each key in one of them. A processor has no shuffle of its own: without
    the cut it ran in the tasks of the partitions the records were read from, a key's state
    split among them. An aggregation after a repartition keeps its shuffle (no cut).
    """
    from streamtable import Processor

    class Forward(Processor):
        def process(self, record):
            self.context.forward(record)

    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).map(lambda k, v: (v, k))
    s.repartition(name="by-value", key_serde=S, value_serde=S).process(Forward).to("out")
    s.repartition(name="counted").group_by_key().count().to_stream().to("counts")
    graph, cuts = cut_topology(b.build().graph, "app")
    assert [(c.topic, c.num_partitions) for c in cuts] == [("app-by-value-repartition", None)]
    assert repartition_partitions(graph, cuts, {"in": 3}) == {"app-by-value-repartition": 3}


def test_three_levels_give_two_cuts_with_kafka_streams_partition_counts():
    b = StreamsBuilder()
    other = b.stream("small", key_serde=S, value_serde=S)
    (
        b.stream("big", key_serde=S, value_serde=S)
        .merge(other)
        .group_by_key()
        .count(name="one")
        .to_stream()
        .map(lambda k, n: (str(n), 1))
        .group_by_key(key_serde=S, value_serde=L, name="two")
        .reduce(lambda a, b: a + b, name="two")
        .to_stream()
        .map(lambda k, n: ("all", n))
        .group_by_key(key_serde=S, value_serde=L, name="three")
        .reduce(max, name="three")
        .to_stream()
        .to("out", value_serde=L)
    )
    graph, cuts = cut_topology(b.build().graph, "app")
    assert [c.topic for c in cuts] == ["app-two-repartition", "app-three-repartition"]
    # the most partitions among the upstream sub-topology's inputs, internal ones included
    assert repartition_partitions(graph, cuts, {"big": 5, "small": 2}) == {
        "app-two-repartition": 5,
        "app-three-repartition": 5,
    }


def test_a_global_tables_topic_does_not_size_repartition_topics():
    # Kafka Streams: a global table belongs to the global topology, not to the sub-topology
    # that joins it, so its topic's partitions count for neither the tasks nor the topics
    b = StreamsBuilder()
    products = b.global_table("products", key_serde=S, value_serde=S)
    (
        b.stream("orders", key_serde=S, value_serde=S)
        .join(products, lambda order_key, order: order, lambda order, product: product)
        .group_by(lambda k, product: product, key_serde=S, value_serde=S, name="by-product")
        .count(name="per-product")
        .to_stream()
        .to("out", value_serde=L)
    )
    graph, cuts = cut_topology(b.build().graph, "app")
    assert [c.topic for c in cuts] == ["app-by-product-repartition"]
    assert repartition_partitions(graph, cuts, {"orders": 3, "products": 12}) == {
        "app-by-product-repartition": 3
    }


def test_missing_repartition_serde_names_the_aggregation_topic_and_argument():
    topology = clicks_per_region(value_serde=None)
    with pytest.raises(TopologyError) as e:
        cut_topology(topology.graph, "app")
    msg = str(e.value)
    assert "'clicks-per-region'" in msg
    assert "'app-clicks-per-region-repartition'" in msg
    assert "reads the output of stateful operator 'KSTREAM-JOIN-" in msg
    assert "Pass value_serde= to group_by()/group_by_key()" in msg
    assert "'default.value.serde'" in msg
    # the configured default serves, as in Kafka Streams
    _, cuts = cut_topology(topology.graph, "app", default_value_serde=L)
    assert len(cuts) == 1


def test_repartition_topic_colliding_with_a_user_topic_is_refused():
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=S)
        .repartition(name="x", num_partitions=2)
        .to("app-x-repartition")
    )
    with pytest.raises(TopologyError, match="'app-x-repartition'.*also a source or sink topic"):
        cut_topology(b.build().graph, "app")


def test_cycle_through_topics_is_refused_naming_topic_source_and_sink():
    b = StreamsBuilder()
    a = b.stream("a", key_serde=S, value_serde=S)
    a.filter(lambda k, v: v != "x").to("b")
    b.stream("b", key_serde=S, value_serde=S).map_values(str.upper).to("a")
    with pytest.raises(TopologyError) as e:
        b.build()
    msg = str(e.value)
    assert "Topic 'a' is read by source 'KSTREAM-SOURCE-0000000000'" in msg
    assert "written again by sink 'KSTREAM-SINK-" in msg
    assert "Write the result to another topic" in msg

    loop = StreamsBuilder()
    loop.stream("t", key_serde=S, value_serde=S).to("t")
    with pytest.raises(TopologyError, match="Topic 't' is read by source"):
        loop.build()


def test_reading_a_topic_the_topology_writes_is_allowed_without_a_cycle():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).to("mid")
    b.stream("mid", key_serde=S, value_serde=S).group_by_key().count().to_stream().to("out")
    b.build()  # no error: records go in -> mid -> out once


def test_aggregation_reading_a_join_directly_keeps_the_join_upstream_of_the_cut():
    # stream-table join, then group_by_key (no repartition in Kafka Streams): the join stays
    # in the upstream query and only the aggregation reads the new internal source
    b = StreamsBuilder()
    table = b.table("regions", key_serde=S, value_serde=S)
    joined = b.stream("clicks", key_serde=S, value_serde=L).join(table, lambda c, r: r)
    joined.group_by_key().count().to_stream().to("counts", value_serde=L)
    joined.to("joined")
    graph, (cut,) = cut_topology(b.build().graph, "app", default_value_serde=S)
    join = graph.by_name[cut.upstream]
    assert type(join).__name__ == "JoinNode" and join.parents  # still computed
    assert graph.by_name[cut.sink].parents == (cut.upstream,)
    aggregate = graph.by_name[cut.consumer]
    assert aggregate.parents == (cut.source,)
    assert graph.by_name[cut.source].topics == (cut.topic,)
    # the join's other consumer still reads the join itself
    (sink,) = [n for n in graph.nodes if isinstance(n, SinkNode) and n.topic == "joined"]
    assert sink.parents == (cut.upstream,)


def test_a_repartition_keeps_null_keys_only_for_a_join_that_joins_them():
    """Kafka Streams' repartition filter drops null-key records unless a join downstream
    joins them with None (KIP-962: stream-table left, stream-stream left or outer).
    """
    from streamtable.compiler.subtopologies import keeps_null_keys

    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    table = b.table("t", key_serde=S, value_serde=S)
    plain = s.repartition(name="plain")
    plain.to("out")
    joined = s.repartition(name="joined")
    joined.left_join(table, lambda v, t: v).to("out2")
    inner = s.repartition(name="inner")
    inner.join(table, lambda v, t: v).to("out3")
    graph = b.build().graph
    assert not keeps_null_keys(graph, plain.node_name)
    assert keeps_null_keys(graph, joined.node_name)
    assert not keeps_null_keys(graph, inner.node_name)

    # only from the join's stream side (Kafka Streams attaches a stream-table join to the
    # stream's node), and on through the topic of a cut repartition
    b = StreamsBuilder()
    counted = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    rep = counted.repartition(name="first")
    table = rep.group_by(lambda k, v: v, key_serde=S).count()
    b.stream("in2", key_serde=S, value_serde=S).left_join(table, lambda v, n: v).to("o")
    assert not keeps_null_keys(b.build().graph, rep.node_name)
    b = StreamsBuilder()
    table = b.table("t", key_serde=S, value_serde=S)
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    first = s.repartition(name="a", num_partitions=4, key_serde=S, value_serde=S)
    first.repartition(name="b", num_partitions=2).left_join(table, lambda v, t: v).to("o")
    graph, _ = cut_topology(b.build().graph, "app")
    sinks = [n for n in graph.of_type(SinkNode) if n.internal]
    assert len(sinks) == 2 and all(keeps_null_keys(graph, n.name) for n in sinks)
