"""Which stream aggregations emit old aggregates for a table filter after them
(``streamtable.topology.old_values``), and what the checkpoint fingerprint says of them.
"""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from _window_runs import drive, kernel_for
from streamtable import (
    BufferConfig,
    Reducers,
    Serdes,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
)
from streamtable.compiler.codecs import PickleCodec, SerdeCodec
from streamtable.compiler.paged.records import Rec
from streamtable.compiler.paged.window_kernels import TimeWindowKernel, WindowAggregateSpec
from streamtable.errors import TopologyError
from streamtable.runtime.checkpoint import check_fingerprint
from streamtable.topology.nodes import AggregateNode, Aggregation, TableOpNode, TimeWindowSpec
from streamtable.topology.old_values import filtered_stream_aggregate, table_filtered


def _kinds_of(topology) -> dict[str, str]:
    """The fingerprint's state form of each stream aggregation, by store."""
    stateful = topology.fingerprint()["stateful"]
    return {
        e["store"]: e["kind"] for e in stateful if isinstance(e.get("store"), str) and "kind" in e
    }


def test_a_filter_through_map_values_makes_a_count_a_python_fold_in_the_fingerprint():
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key(value_serde=Serdes.long())
    grouped.count(name="filtered").map_values(lambda n: n).filter(
        lambda k, n: n > 1
    ).to_stream().to("a")
    grouped.count(name="mapped").map_values(lambda n: n + 1).to_stream().to("b")
    grouped.reduce(Reducers.sum(), name="summed").filter_not(lambda k, n: n < 0).to_stream().to("c")
    grouped.reduce(Reducers.max(), name="plain").to_stream().to("d")
    assert _kinds_of(b.build()) == {
        "filtered": "python",  # Spark's count gives no value before a micro-batch
        "mapped": "count",
        "summed": "python",
        "plain": "max/long",
    }


def test_windows_send_old_values_without_changing_the_fingerprint():
    # a windowed count always runs as a Python kernel: filtering it changes no state form;
    # a table re-grouped by KTable.group_by is not marked (its own table op reads old values)
    def build(filtered):
        b = StreamsBuilder()
        grouped = b.stream("in").group_by_key()
        windowed = grouped.windowed_by(
            TimeWindows.of_size_with_no_grace(timedelta(seconds=5))
        ).count(name="windowed")
        sessions = grouped.windowed_by(
            SessionWindows.of_inactivity_gap_with_no_grace(timedelta(seconds=5))
        ).count(name="sessions")
        sliding = grouped.windowed_by(
            SlidingWindows.of_time_difference_with_no_grace(timedelta(seconds=5))
        ).count(name="sliding")
        regrouped = grouped.count(name="regrouped").group_by(lambda k, n: (str(n), k)).count()
        tables = ((windowed, "a"), (sessions, "b"), (sliding, "c"), (regrouped, "d"))
        for table, topic in tables:
            (table.filter(lambda k, n: n > 1) if filtered else table).to_stream().to(topic)
        return b.build()

    graph = build(True).graph
    marked = {n.store_name: table_filtered(graph, n) for n in graph.of_type(AggregateNode)}
    assert marked == {"windowed": True, "sessions": True, "sliding": True, "regrouped": False}
    assert _kinds_of(build(True)) == _kinds_of(build(False))
    assert _kinds_of(build(True))["windowed"] == "count"


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


def test_a_filter_reads_old_values_through_the_final_results_of_every_window_kind():
    # suppress(until_window_closes) forwards old values (the window's last buffered change's)
    # for time windows, sessions and sliding windows alike
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key()
    final = Suppressed.until_window_closes(BufferConfig.unbounded())
    five = timedelta(minutes=5)
    kinds = {
        "h": TimeWindows.of_size_with_no_grace(timedelta(hours=1)),
        "s": SessionWindows.of_inactivity_gap_with_no_grace(five),
        "l": SlidingWindows.of_time_difference_with_no_grace(five),
    }
    for store, windows in kinds.items():
        counts = grouped.windowed_by(windows).count(name=store).suppress(final)
        counts.filter(lambda k, n: n < 3).to_stream().to(store)
    graph = b.build().graph
    found = [filtered_stream_aggregate(graph.by_name, op) for op in graph.of_type(TableOpNode)]
    assert {type(node).__name__ for node in found} == {"SuppressNode"}
    assert {graph.by_name[node.parents[0]].store_name for node in found} == set(kinds)


def test_a_filter_reads_old_values_through_a_time_limited_suppression_of_an_aggregation():
    # suppress(until_time_limit) forwards the old value of a key's last held change when its
    # parent is an aggregation (Kafka Streams asks the aggregation for old values through the
    # suppression); after a filter of the aggregation it has none to forward
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key(value_serde=Serdes.long())
    limit = Suppressed.until_time_limit(timedelta(seconds=1))
    grouped.count(name="limited").suppress(limit).filter(lambda k, n: n < 3).to_stream().to("a")
    grouped.count(name="kept").suppress(limit).to_stream().to("b")
    windows = grouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(hours=1)))
    windows.count(name="h").suppress(limit).map_values(str).filter_not(
        lambda k, s: s == "1"
    ).to_stream().to("c")
    twice = grouped.reduce(Reducers.sum(), name="twice").filter(lambda k, n: n > 0)
    twice.suppress(limit).filter(lambda k, n: n < 9).to_stream().to("d")
    graph = b.build().graph
    found = {}
    for op in graph.of_type(TableOpNode):
        node = filtered_stream_aggregate(graph.by_name, op)
        if node is not None:
            agg = node if isinstance(node, AggregateNode) else graph.by_name[node.parents[0]]
            found.setdefault(type(node).__name__, set()).add(agg.store_name)
    assert found == {"SuppressNode": {"limited", "h"}, "AggregateNode": {"twice"}}
    kinds = _kinds_of(b.build())
    assert kinds["limited"] == "python"  # its old values come from a Python fold
    assert kinds["kept"] == "count"


def test_adding_a_filter_after_a_count_is_refused_naming_the_filter(tmp_path):
    def topology(filtered):
        b = StreamsBuilder()
        counts = b.stream("in").group_by_key().count(name="cnt")
        (counts.filter(lambda k, n: n > 1) if filtered else counts).to_stream().to("out")
        return b.build()

    check_fingerprint(tmp_path, topology(False), "app")
    check_fingerprint(tmp_path, topology(False), "app")  # unchanged: accepted
    with pytest.raises(TopologyError) as err:
        check_fingerprint(tmp_path, topology(True), "app")
    assert (
        "aggregation 'cnt' now runs as a Python fold (was Spark's aggregation (count)): an "
        "unwindowed count or built-in reducer runs as Spark's aggregation unless a KTable.filter "
        "reads its table (directly or after suppress(until_time_limit)"
    ) in str(err.value)
    assert "streamtable reset --application-id app" in str(err.value)


def test_a_time_window_kernel_emits_each_windows_aggregate_from_before_the_micro_batch():
    # the caching window store's flush (Kafka Streams): one update per window and micro-batch,
    # its old value the store's before the batch, whatever the records did in between
    def collect(key, value, agg):  # changes the aggregate in place, as user code may
        if value == "del":
            return None
        agg.append(value)
        return agg

    spec = WindowAggregateSpec(
        "agg",
        Aggregation(list, collect),
        SerdeCodec(Serdes.bytes()),
        PickleCodec(),
        TimeWindowSpec(10, 5, 5),  # hopping: size 10, advance 5, grace 5
        retention_ms=15,
        with_old=True,
    )
    kernel = TimeWindowKernel(spec)
    offsets = iter(range(100))

    def batch(entry, *records):
        recs, st = [], None
        for ts, value in records:
            st = ts if st is None else max(st, ts)
            recs.append(Rec(ts, "t", 0, next(offsets), 0, 0, b"k", pickle.dumps(value), None, st))
        kernel.drops = {}
        entry, outs = kernel.process(b"k", recs, entry, {})
        got = {}
        for o in outs:
            start = int.from_bytes(o.key[-8:], "big")
            got[start] = tuple(None if b is None else pickle.loads(b) for b in (o.value, o.old))
        return entry, got

    entry, got = batch(None, (6, "a"))
    assert got == {0: (["a"], None), 5: (["a"], None)}  # new windows: no old value
    entry, got = batch(entry, (7, "del"), (8, "b"), (12, "c"), (13, "del"))
    assert got == {
        0: (["b"], ["a"]),  # deleted, then started again by b: old is from before the batch
        5: (None, ["a"]),  # deleted, started again by b, c, deleted again by 13
    }  # [10, 20), started by 12 and deleted by 13, forwards nothing (nor would Kafka's cache)
    entry, got = batch(entry, (25, "d"), (3, "late"))
    assert got == {20: (["d"], None), 25: (["d"], None)}  # 3 is past [0, 10)'s close
    assert kernel.drops == {"late": 1}


def test_a_final_result_carries_the_windows_aggregate_from_before_its_last_change():
    # Kafka Streams' suppression buffer emits a window's last buffered change, whose old value
    # is the window store's value before that change's commit (a micro-batch here)
    windows = TimeWindowSpec(10, 10, 0)
    kernel = kernel_for(windows, "count", emit_final=True, retention_ms=100, with_old=True)
    records = [(b"A", 1, 1), (b"A", 2, 1), (b"A", 3, 1), (b"A", 5, 1), (b"B", 4, 1)]
    records += [(b"B", 6, 1), (b"A", 12, 1)]  # 12 closes [0, 10)
    run = drive(kernel, records, {1, 3, 6})  # batches: 1 | 2, 3 | 5, 4, 6 | 12
    finals = {
        run.window(o): (pickle.loads(o.value), None if o.old is None else pickle.loads(o.old))
        for o in run.outs
    }
    assert finals == {
        (b"A", 0, 10): (4, 3),  # 3 before its last batch (5)
        (b"B", 0, 10): (2, None),  # made in its last batch
    }
    # an emitted window keeps no old value; one still open does (for its final result)
    kept = {(gk, s): len(w) for gk, ws in run.entries.items() for (s, _), w in ws.items()}
    assert kept == {(b"A", 0): 3, (b"B", 0): 3, (b"A", 10): 4}
    # without old values the final results are the same, with no old value
    plain = drive(
        kernel_for(windows, "count", emit_final=True, retention_ms=100), records, {1, 3, 6}
    )
    assert [(o.key, o.value, o.old) for o in plain.outs] == [
        (o.key, o.value, None) for o in run.outs
    ]


def test_an_update_let_go_by_a_time_limit_carries_the_old_value_of_its_last_held_change():
    # Kafka Streams' InMemoryTimeOrderedKeyValueChangeBuffer keeps a key's last change (new
    # and old value) and evicts Change(new, old): not the value the key had when first held
    from streamtable.compiler.paged.suppress_kernels import TimeLimitSuppressKernel
    from streamtable.topology.nodes import SuppressSpec

    kernel = TimeLimitSuppressKernel("sup", SuppressSpec(False, 10), with_old=True)

    def change(ts, new, old):
        return Rec(ts, "", -1, 0, 0, 0, b"k", new, old, ts)

    meta: dict = {}
    entry, _ = kernel.process(b"k", [change(5, b"2", b"1"), change(6, b"3", b"2")], None, meta)
    entry, _ = kernel.process(b"k", [change(8, b"4", b"3")], entry, meta)  # a later batch
    assert kernel.after_batch({b"k": entry}, meta, 14) == []  # 14 < 5 + 10: still held
    entries = {b"k": entry}
    assert [(o.value, o.old, o.ts) for o in kernel.after_batch(entries, meta, 15)] == [
        (b"4", b"3", 8)
    ]
    # held again: the first change of the new hold brings its own old value
    entry, _ = kernel.process(b"k", [change(20, b"5", b"4")], None, meta)
    assert [(o.value, o.old) for o in kernel.after_batch({b"k": entry}, meta, 30)] == [(b"5", b"4")]
    # an entry held by a version without old values (three items) takes the next change's
    entry, _ = kernel.process(b"k", [change(40, b"7", b"6")], [31, b"6", 31], meta)
    assert entry == [31, b"7", 40, b"6"]
    entry, _ = kernel.process(b"m", [], [32, b"1", 32], meta)
    assert [o.old for o in kernel.after_batch({b"m": entry}, {"next_close": 32}, 99)] == [None]
    # without a filter (removed since) a held old value is dropped at the key's next change
    plain = TimeLimitSuppressKernel("sup", SuppressSpec(False, 10))
    entry, _ = plain.process(b"k", [change(50, b"9", b"8")], [41, b"8", 45, b"7"], {})
    assert entry == [41, b"9", 50]


def test_a_bounded_time_limited_buffer_counts_the_old_values_it_holds():
    # Kafka Streams' buffer counts a held change's old value in its size
    from streamtable.compiler.pack_stage import STATE_PAGES
    from streamtable.compiler.paged.suppress_kernels import TimeLimitSuppressKernel
    from streamtable.topology.nodes import SuppressSpec

    # per page: 1 + 2 + 8 bytes for one key's value; its 4-byte old value goes over
    spec = SuppressSpec(False, 1_000, None, 11 * STATE_PAGES, True)
    for with_old, early in ((False, []), (True, [(b"k", b"vv", b"oldv")])):
        kernel = TimeLimitSuppressKernel("sup", spec, with_old=with_old)
        meta: dict = {}
        entry, _ = kernel.process(b"k", [Rec(5, "", -1, 0, 0, 0, b"k", b"vv", b"oldv")], None, meta)
        outs = kernel.after_batch({b"k": entry}, meta, 6)
        assert [(o.key, o.value, o.old) for o in outs] == early
