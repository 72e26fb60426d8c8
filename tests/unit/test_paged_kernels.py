"""The paged kernels against Kafka Streams' documented semantics tables, one record per batch
(the order Kafka Streams' TopologyTestDriver would process them in)."""

import pickle

import pytest

from streamtable.compiler.codecs import PickleCodec
from streamtable.compiler.paged.join_kernels import (
    StreamStreamJoinKernel,
    StreamTableJoinKernel,
    TableTableJoinKernel,
)
from streamtable.compiler.paged.records import Rec
from streamtable.compiler.paged.table_kernels import ADD, SUBTRACT, TableAggregateKernel
from streamtable.errors import StreamsError
from streamtable.topology.nodes import JoinWindowSpec

P = PickleCodec()


def r(ts, side, value, key=b"k", offset=None):
    data = None if value is None else pickle.dumps(value)
    return Rec(ts, "t", 0, ts if offset is None else offset, 0, side, key, data)


def run_each(kernel, records):
    """Feed records one per batch; return what each emitted (values unpickled)."""
    entry, meta, emitted = None, {}, []
    for rec in records:
        entry, outs = kernel.process(b"k", [rec], entry, meta)
        emitted.append([None if o.value is None else pickle.loads(o.value) for o in outs])
    return emitted


# Kafka Streams DSL guide, KTable-KTable equi-join table: (ts, side, value)
TT_INPUT = [
    (3, 0, "A"),
    (4, 1, "a"),
    (5, 0, "B"),
    (6, 1, "b"),
    (7, 0, None),
    (8, 1, None),
    (9, 0, "C"),
    (10, 1, "c"),
    (11, 1, None),
    (12, 0, None),
    (14, 1, "d"),
    (15, 0, "D"),
]
N = "null"  # a tombstone output
TT_EXPECTED = {
    "inner": [[], ["A|a"], ["B|a"], ["B|b"], [N], [], [], ["C|c"], [N], [], [], ["D|d"]],
    "left": [
        ["A|None"],
        ["A|a"],
        ["B|a"],
        ["B|b"],
        [N],
        [],
        ["C|None"],
        ["C|c"],
        ["C|None"],
        [N],
        [],
        ["D|d"],
    ],
    "outer": [
        ["A|None"],
        ["A|a"],
        ["B|a"],
        ["B|b"],
        ["None|b"],
        [N],
        ["C|None"],
        ["C|c"],
        ["C|None"],
        [N],
        ["None|d"],
        ["D|d"],
    ],
}


@pytest.mark.parametrize("join_type", ["inner", "left", "outer"])
def test_table_table_join_follows_the_documented_table(join_type):
    k = TableTableJoinKernel("J", join_type, lambda lv, rv: f"{lv}|{rv}", P, P)
    got = run_each(k, [r(ts, side, v) for ts, side, v in TT_INPUT])
    assert [[N if v is None else v for v in outs] for outs in got] == TT_EXPECTED[join_type]


def test_a_joiner_returning_none_gives_a_null_value_not_a_pickled_none():
    """Kafka Streams forwards a joiner's null as the value: in a table-table join's result
    it is a tombstone of the key, so a table downstream (another join, an aggregation) finds
    the key absent. It used to be the bytes of a pickled None, a present row.
    """
    k = TableTableJoinKernel("J", "inner", lambda lv, rv: None if rv == "x" else lv, P, P)
    _, outs = k.process(b"k", [r(1, 0, "a"), r(2, 1, "x")], None, {})
    assert [(o.key, o.value) for o in outs] == [(b"k", None)]
    s = StreamTableJoinKernel("J", "left", lambda sv, tv: None, P, P, None)
    _, outs = s.process(b"k", [r(3, 0, "s")], None, {})
    assert [o.value for o in outs] == [None]


def test_table_table_join_coalesces_a_batch_to_its_last_result():
    k = TableTableJoinKernel("J", "left", lambda lv, rv: f"{lv}|{rv}", P, P)
    _, outs = k.process(b"k", sorted(r(ts, s, v) for ts, s, v in TT_INPUT[:4]), None, {})
    assert [pickle.loads(o.value) for o in outs] == ["B|b"]
    assert outs[0].ts == 6


@pytest.mark.parametrize("join_type", ["left", "outer"])
def test_table_table_join_a_deleted_side_gives_no_timestamp(join_type):
    # KTableKTable{Left,Outer}Join: the other side's value getter finds nothing after its
    # delete, so the result takes the update's own timestamp, not the delete's (60). The
    # deleted side is the right one for a left join, the left one for an outer join.
    k = TableTableJoinKernel("J", join_type, lambda lv, rv: f"{lv}|{rv}", P, P)
    gone, kept = (1, 0) if join_type == "left" else (0, 1)
    entry, outs = None, []
    for rec in [r(50, gone, "x"), r(10, kept, "A"), r(60, gone, None), r(30, kept, "B")]:
        entry, batch_outs = k.process(b"k", [rec], entry, {})
        outs += batch_outs
    assert [(pickle.loads(o.value) if o.value else None, o.ts) for o in outs] == (
        [("x|A" if gone == 0 else "A|x", 50), ("A|None", 60), ("B|None", 30)]
        if join_type == "left"
        else [("x|None", 50), ("x|A", 50), ("None|A", 60), ("None|B", 30)]
    )
    # while the other side exists, the larger of the two timestamps
    entry, batch_outs = k.process(b"k", [r(20, gone, "z")], entry, {})
    assert batch_outs[0].ts == 30


def test_table_table_join_coalesces_each_side_to_its_last_update_first():
    """Kafka Streams' record cache forwards a source table's last update per key: joined
    (L1, R1) and deleted on both sides within the batch, nothing was or is joined."""
    k = TableTableJoinKernel("J", "inner", lambda lv, rv: f"{lv}|{rv}", P, P)
    batch = [r(1, 0, "L1"), r(2, 1, "R1"), r(3, 1, None), r(4, 0, None)]
    assert k.process(b"k", batch, None, {}) == (None, [])
    # the same updates one per batch: the result, then its tombstone
    assert run_each(k, batch) == [[], ["L1|R1"], [None], []]


def test_table_aggregate_walkthrough_of_the_dsl_guide():
    """Adder +len, subtractor -len; group changes as KTable.group_by would send them."""
    k = TableAggregateKernel(
        "AGG",
        P,
        lambda: 0,
        lambda key, v, agg: agg + len(v),
        lambda key, v, agg: agg - len(v),
        reduce=False,
    )
    state = {}

    def change(ts, group, op, user):
        rec = Rec(ts, "t", 0, ts, op, 0, P.encode_many([group])[0], pickle.dumps((op, user)))
        gk = rec.key
        entry, outs = k.process(gk, [rec], state.get(gk), {})
        state[gk] = entry
        return pickle.loads(outs[0].value)

    assert change(1, "E", ADD, "alice") == 5
    assert change(2, "A", ADD, "bob") == 3
    assert change(3, "A", ADD, "charlie") == 10
    assert change(4, "E", SUBTRACT, "alice") == 0  # a count of 0 stays 0, not a delete
    assert change(4, "A", ADD, "alice") == 15
    assert change(5, "A", SUBTRACT, "charlie") == 8
    assert change(7, "A", SUBTRACT, "bob") == 5
    assert change(7, "E", ADD, "bob") == 3


def test_table_aggregate_subtractor_returning_none_deletes_the_group():
    k = TableAggregateKernel(
        "AGG",
        P,
        None,
        lambda agg, v: agg + v,
        lambda agg, v: None if agg == v else agg - v,
        reduce=True,
    )
    g = P.encode_many(["g"])[0]
    add = Rec(1, "t", 0, 1, ADD, 0, g, pickle.dumps((ADD, 4)))
    sub = Rec(2, "t", 0, 2, SUBTRACT, 0, g, pickle.dumps((SUBTRACT, 4)))
    entry, outs = k.process(g, [add], None, {})
    assert pickle.loads(outs[0].value) == 4
    entry, outs = k.process(g, [sub], entry, {})
    assert entry is None and outs[0].value is None and pickle.loads(outs[0].old) == 4


@pytest.mark.parametrize("reduce", [True, False])
def test_table_aggregate_change_whose_subtraction_deletes_keeps_the_aggregate_timestamp(reduce):
    # KTableReduce/KTableAggregate process a change within one group as one record: its
    # result's timestamp is max(record, aggregate before it), even when the subtractor
    # returned null before the adder ran
    adder = (lambda agg, v: agg + v) if reduce else (lambda key, v, agg: agg + v)
    subtractor = (lambda agg, v: None if agg == v else agg - v) if reduce else (
        lambda key, v, agg: None if agg == v else agg - v
    )  # fmt: skip
    k = TableAggregateKernel("AGG", P, None if reduce else (lambda: 0), adder, subtractor, reduce)
    g = P.encode_many(["g"])[0]
    entry, _ = k.process(g, [Rec(100, "t", 0, 7, ADD, 0, g, pickle.dumps((ADD, 5)))], None, {})
    change = [  # the source row changes 5 -> 7 at ts 50: its subtraction, then its addition
        Rec(50, "t", 0, 8, 2 * 0 + SUBTRACT, 0, g, pickle.dumps((SUBTRACT, 5))),
        Rec(50, "t", 0, 8, 2 * 0 + ADD, 0, g, pickle.dumps((ADD, 7))),
    ]
    entry, outs = k.process(g, change, entry, {})
    assert (pickle.loads(outs[0].value), outs[0].ts) == (7, 100)
    assert entry == (7, 100)


def test_table_aggregate_adder_returning_none_deletes_the_group_and_the_next_add_starts_over():
    # KTableAggregate: store.put(key, null) deletes; the next addition finds no aggregate and
    # starts from initializer()
    k = TableAggregateKernel(
        "AGG",
        P,
        lambda: "",
        lambda key, v, agg: None if v == "clear" else agg + v,
        lambda key, v, agg: agg,
        reduce=False,
    )
    g = P.encode_many(["g"])[0]

    def add(ts, v):
        return Rec(ts, "t", 0, ts, ADD, 0, g, pickle.dumps((ADD, v)))

    entry, outs = k.process(g, [add(1, "x")], None, {})
    entry, outs = k.process(g, [add(2, "clear")], entry, {})
    assert entry is None and outs[0].value is None and pickle.loads(outs[0].old) == "x"
    entry, outs = k.process(g, [add(3, "y")], entry, {})
    assert entry == ("y", 3) and outs[0].old is None
    # in one micro-batch too: deleted at 9, then started over at 4 with that record's time
    entry, outs = k.process(g, [add(9, "clear"), add(4, "z")], entry, {})
    assert entry == ("z", 4) and (pickle.loads(outs[0].value), outs[0].ts) == ("z", 4)


def test_stream_table_join_looks_up_as_of_the_stream_timestamp():
    """Table updates arrive out of timestamp order; each stream record sees the version
    valid at its own timestamp, whichever batch the updates came in."""
    k = StreamTableJoinKernel("J", "left", lambda s, t: f"{s}+{t}", P, P, None)
    table = [r(20, 1, "v20", offset=0), r(10, 1, "v10", offset=1), r(40, 1, None, offset=2)]
    stream = [r(5, 0, "s5"), r(15, 0, "s15"), r(25, 0, "s25"), r(45, 0, "s45")]
    whole = k.process(b"k", sorted(table + stream), None, {})[1]
    entry, meta = None, {}
    for rec in table:
        entry, _ = k.process(b"k", [rec], entry, meta)
    split = [o for rec in stream for o in k.process(b"k", [rec], entry, meta)[1]]
    expected = ["s5+None", "s15+v10", "s25+v20", "s45+None"]
    assert [pickle.loads(o.value) for o in whole] == expected
    assert [pickle.loads(o.value) for o in split] == expected


@pytest.mark.parametrize("as_of", [True, False])
def test_left_join_joins_records_without_a_lookup_key_with_none(as_of):
    """KIP-962: a left join's null-key stream records (group key ``None``) are joined with
    ``None`` and leave no state."""
    k = StreamTableJoinKernel("J", "left", lambda s, t: f"{s}+{t}", P, P, None, as_of=as_of)
    records = [r(5, 0, "s5", key=None), r(7, 0, "s7", key=None)]
    entry, outs = k.process(None, records, None, {})
    assert entry is None
    assert [(o.key, pickle.loads(o.value), o.ts) for o in outs] == [
        (None, "s5+None", 5),
        (None, "s7+None", 7),
    ]


def test_stream_table_join_prunes_versions_beyond_history_retention():
    k = StreamTableJoinKernel("J", "inner", lambda s, t: t, P, P, history_ms=10)
    entry, _ = k.process(b"k", [r(1, 1, "a"), r(5, 1, "b"), r(30, 1, "c")], None, {})
    assert [ts for ts, _ in entry] == [5, 30]  # "b" is still valid at the cutoff (20)


def batches(kernel, batches_of_records):
    """Run each list of records as one micro-batch of one page; return the values emitted."""
    entries, meta, emitted = {}, {}, []
    for records in batches_of_records:
        for key in sorted({rec.key for rec in records}):
            recs = sorted(rec for rec in records if rec.key == key)
            entry, outs = kernel.process(key, recs, entries.get(key), meta)
            entries[key] = entry
            emitted += [None if o.value is None else pickle.loads(o.value) for o in outs]
        emitted += kernel.after_batch(entries, meta, 0)
    return emitted


def test_a_lookup_older_than_the_history_retention_finds_only_the_latest_version():
    """``RocksDBVersionedStore.get(key, asOf)`` past the history retention returns the key's
    latest version when it is not newer than ``asOf``, else null, even while older versions
    are still kept: "s50" finds nothing (not "a", the version valid at 50), "t50" finds its
    key's latest version.
    """
    k = StreamTableJoinKernel("J", "left", lambda s, t: f"{s}+{t}", P, P, history_ms=10)
    table = [r(0, 1, "a"), r(100, 1, "b"), r(40, 1, "c", key=b"t"), r(95, 1, "x", key=b"u")]
    later = [r(50, 0, "s50"), r(50, 0, "t50", key=b"t"), r(95, 0, "s95")]
    # keys in byte order: k's records, then t's; at 95 (within the retention) "a" is valid
    assert batches(k, [table, later]) == ["s50+None", "s95+a", "t50+c"]
    assert k.drops == {}


def test_a_table_update_older_than_the_history_retention_is_not_applied():
    """``RocksDBVersionedStore.put`` refuses an update older than the table time minus the
    history retention (its grace period), and ``KTableSource`` forwards nothing for it: the
    stream record at 95 finds no version at or before it, rather than the expired "x".
    """
    k = StreamTableJoinKernel("J", "left", lambda s, t: f"{s}+{t}", P, P, history_ms=10)
    first = [r(100, 1, "b", offset=0)]
    assert batches(k, [first, [r(50, 1, "x", offset=1), r(95, 0, "s95", offset=1)]]) == ["s95+None"]
    assert k.drops == {"expired": 1}
    # within one micro-batch, a key's own later-in-offset-order updates expire it too
    k = StreamTableJoinKernel("J", "left", lambda s, t: f"{s}+{t}", P, P, history_ms=10)
    one = [r(100, 1, "b", offset=0), r(50, 1, "x", offset=1), r(95, 0, "s95", offset=2)]
    assert batches(k, [one]) == ["s95+None"]
    assert k.drops == {"expired": 1}


def test_a_table_partition_behind_another_expires_nothing_kafka_streams_keeps():
    """Kafka Streams' versioned store has a table time per task (partition): an update of a
    partition whose records lag another's by more than the retention is applied, not
    dropped as expired because a page mixes keys of both partitions.
    """
    k = StreamTableJoinKernel("J", "inner", lambda s, t: f"{s}+{t}", P, P, history_ms=500)

    def at(ts, side, value, key, partition):
        return Rec(ts, "t", partition, ts, 0, side, key, pickle.dumps(value))

    first = [at(1000, 1, "a1", b"a", 0)]
    later = [at(100, 1, "b1", b"b", 1), at(150, 0, "click", b"b", 1)]
    assert batches(k, [first, later]) == ["click+b1"]
    assert k.drops == {}
    # a lookup in a micro-batch that brings the key's partition's first updates: the other
    # partition's time does not expire it (b0 at 100 is the version valid at 110, b2 newer)
    k = StreamTableJoinKernel("J", "left", lambda s, t: f"{s}+{t}", P, P, history_ms=500)
    later = [at(100, 1, "b0", b"b", 1), at(120, 1, "b2", b"b", 1), at(110, 0, "click", b"b", 1)]
    assert batches(k, [first, later]) == ["click+b0"]


def test_joiner_errors_name_the_operator_and_record():
    k = StreamTableJoinKernel("KSTREAM-JOIN-0000000003", "left", lambda s, t: 1 / 0, P, P, None)
    with pytest.raises(
        StreamsError,
        match=r"ZeroDivisionError.*KSTREAM-JOIN-0000000003.*"
        r"\(joiner\).*topic 't' partition 0 offset 7.*LogAndFail",
    ):
        k.process(b"k", [r(7, 0, "s")], None, {})


def test_stream_stream_join_in_one_micro_batch_does_not_take_another_keys_records_as_passed():
    # one page, one micro-batch, keys in byte order: k0's record at 100 must not make k200's
    # records at 50 and 55 late (a Kafka Streams task reads them interleaved, in time order)
    w = JoinWindowSpec(10, 10, 0)
    k = StreamStreamJoinKernel("J", "inner", lambda lv, rv: f"{lv}{rv}", P, P, w)
    entries, meta, outs = {}, {}, []
    for key, recs in [
        (b"k0", [r(100, 0, "X", key=b"k0")]),
        (b"k200", [r(50, 0, "L", key=b"k200"), r(55, 1, "R", key=b"k200")]),
    ]:
        entry, o = k.process(key, recs, entries.get(key), meta)
        entries[key] = entry
        outs += o
    outs += k.after_batch(entries, meta, 0)
    assert [(pickle.loads(o.value), o.ts) for o in outs] == [("LR", 55)]
    assert k.drops == {}
    # the next micro-batch judges by the stores' times this one reached (left: 100): L is past
    # the left store's retention (100 - 20), so S finds nothing; it is not dropped
    entry, o = k.process(b"k200", [r(60, 1, "S", key=b"k200")], entries.get(b"k200"), meta)
    assert o == [] and k.drops == {}


@pytest.mark.parametrize(
    ("join_type", "expected"), [("left", ["NNone"]), ("outer", ["NNone", "Nonen"])]
)
def test_stream_stream_join_emits_null_key_records_of_emitting_sides_at_once(join_type, expected):
    # KIP-962: KStreamKStreamJoin forwards joiner(value, null) for a null-key record of an
    # "outer" side (a left join's left, both sides of an outer join), with its own timestamp
    k = StreamStreamJoinKernel(
        "J", join_type, lambda lv, rv: f"{lv}{rv}", P, P, JoinWindowSpec(5, 5, 0)
    )
    entry, outs = k.process(None, [r(7, 0, "N", key=None), r(8, 1, "n", key=None)], None, {})
    assert entry is None
    assert [(pickle.loads(o.value), o.ts) for o in outs] == list(
        zip(expected, (7, 8)[: len(expected)], strict=True)
    )


def test_stream_stream_join_emits_left_non_matches_only_after_the_window_closes():
    # window 15 s (before = after), grace 5 s; the DSL guide's example, times in seconds
    w = JoinWindowSpec(15, 15, 5)
    k = StreamStreamJoinKernel("J", "left", lambda lv, rv: f"{lv}{rv}", P, P, w)
    entries, meta, seen = {}, {}, []
    for ts, side, v in [
        (3, 0, "A"),
        (4, 1, "a"),
        (5, 0, "B"),
        (6, 1, "b"),
        (40, 0, "E"),
        (60, 0, "F"),
        (80, 1, "f"),
    ]:
        entry, outs = k.process(b"k", [r(ts, side, v)], entries.get(b"k"), meta)
        entries[b"k"] = entry
        outs += k.after_batch(entries, meta, 0)
        seen.append([pickle.loads(o.value) for o in outs])
    assert seen[:4] == [[], ["Aa"], ["Ba"], ["Ab", "Bb"]]
    # E (ts 40) is emitted once stream time passes 40 + 15 + 5 = 60, F's close (80) is not
    # passed at 80: Kafka Streams' window is open while its close >= stream time
    assert seen[4:] == [[], [], ["ENone"]]


def _join(join_type, before, after, grace):
    """A stream-stream join kernel joining values as ``f"{left}{right}"``."""
    return StreamStreamJoinKernel(
        "J", join_type, lambda lv, rv: f"{lv}{rv}", P, P, JoinWindowSpec(before, after, grace)
    )


def _batches(kernel, batches):
    """Feed ``batches`` of ``(key, ts, side, value)``; each batch's outputs (value, ts)."""
    entries, meta, seen = {}, {}, []
    for batch in batches:
        outs = []
        for key, ts, side, v in batch:
            entry, o = kernel.process(key, [r(ts, side, v, key=key)], entries.get(key), meta)
            entries[key] = entry
            outs += o
        entries = {k: e for k, e in entries.items() if e}
        outs += kernel.after_batch(entries, meta, 0)
        seen.append([(pickle.loads(o.value), o.ts) for o in outs])
    return seen


def test_stream_stream_join_window_closes_after_stream_time_passes_it_not_at_it():
    # KStreamKStreamJoin.isOuterJoinWindowOpen: open while ts + after + grace >= stream time.
    # L0's window [0, 10] is open at stream time 10: R10 still joins it, no null result
    k = _join("left", 10, 10, 0)
    seen = _batches(k, [[(b"a", 0, 0, "L"), (b"b", 10, 0, "M")], [(b"a", 10, 1, "R")]])
    assert seen == [[], [("LR", 10)]]


def test_stream_stream_join_buffer_keeps_what_kafka_streams_join_store_returns():
    # the join store's retention is before + after + grace; a fetch returns ts > stream time -
    # retention: at stream time 20, L0 is gone, and R10 finds nothing (its null result was out)
    k = _join("left", 10, 10, 0)
    seen = _batches(k, [[(b"a", 0, 0, "L"), (b"b", 20, 0, "M")], [(b"a", 10, 1, "R")]])
    assert seen == [[("LNone", 0)], []]


def test_stream_stream_join_matches_come_in_the_other_sides_timestamp_order():
    # KStreamKStreamJoin fetches the other side's window store: matches in timestamp order
    k = _join("inner", 10, 10, 0)
    seen = _batches(k, [[(b"a", 5, 1, "R5")], [(b"a", 3, 1, "R3")], [(b"a", 4, 0, "L")]])
    assert seen == [[], [], [("LR3", 4), ("LR5", 5)]]


def test_stream_stream_join_non_matches_come_in_the_outer_join_stores_order():
    # Kafka Streams' outer-join store iterates by timestamp, then right before left, then key
    k = _join("outer", 1, 1, 0)
    first = [(b"b", 10, 0, "Lb"), (b"a", 12, 0, "La"), (b"a", 10, 1, "Ra"), (b"c", 10, 0, "Lc")]
    seen = _batches(k, [[*first, (b"a", 20, 1, "Rz")], [(b"z", 100, 0, "Z")]])
    assert seen == [
        [("NoneRa", 10), ("LbNone", 10), ("LcNone", 10), ("LaNone", 12)],  # closed at 20
        [("NoneRz", 20)],
    ]


def test_stream_stream_join_with_a_zero_before_emits_every_null_result():
    # KStreamKStreamLeftJoinTest.testLeftJoinedRecordsWithZeroAfterAreEmitted, mirrored: a
    # record leaves the join store (retention before + after + grace) when its window closes,
    # but its null result is owed until emitted (the outer-join store)
    k = _join("left", 0, 10, 0)
    seen = _batches(k, [[(b"a", 0, 0, "A")], [(b"b", 10, 0, "B")], [(b"c", 20, 0, "C")]])
    assert seen == [[], [], [("ANone", 0)]]  # A's window [0, 10] closes once 20 > 10
    seen = _batches(k, [[(b"a", 0, 0, "A")], [(b"b", 11, 0, "B")], [(b"c", 30, 0, "C")]])
    assert seen == [[], [("ANone", 0)], [("BNone", 11)]]


def test_stream_stream_join_outer_with_a_zero_after_emits_right_null_results():
    k = _join("outer", 10, 0, 0)
    seen = _batches(k, [[(b"a", 0, 1, "R")], [(b"b", 10, 0, "L")], [(b"c", 30, 0, "M")]])
    assert seen == [[], [], [("NoneR", 0), ("LNone", 10)]]


def test_a_record_kept_only_for_its_null_result_joins_nothing():
    # at stream time 10, A@0 is past the join store's retention (0 + 10): Kafka Streams' fetch
    # for x@10 (from 1 = 10 - 10 + 1) does not find it, though x is in A's window [0, 10]
    k = _join("left", 0, 10, 0)
    batches = [
        [(b"a", 0, 0, "A")],
        [(b"b", 10, 0, "B")],
        [(b"a", 10, 1, "x")],
        [(b"c", 20, 0, "C")],
    ]
    assert _batches(k, batches) == [[], [], [], [("ANone", 0)]]


def test_each_sides_join_store_keeps_records_by_its_own_time():
    # a fetch of the left store leaves out ts <= (largest left timestamp) - retention: right
    # records moving stream time on do not expire left ones (InMemoryWindowStore.fetch)
    k = _join("inner", 0, 10, 0)
    batches = [[(b"a", 0, 0, "A")], [(b"b", 10, 1, "y")], [(b"a", 10, 1, "x")]]
    assert _batches(k, batches) == [[], [], [("Ax", 10)]]


def test_a_late_stream_stream_record_still_joins_what_the_other_store_holds():
    # KStreamKStreamJoin drops no record for lateness: L@45 arrives when its window [35, 55]
    # has closed (stream time 75), and joins R@50, still in the right store (retention 20)
    k = _join("left", 10, 10, 0)
    seen = _batches(k, [[(b"a", 50, 1, "R"), (b"b", 75, 0, "X")], [(b"a", 45, 0, "L")]])
    assert seen == [[], [("LR", 50)]]
    assert k.drops == {}


def test_a_record_past_its_window_end_gets_its_null_result_at_once_and_still_joins():
    # KStreamKStreamJoin: without a match, a record whose window end (ts + after) is before
    # stream time is emitted at once, not kept for the grace; a right record that comes within
    # the grace still joins it (the join store has it)
    k = _join("left", 10, 10, 20)
    batches = [[(b"x", 100, 0, "X")], [(b"a", 85, 0, "L")], [(b"a", 90, 1, "R")]]
    assert _batches(k, batches) == [[], [("LNone", 85)], [("LR", 90)]]
    # a late record without a match: its null result at once too
    k = _join("left", 10, 10, 0)
    assert _batches(k, [[(b"x", 100, 0, "X")], [(b"a", 50, 0, "L")]]) == [[], [("LNone", 50)]]


def test_a_window_ending_before_its_record_gets_its_null_result_at_once():
    # JoinWindows with a negative after: L@100's window [90, 95] ends before L itself, and
    # KStreamKStreamJoin (stream time advanced by L first) emits L's null result at once; R@93
    # still joins it
    k = _join("left", 10, -5, 20)
    assert _batches(k, [[(b"a", 100, 0, "L")], [(b"a", 93, 1, "R")]]) == [
        [("LNone", 100)],
        [("LR", 100)],
    ]
