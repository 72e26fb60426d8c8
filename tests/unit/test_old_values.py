"""Which stream aggregations emit old aggregates for a table filter after them
(``streamtable.topology.old_values``), and what the checkpoint fingerprint says of them.
"""

from __future__ import annotations

from datetime import timedelta

from streamtable import Reducers, Serdes, StreamsBuilder, TimeWindows
from streamtable.topology.nodes import AggregateNode, TableOpNode
from streamtable.topology.old_values import filtered_stream_aggregate, table_filtered


def _kinds(b: StreamsBuilder) -> dict[str, str]:
    return {e["store"]: e["kind"] for e in b.build().fingerprint()["stateful"] if "kind" in e}


def test_a_filter_through_map_values_makes_a_count_a_python_fold_in_the_fingerprint():
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key(value_serde=Serdes.long())
    grouped.count(name="filtered").map_values(lambda n: n).filter(
        lambda k, n: n > 1
    ).to_stream().to("a")
    grouped.count(name="mapped").map_values(lambda n: n + 1).to_stream().to("b")
    grouped.reduce(Reducers.sum(), name="summed").filter_not(lambda k, n: n < 0).to_stream().to("c")
    grouped.reduce(Reducers.max(), name="plain").to_stream().to("d")
    assert _kinds(b) == {
        "filtered": "python",  # Spark's count gives no value before a micro-batch
        "mapped": "count",
        "summed": "python",
        "plain": "max/long",
    }


def test_windowed_aggregations_and_table_group_by_are_not_marked():
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key()
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=5))).count(
        name="windowed"
    ).filter(lambda k, n: n > 1).to_stream().to("a")
    grouped.count(name="regrouped").group_by(lambda k, n: (n, k)).count(name="c2").filter(
        lambda k, n: n > 1
    ).to_stream().to("b")
    graph = b.build().graph
    marked = {n.store_name: table_filtered(graph, n) for n in graph.of_type(AggregateNode)}
    assert marked == {"windowed": False, "regrouped": False}


def test_the_chain_end_finds_its_aggregation_only_when_the_chain_holds_a_filter():
    b = StreamsBuilder()
    counts = b.stream("in").group_by_key().count(name="n")
    counts.filter(lambda k, n: n > 1).map_values(str).to_stream().to("a")
    counts.map_values(str).to_stream().to("b")
    graph = b.build().graph
    count = next(graph.of_type(AggregateNode)).name
    ops = list(graph.of_type(TableOpNode))
    flt = next(op for op in ops if op.kind.value == "filter")
    after_filter = next(op for op in ops if op.parents == (flt.name,))
    alone = next(op for op in ops if op.kind.value == "map_values" and op.parents == (count,))
    assert filtered_stream_aggregate(graph.by_name, flt).name == count
    assert filtered_stream_aggregate(graph.by_name, after_filter).name == count
    assert filtered_stream_aggregate(graph.by_name, alone) is None
