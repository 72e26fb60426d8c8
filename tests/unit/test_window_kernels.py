"""Window kernels (time, sliding, session) against Kafka Streams' documented examples and source
rules, an independent model of the windows they should hold, and the determinism property: the
records of one source partition cut into micro-batches anywhere give the same state, the same
late records and the same final results."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from _window_runs import AGGREGATIONS, drive, kernel_for, records_strategy, recs, windows_of
from streamtable.compiler.codecs import PickleCodec
from streamtable.topology.nodes import (
    Aggregation,
    SessionWindowSpec,
    SlidingWindowSpec,
    TimeWindowSpec,
    WindowSpec,
)

pytestmark = pytest.mark.unit


# -- time windows (the lead's kernel) -------------------------------------------------------


def test_hopping_windows_for():
    # TimeWindows.windowsFor: starts at multiples of the advance, none before 0
    w = TimeWindowSpec(size_ms=10, advance_ms=3, grace_ms=0)
    assert w.windows_for(12) == [3, 6, 9, 12]
    assert w.windows_for(0) == [0]
    assert w.windows_for(9) == [0, 3, 6, 9]
    assert TimeWindowSpec(10, 10, 0).windows_for(10) == [10]  # the end is exclusive


def test_time_window_end_is_exclusive():
    run = drive(kernel_for(TimeWindowSpec(10, 10, 100)), recs(9, 10))
    assert windows_of(run) == {(0, 10): 1, (10, 20): 1}


@pytest.mark.parametrize(("stream_time", "late"), [(19, False), (20, True)])
def test_time_window_grace(stream_time, late):
    # window [0, 10) with grace 10 closes when stream time reaches end + grace = 20
    run = drive(kernel_for(TimeWindowSpec(10, 10, 10)), recs(stream_time, 5))
    assert (run.late == [(1, 0, 10)]) is late
    assert windows_of(run).get((0, 10)) == (None if late else 1)


def test_hopping_window_counts_and_late_drops_per_window():
    # size 10, advance 5, grace 0: a record at 7 belongs to [0, 10) and [5, 15); at stream
    # time 12 the first is closed (dropped, counted once) and the second still open
    run = drive(kernel_for(TimeWindowSpec(10, 5, 0)), recs(12, 7))
    assert run.late == [(1, 0, 10)]
    assert windows_of(run) == {(5, 15): 2, (10, 20): 1}


@pytest.mark.parametrize("cuts", ["each", ""])
def test_a_time_window_aggregator_returning_none_deletes_the_window(cuts):
    # KStreamWindowAggregate puts a null aggregate: the window is deleted (a tombstone goes
    # out, at the largest timestamp so far) and the next record starts from initializer()
    k = kernel_for(TimeWindowSpec(10, 10, 100), "clearing")  # None for a negative value
    run = drive(k, [(b"A", 1, 5), (b"A", 3, -1), (b"A", 2, 7)], cuts)
    assert windows_of(run) == {(0, 10): 7}
    assert run.state()[(b"A", 0, 10)][1] == 2  # started over: its own timestamp
    if cuts == "each":
        assert run.outputs() == [
            ((b"A", 0, 10), 5, 1),
            ((b"A", 0, 10), None, 3),
            ((b"A", 0, 10), 7, 2),
        ]
    else:  # one micro-batch: its last update
        assert run.outputs() == [((b"A", 0, 10), 7, 2)]


@pytest.mark.parametrize("cuts", ["each", ""])
def test_a_session_aggregator_returning_none_deletes_the_session(cuts):
    # KStreamSessionWindowAggregate puts the null aggregate of the merged session: the session
    # is gone, so a later record within the gap starts a new session from initializer()
    # instead of merging with it (the merger never sees None). A session in the store before
    # the micro-batch gets its tombstone (at its end); one made and deleted within it sends
    # nothing, as Kafka Streams' caching session store skips a flush with neither new nor old
    # value (CachingSessionStore.putAndMaybeForward)
    k = kernel_for(SessionWindowSpec(5, 100), "clearing")  # None for a negative value
    run = drive(k, [(b"A", 10, 4), (b"A", 12, -1), (b"A", 14, 3)], cuts)
    assert windows_of(run) == {(14, 14): 3}
    if cuts == "each":
        assert run.outputs() == [
            ((b"A", 10, 10), 4, 10),
            ((b"A", 10, 10), None, 10),  # merged away into [10, 12], whose aggregate is None
            ((b"A", 14, 14), 3, 14),
        ]
    else:  # one micro-batch: [10, 10] and [10, 12] came and went unseen
        assert run.outputs() == [((b"A", 14, 14), 3, 14)]


def test_a_session_aggregator_returning_none_for_a_record_at_its_session():
    # a record at ts finding the session [ts, ts] updates it in place: None deletes it (a
    # tombstone when the session was in the store before the micro-batch)
    records = [(b"A", 7, 2), (b"A", 7, -1)]
    run = drive(kernel_for(SessionWindowSpec(5, 100), "clearing"), records, "each")
    assert windows_of(run) == {}
    assert run.outputs() == [((b"A", 7, 7), 2, 7), ((b"A", 7, 7), None, 7)]
    run = drive(kernel_for(SessionWindowSpec(5, 100), "clearing"), records)
    assert windows_of(run) == {}
    assert run.outputs() == []


@pytest.mark.parametrize("cuts", ["each", ""])
def test_a_sliding_aggregator_returning_none_deletes_the_window(cuts):
    # KStreamSlidingWindowAggregate's updateWindowAndForward puts a null aggregate: the window
    # is deleted and later records no longer find it. d = 5: 10 makes [5, 10]; 12 (negative)
    # makes its left window [7, 12] from [5, 10]'s content, None at once, and nothing that
    # contains 10 but not 12 changes. [7, 12] was never in the store, so nothing goes out for
    # it: Kafka Streams' caching window store skips a flush with neither new nor old value
    k = kernel_for(SlidingWindowSpec(5, 100), "clearing")
    run = drive(k, [(b"A", 10, 4), (b"A", 12, -1)], cuts)
    assert windows_of(run) == {(5, 10): 4}
    assert run.table() == {(b"A", 5, 10): 4}
    assert run.outputs() == [((b"A", 5, 10), 4, 10)]
    # a window in the store before the micro-batch gets its tombstone, at the deleting
    # record's time: 9 (in [5, 10], out of order) deletes [5, 10] in the next micro-batch;
    # in the same one [5, 10] comes and goes unseen
    run = drive(k, [(b"A", 10, 4), (b"A", 9, -1)], cuts)
    assert (5, 10) not in windows_of(run)
    deleted = [o for o in run.outputs() if o[0] == (b"A", 5, 10) and o[1] is None]
    assert deleted == ([((b"A", 5, 10), None, 9)] if cuts == "each" else [])
    # 13 finds no window holding 12 (they were deleted): its left window [8, 13] starts from
    # the previous window found, [5, 10], whose largest timestamp 10 is within d of 13
    run = drive(k, [(b"A", 10, 4), (b"A", 12, -1), (b"A", 13, 1)], cuts)
    assert windows_of(run)[(8, 13)] == 5


def test_time_window_emit_final_at_close():
    run = drive(kernel_for(TimeWindowSpec(10, 10, 5), emit_final=True), recs(1, 3, 14, 15), "each")
    assert run.outputs() == [((b"A", 0, 10), 2, 3)]
    assert [len(b) for b in run.batches] == [0, 0, 0, 1]


# -- sliding windows -------------------------------------------------------------------------


def test_sliding_javadoc_example():
    # SlidingWindows javadoc: d = 5000, records at 8000, 9200, 12400
    run = drive(kernel_for(SlidingWindowSpec(5000, 0), "list"), [
        (b"A", 8000, 1), (b"A", 9200, 2), (b"A", 12400, 3)
    ], "each")  # fmt: skip
    assert windows_of(run) == {
        (3000, 8000): [1],
        (4200, 9200): [1, 2],
        (7400, 12400): [1, 2, 3],
        (8001, 13001): [2, 3],
        (9201, 14201): [3],
    }
    # window timestamp: the largest record timestamp in it
    assert {(s, e): w[1] for (_, s, e), w in run.state().items()} == {
        (3000, 8000): 8000,
        (4200, 9200): 9200,
        (7400, 12400): 12400,
        (8001, 13001): 12400,
        (9201, 14201): 12400,
    }
    # windowed key: key bytes + 8-byte start (TimeWindowedSerializer)
    assert run.outs[0].key == b"A" + (3000).to_bytes(8, "big")


def test_sliding_update_outputs_in_order():
    run = drive(kernel_for(SlidingWindowSpec(5000, 0)), recs(8000, 9200), "each")
    assert run.outputs() == [
        ((b"A", 3000, 8000), 1, 8000),
        ((b"A", 8001, 13001), 1, 9200),  # the first record's right window
        ((b"A", 4200, 9200), 2, 9200),
    ]


def test_sliding_out_of_order_record_updates_and_creates_windows():
    # 10 then 4 (d = 5, grace large): 4 creates its left window [0, 5] (early: ts < d), and
    # its right window [5, 10] holding 10
    run = drive(kernel_for(SlidingWindowSpec(5, 100), "list"), [
        (b"A", 10, "x"), (b"A", 4, "y")
    ], "each")  # fmt: skip
    assert windows_of(run) == {(5, 10): ["x"], (0, 5): ["y"]}
    run = drive(kernel_for(SlidingWindowSpec(5, 100), "list"), [
        (b"A", 20, "x"), (b"A", 17, "y"), (b"A", 12, "z")
    ], "each")  # fmt: skip
    assert windows_of(run) == {
        (15, 20): ["x", "y"],
        (12, 17): ["y", "z"],
        (18, 23): ["x"],
        (7, 12): ["z"],
        (13, 18): ["y"],
    }


def test_sliding_early_records_share_window_zero_to_d():
    run = drive(kernel_for(SlidingWindowSpec(10, 100), "list"), [
        (b"A", 3, "a"), (b"A", 1, "b"), (b"A", 7, "c")
    ], "each")  # fmt: skip
    assert windows_of(run) == {
        (0, 10): ["a", "b", "c"],
        (2, 12): ["a", "c"],  # right window of 1
        (4, 14): ["c"],  # right window of 3
    }


def test_sliding_ends_are_inclusive():
    # d = 5: 10 and 15 share [10, 15]; 16 is in 10's right window [11, 16] with 15
    run = drive(kernel_for(SlidingWindowSpec(5, 100)), recs(10, 15, 16), "each")
    assert windows_of(run) == {(5, 10): 1, (10, 15): 2, (11, 16): 2, (16, 21): 1}


@pytest.mark.parametrize(("stream_time", "late"), [(19, []), (20, []), (21, [(1, 5, 10)])])
def test_sliding_grace(stream_time, late):
    # d = 5, grace 10: the window [5, 10] accepts records while end >= stream time - grace
    # (ends are inclusive): a record at 10 still goes into it at stream time 20, not at 21
    run = drive(kernel_for(SlidingWindowSpec(5, 10)), recs(stream_time, 10), "each")
    assert run.late == late
    assert windows_of(run).get((5, 10)) == (None if late else 1)


@pytest.mark.parametrize(("stream_time", "late"), [(25, [(1, 5, 10)]), (26, [(1, 10, 15)])])
def test_sliding_record_dropped_when_its_last_window_closed(stream_time, late):
    # the record itself is dropped (once, for [ts, ts + d]) when ts + d < stream time - grace;
    # before that it is counted late for each closed window it would have updated
    run = drive(kernel_for(SlidingWindowSpec(5, 10)), recs(stream_time, 10), "each")
    assert run.late == late


def test_sliding_record_counted_late_per_closed_window():
    # d = 10, grace 0, stream time 20: a record at 12 is accepted (12 + 10 >= 20); it updates
    # [10, 20], creates its right window [13, 23] from it, and is counted late for each closed
    # window it would have created: the previous record's right window [6, 16] and its own
    # left window [2, 12] (updateWindowAndForward skips and counts each)
    run = drive(kernel_for(SlidingWindowSpec(10, 0), "list"), [
        (b"A", 5, "a"), (b"A", 20, "b"), (b"A", 12, "c")
    ], "each")  # fmt: skip
    assert run.late == [(2, 2, 12), (2, 6, 16)]
    assert windows_of(run) == {(0, 10): ["a"], (10, 20): ["b", "c"], (13, 23): ["b"]}


def test_sliding_late_record_counted_for_each_skipped_update():
    # d = 6, grace 0: at stream time 13 a record at 7 finds 0's window [0, 6] (previous record
    # 0): the previous record's right window and its own left window are both [1, 7], closed;
    # Kafka Streams skips (and counts) it twice
    run = drive(kernel_for(SlidingWindowSpec(6, 0)), recs(0, 13, 7), "each")
    assert run.late == [(2, 1, 7), (2, 1, 7)]


def test_sliding_emit_final_releases_at_end_plus_grace_and_again_after_an_update():
    # d = 5, grace 0: [5, 10] is released at stream time 10 (suppression: end + grace) and the
    # aggregation still accepts the second record at 10, so it is released again
    run = drive(kernel_for(SlidingWindowSpec(5, 0), emit_final=True), recs(10, 10), "each")
    assert run.outputs() == [((b"A", 5, 10), 1, 10), ((b"A", 5, 10), 2, 10)]


# -- session windows -------------------------------------------------------------------------


def test_session_javadoc_example():
    # SessionWindows javadoc: gap 5; 10, 12, 20 make [10, 12] and [20, 20]; then 16 merges
    # them into [10, 20] with all four values (given a grace: see the next test)
    k = kernel_for(SessionWindowSpec(5, 10), "list")
    run = drive(k, [(b"A", 10, 1), (b"A", 12, 2), (b"A", 20, 3)], "each")
    assert windows_of(run) == {(10, 12): [1, 2], (20, 20): [3]}
    run = drive(k, [(b"A", 10, 1), (b"A", 12, 2), (b"A", 20, 3), (b"A", 16, 4)], "each")
    assert windows_of(run) == {(10, 20): [1, 2, 3, 4]}
    # the merge: tombstones for both old sessions (at their ends), then the merged session
    assert run.outputs()[-3:] == [
        ((b"A", 10, 12), None, 12),
        ((b"A", 20, 20), None, 20),
        ((b"A", 10, 20), [1, 2, 3, 4], 20),
    ]
    # windowed key: key bytes + 8-byte end + 8-byte start (SessionWindowedSerializer)
    assert run.outs[-1].key == b"A" + (20).to_bytes(8, "big") + (10).to_bytes(8, "big")


def test_session_without_grace_does_not_merge_a_closed_session():
    # the same input with no grace: at stream time 20 the session [10, 12] closed at
    # 12 + 5 = 17 and the store (retention gap + grace = 5) no longer returns it
    run = drive(kernel_for(SessionWindowSpec(5, 0), "list"), [
        (b"A", 10, 1), (b"A", 12, 2), (b"A", 20, 3), (b"A", 16, 4)
    ], "each")  # fmt: skip
    assert run.outputs()[-2:] == [((b"A", 20, 20), None, 20), ((b"A", 16, 20), [3, 4], 20)]
    assert run.late == []


@pytest.mark.parametrize("grace", [0, 1])
def test_session_record_exactly_one_gap_later_extends_the_session(grace):
    # gap 10: the record at 10 finds [0, 0] (findSessions(ts - gap, ts + gap), both bounds
    # inclusive); with no grace too, as the store hides sessions by the stream time it has
    # seen (0), not by the stream time this record makes (10)
    run = drive(
        kernel_for(SessionWindowSpec(10, grace), "list"), [(b"A", 0, 1), (b"A", 10, 2)], "each"
    )
    assert windows_of(run) == {(0, 10): [1, 2]}
    assert run.late == []


def test_session_merge_order_initializer_merger_aggregator():
    # KStreamSessionWindowAggregate: agg = initializer(); agg = merger(key, agg, session) for
    # each found session in store order (end, start); then aggregator(key, value, agg)
    calls: list[str] = []
    AGGREGATIONS["trace"] = Aggregation(
        lambda: calls.append("init") or "i",
        lambda k, v, a: calls.append(f"agg({v},{a})") or f"{a}+{v}",
        merger=lambda k, a, b: calls.append(f"merge({a},{b})") or f"({a}|{b})",
    )
    try:
        k = kernel_for(SessionWindowSpec(5, 100), "trace")
        run = drive(k, [(b"A", 0, "x"), (b"A", 10, "y"), (b"A", 5, "z")])
    finally:
        del AGGREGATIONS["trace"]
    assert calls == [
        "init",
        "agg(x,i)",
        "init",
        "agg(y,i)",
        "init",
        "merge(i,i+x)",
        "merge((i|i+x),i+y)",
        "agg(z,((i|i+x)|i+y))",
    ]
    assert windows_of(run) == {(0, 10): "((i|i+x)|i+y)+z"}


def test_session_record_inside_a_session():
    # KStreamSessionWindowAggregate removes (and sends a tombstone for) every found session
    # when the merged window is not [ts, ts], even one equal to the merged window: in one
    # micro-batch only the last change of a windowed key is sent (as with the record cache)
    k = kernel_for(SessionWindowSpec(5, 100))
    run = drive(k, recs(0, 4, 2), "each")
    assert run.batches[-1] == [run.outs[-1]]
    assert run.outputs()[-1] == ((b"A", 0, 4), 3, 4)
    # one micro-batch: [0, 0] made and merged away unseen (the caching session store skips a
    # flush with neither new nor old value), [0, 4]
    run = drive(k, recs(0, 4, 2))
    assert run.outputs() == [((b"A", 0, 4), 3, 4)]
    # [0, 0] in the store before the micro-batch: its tombstone goes out
    run = drive(k, recs(0, 4, 2), {1})
    assert len(run.batches[-1]) == 2
    assert run.outputs()[1:] == [((b"A", 0, 0), None, 0), ((b"A", 0, 4), 3, 4)]


@pytest.mark.parametrize(("stream_time", "late"), [(29, False), (30, False), (31, True)])
def test_session_grace(stream_time, late):
    # gap 5, grace 10: a lone record at 15 is dropped once 15 < stream time - gap - grace
    run = drive(kernel_for(SessionWindowSpec(5, 10)), recs(stream_time, 15), "each")
    assert (run.late == [(1, 15, 15)]) is late


def test_session_late_judged_by_the_merged_window():
    # gap 5, grace 0, stream time 20 (close time 15): a record at 12 alone would be late, but
    # it reaches the session [16, 20] (12 + 5 >= 16) and the merged [12, 20] is open
    run = drive(kernel_for(SessionWindowSpec(5, 0)), recs(16, 20, 12), "each")
    assert run.late == []
    assert windows_of(run) == {(12, 20): 3}
    run = drive(kernel_for(SessionWindowSpec(5, 0)), recs(16, 20, 9), "each")
    assert run.late == [(2, 9, 9)]


def test_session_emit_final_at_end_plus_gap_plus_grace():
    k = kernel_for(SessionWindowSpec(5, 2), emit_final=True)
    run = drive(k, recs(0, 3, 9, 10, 11), "each")
    # [0, 3] closes at 3 + 5 + 2 = 10; its final carries the window end as timestamp
    assert run.outputs() == [((b"A", 0, 3), 2, 3)]
    assert [len(b) for b in run.batches] == [0, 0, 0, 1, 0]


def test_session_emit_final_released_session_merged_later_with_longer_retention():
    # retention 100: the store still returns [0, 0] after it closed (0 + 10 = 10 <= 20); a
    # record at 10 merges it with [20, 20]: [0, 0] stays released, [0, 20] is released later
    k = kernel_for(SessionWindowSpec(10, 0), emit_final=True, retention_ms=100)
    run = drive(k, recs(0, 20, 10, 31), "each")
    assert run.outputs() == [((b"A", 0, 0), 1, 0), ((b"A", 0, 20), 3, 20)]


# -- independent models (no late records) ----------------------------------------------------


def sliding_model(ts_list: list[int], d: int) -> dict[tuple[int, int], tuple[int, int]]:
    """Sliding windows by definition: each record's left window ([0, d] for records before
    d), its right window if a later record falls in it; (count, max ts) of the records in it.
    """
    starts = set()
    for t in ts_list:
        starts.add(max(0, t - d))
        if any(t < u <= t + 1 + d for u in ts_list):
            starts.add(t + 1)
    out = {}
    for s in starts:
        inside = [u for u in ts_list if s <= u <= s + d]
        out[(s, s + d)] = (len(inside), max(inside))
    return out


def session_model(ts_list: list[int], gap: int) -> dict[tuple[int, int], tuple[int, int]]:
    out = {}
    cur: list[int] = []
    for t in sorted(ts_list):
        if cur and t - cur[-1] > gap:
            out[(cur[0], cur[-1])] = (len(cur), cur[-1])
            cur = []
        cur.append(t)
    if cur:
        out[(cur[0], cur[-1])] = (len(cur), cur[-1])
    return out


def time_model(ts_list: list[int], w: TimeWindowSpec) -> dict[tuple[int, int], tuple[int, int]]:
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for t in ts_list:
        for s in w.windows_for(t):
            n, m = out.get((s, s + w.size_ms), (0, t))
            out[(s, s + w.size_ms)] = (n + 1, max(m, t))
    return out


timestamps = st.lists(st.integers(0, 40), min_size=1, max_size=14)


@settings(max_examples=150, deadline=None)
@given(timestamps, st.integers(1, 8))
def test_sliding_matches_model(ts_list, d):
    run = drive(kernel_for(SlidingWindowSpec(d, 1000)), recs(*ts_list), "each")
    got = {(s, e): (w[0], w[1]) for (_, s, e), w in run.state().items()}
    assert got == sliding_model(ts_list, d)
    assert run.table() == {(b"A", s, e): n for (s, e), (n, _) in got.items()}


@settings(max_examples=100, deadline=None)
@given(timestamps, st.integers(0, 8))
def test_session_matches_model(ts_list, gap):
    run = drive(kernel_for(SessionWindowSpec(gap, 1000)), recs(*ts_list), "each")
    got = {(s, e): (w[0], w[1]) for (_, s, e), w in run.state().items()}
    assert got == session_model(ts_list, gap)
    assert run.table() == {(b"A", s, e): n for (s, e), (n, _) in got.items()}


@settings(max_examples=60, deadline=None)
@given(timestamps, st.integers(1, 8), st.integers(1, 8))
def test_time_windows_match_model(ts_list, size, advance):
    w = TimeWindowSpec(size, min(size, advance), 1000)
    run = drive(kernel_for(w), recs(*ts_list), "each")
    got = {(s, e): (x[0], x[1]) for (_, s, e), x in run.state().items()}
    assert got == time_model(ts_list, w)


# -- determinism: any cut into micro-batches -------------------------------------------------


@st.composite
def window_specs(draw: Callable[..., Any]) -> tuple[WindowSpec, int]:
    kind = draw(st.sampled_from(["tumbling", "hopping", "sliding", "session"]))
    size = draw(st.integers(1, 8))
    grace = draw(st.integers(0, 6))
    extra = draw(st.sampled_from([0, 0, 3]))  # retention above the default
    if kind == "tumbling":
        return TimeWindowSpec(size, size, grace), size + grace + extra
    if kind == "hopping":
        return TimeWindowSpec(size, draw(st.integers(1, size)), grace), size + grace + extra
    if kind == "sliding":
        return SlidingWindowSpec(size, grace), 2 * size + grace + extra
    return SessionWindowSpec(size - 1, grace), size - 1 + grace + extra


@settings(max_examples=300, deadline=None)
@given(
    window_specs(),
    records_strategy,
    st.sets(st.integers(1, 17)),
    st.sampled_from(["count", "sum", "list", "clearing"]),
    st.booleans(),
)
# B@37 closes A's window [33, 37] (released as 1), then A@37, tying it, changes the closed
# window (released again as 2): in one micro-batch too, A@37 must see that B@37 came first
@example(
    (SlidingWindowSpec(4, 0), 8),
    [(b"A", 32, 0), (b"A", 33, 0), (b"B", 37, 0), (b"A", 37, 0)],
    set(),
    "count",
    True,
)
def test_any_micro_batch_cut_gives_the_same_result(spec, records, cuts, agg, emit_final):
    windows, retention = spec
    results = [
        drive(kernel_for(windows, agg, emit_final=emit_final, retention_ms=retention), records, c)
        for c in ("each", "", cuts)
    ]
    each = results[0]
    for run in results[1:]:
        assert run.state() == each.state()
        assert run.late == each.late
        assert run.drops == each.drops == len(each.late)
        if emit_final:
            assert sorted(map(repr, run.outputs())) == sorted(map(repr, each.outputs()))
        else:
            assert run.table() == each.table()
    # consistency of the outputs with the state
    closed_at = each.low
    for (gk, s, e), (value, ts, emitted) in each.state().items():
        key = (gk, s, e)
        if emit_final:
            closed = each.kernel.close_time(s, e) <= closed_at
            assert emitted is closed
            finals = [o for o in each.outputs() if o[0] == key]
            if closed:
                assert finals[-1][1:] == (value, ts)
            else:
                assert finals == []
        else:
            assert each.table()[key] == value


@settings(max_examples=200, deadline=None)
@given(window_specs(), records_strategy, st.sets(st.integers(1, 17)), st.booleans())
def test_the_dsl_count_gives_what_folding_a_count_gives(spec, records, cuts, emit_final):
    """A native count (the DSL's ``count()``) is counted by the kernels themselves, without
    decoding keys or values or calling its functions: the same windows, updates, final
    results, timestamps and late records as folding ``initializer``/``aggregator``/``merger``.
    """
    windows, retention = spec
    native, folded = (
        drive(
            kernel_for(windows, agg, emit_final=emit_final, retention_ms=retention), records, cuts
        )
        for agg in ("native_count", "count")
    )
    assert native.outputs() == folded.outputs()
    assert native.state() == folded.state()
    assert native.late == folded.late


def test_the_dsl_count_does_not_decode_keys_or_values():
    kernel = kernel_for(TimeWindowSpec(10, 10, 0), "native_count")
    kernel.spec = replace(kernel.spec, key_codec=_Undecodable(), value_codec=_Undecodable())
    run = drive(kernel, [(b"A", 1, 0), (b"A", 2, 0), (b"B", 3, 0)])
    assert run.table() == {(b"A", 0, 10): 2, (b"B", 0, 10): 1}


class _Undecodable(PickleCodec):
    def decode_many(self, datas: Any) -> list[Any]:
        raise AssertionError("decoded")


#: Any window kind, input, micro-batch cut and aggregation (in place, deleting) for the
#: old-value properties.
old_value_cases = given(
    window_specs(),
    records_strategy,
    st.sets(st.integers(1, 17)),
    st.sampled_from(["count", "list", "prepending", "clearing"]),
)


@settings(max_examples=300, deadline=None)
@old_value_cases
def test_each_output_carries_its_windows_aggregate_from_before_the_micro_batch(
    spec, records, cuts, agg
):
    # Kafka Streams' caching window and session stores flush one (new, old) pair per changed
    # window, old being the store's value before the flush (sent when a KTable.filter asks
    # for old values), and skip a window with neither: every kind of window, any cut, an
    # aggregator or merger that changes an aggregate in place ("list", "prepending") or an
    # aggregator that deletes it ("clearing")
    windows, retention = spec
    kernel = kernel_for(windows, agg, retention_ms=retention, with_old=True)
    run = drive(kernel, records, cuts)
    for before, batch in zip(run.befores, run.batches, strict=True):
        assert len({run.window(o) for o in batch}) == len(batch)  # one output per window
        for o in batch:
            old = None if o.old is None else pickle.loads(o.old)
            assert old == before.get(run.window(o)), (run.window(o), batch)
            assert (o.value, o.old) != (None, None), run.window(o)
    # the old values change nothing else
    plain = drive(kernel_for(windows, agg, retention_ms=retention), records, cuts)
    assert plain.outputs() == run.outputs()
    assert plain.state() == run.state()


def _passes(aggregate: Any) -> bool:
    """A filter that flips at every change of a count or list."""
    return (aggregate if isinstance(aggregate, int) else len(aggregate)) % 2 == 1


@settings(max_examples=300, deadline=None)
@old_value_cases
def test_each_final_result_carries_the_old_value_of_its_windows_last_change(
    spec, records, cuts, agg
):
    # Kafka Streams' suppression buffer keeps a window's last flushed change (new, old) and
    # emits it when the window closes: a final result's old value is the window's aggregate
    # before the last micro-batch that changed it, which is the old value the same window's
    # last update has in emit-on-update mode, over the same micro-batches; a window released
    # again in the micro-batch of its release (changed at its close time) has the value of
    # its previous release as old value, as Kafka's next commit would
    windows, retention = spec
    final = drive(
        kernel_for(windows, agg, emit_final=True, retention_ms=retention, with_old=True),
        records,
        cuts,
    )
    updates = drive(kernel_for(windows, agg, retention_ms=retention, with_old=True), records, cuts)
    downstream: dict[tuple[bytes, int, int], Any] = {}  # KTableFilter(passes) of the finals
    last: dict[tuple[bytes, int, int], Any] = {}
    for i, batch in enumerate(final.batches):
        released: dict[tuple[bytes, int, int], bytes] = {}
        for o in batch:
            window = final.window(o)
            if window in released:
                assert o.old == released[window], window
            else:
                ups = [
                    u
                    for b in updates.batches[: i + 1]
                    for u in b
                    if updates.window(u) == window and u.value is not None
                ]
                later = sum(1 for f in batch if final.window(f) == window) > 1
                if ups and not later:
                    assert (o.value, o.old) == (ups[-1].value, ups[-1].old), (window, ups)
            released[window] = o.value
            new, old = pickle.loads(o.value), None if o.old is None else pickle.loads(o.old)
            last[window] = new
            if _passes(new):
                downstream[window] = new
            elif old is not None and _passes(old):
                downstream.pop(window, None)  # a tombstone
    # what a table filter after the final results holds: the windows whose last final passes
    assert downstream == {w: v for w, v in last.items() if _passes(v)}
    # the old values change nothing else, and an emitted window keeps none
    plain = drive(kernel_for(windows, agg, emit_final=True, retention_ms=retention), records, cuts)
    assert plain.outputs() == final.outputs()
    assert plain.state() == final.state()
    for windows_of_key in final.entries.values():
        for w in windows_of_key.values():
            assert len(w) == 3 or not w[2], w


def test_a_window_released_again_in_its_micro_batch_has_its_last_release_as_old_value():
    # sliding windows of 1 ms, no grace: [0, 1] closes when 1 is read, and each record at 0
    # changes it at its close time, so it is released again at once; the old value of each
    # release is the previous one, in one micro-batch as with a micro-batch per record (Kafka
    # Streams' commit after each record): n < 3 then sends 1, 2 and a tombstone
    kernel = kernel_for(
        SlidingWindowSpec(1, 0), "count", emit_final=True, retention_ms=2, with_old=True
    )
    for cuts in ("", "each"):
        run = drive(kernel, [(b"B", 1, 0), (b"B", 0, 0), (b"B", 0, 0)], cuts)
        finals = [
            (run.window(o), pickle.loads(o.value), o.old and pickle.loads(o.old)) for o in run.outs
        ]
        assert finals == [((b"B", 0, 1), 1, None), ((b"B", 0, 1), 2, 1), ((b"B", 0, 1), 3, 2)]


@pytest.mark.parametrize("kind", ["session", "sliding"])
def test_a_window_deleted_re_created_and_deleted_again_in_one_batch_sends_its_tombstone(kind):
    # the window was in the store before the micro-batch: the cache's flush has an old value
    # and no new one, so a tombstone goes out whatever happened in between
    windows = SessionWindowSpec(5, 100) if kind == "session" else SlidingWindowSpec(5, 100)
    k = kernel_for(windows, "clearing", with_old=True)
    run = drive(k, [(b"A", 7, 2), (b"A", 7, -1), (b"A", 7, 3), (b"A", 7, -1)], {1})
    window = (b"A", 7, 7) if kind == "session" else (b"A", 2, 7)
    [last] = run.batches[-1]
    assert (run.window(last), last.value, pickle.loads(last.old)) == (window, None, 2)


def test_session_emit_final_hidden_session_overwritten():
    # gap 0, grace 3 (retention 3): at stream time 33 the store no longer returns [30, 30]
    # (released at 30 + 3 = 33), so a second record at 30 starts [30, 30] afresh: the put
    # overwrites it and suppression, past its close time, releases it again at once
    k = kernel_for(SessionWindowSpec(0, 3), emit_final=True)
    for cuts in ("each", ""):
        run = drive(k, recs(30, 33, 30), cuts)
        assert run.outputs() == [((b"A", 30, 30), 1, 30), ((b"A", 30, 30), 1, 30)]


def test_a_full_final_results_buffer_stops_the_application():
    """Suppressed.until_window_closes(BufferConfig.max_records(n).shut_down_when_full())
    shuts down when full."""
    import pickle as _pickle

    from streamtable.compiler.codecs import PickleCodec, SerdeCodec
    from streamtable.compiler.paged.records import Rec as _Rec
    from streamtable.compiler.paged.window_kernels import TimeWindowKernel, WindowAggregateSpec
    from streamtable.errors import StreamsError
    from streamtable.serde import Serdes
    from streamtable.topology.nodes import Aggregation, TimeWindowSpec

    spec = WindowAggregateSpec(
        "agg",
        Aggregation(lambda: 0, lambda k, v, a: a + 1),
        SerdeCodec(Serdes.bytes()),
        PickleCodec(),
        TimeWindowSpec(10, 10, 0),
        retention_ms=10,
        emit_final=True,
        buffer_max_records=128,  # one pending window per state page
    )
    k = TimeWindowKernel(spec)
    meta = {}
    recs = [_Rec(t, "t", 0, t, 0, 0, b"k", _pickle.dumps(1), None, t) for t in (1, 11)]
    entry, _ = k.process(b"k", recs, None, meta)
    with pytest.raises(StreamsError, match="suppression buffer of 'agg' is full: 2 windows"):
        k.after_batch({b"k": entry}, meta, 5)  # nothing closed yet: two windows wait
