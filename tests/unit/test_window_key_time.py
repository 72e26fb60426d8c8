"""Windows close by their key's time: the smallest partition time over the source partitions
that delivered the key (Kafka Streams closes a task's windows by the task's stream time, so a
partition that stops delivering holds only its own keys' windows).

The kernels are driven as ``PartitionTimeProcessor`` drives them: records stamped with their
partition's running maximum, resolved against the earlier micro-batches, each key processed,
the partition times advanced, then ``after_batch`` with the low watermark.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from _window_runs import kernel_for
from streamtable.compiler.paged.partition_time import (
    advance_partition_times,
    low_watermark,
    resolve_stream_times,
)
from streamtable.compiler.paged.records import Out, Rec
from streamtable.compiler.paged.window_kernels import WindowKernel, compact_sources
from streamtable.topology.nodes import SessionWindowSpec, SlidingWindowSpec, TimeWindowSpec


class Page:
    """One state page of a windowed aggregation, fed micro-batch by micro-batch."""

    def __init__(self, kernel: WindowKernel) -> None:
        self.kernel = kernel
        self.entries: dict[bytes, Any] = {}
        self.meta: dict[str, Any] = {"partition_times": {}}
        self.offsets: dict[int, int] = {}

    def batch(self, *records: tuple[Any, ...]) -> list[tuple[bytes, int, Any]]:
        """Process ``(partition, key, ts[, value])`` records (offset order per partition; value
        1 unless given); returns the outputs as ``(key, window start, value)``.
        """
        groups: dict[bytes, list[Rec]] = {}
        chunks: dict[int, list[int]] = {}  # partition -> [first, last, max ts]
        for part, key, ts, *value in records:
            off = self.offsets[part] = self.offsets.get(part, -1) + 1
            chunk = chunks.setdefault(part, [off, off, ts])
            chunk[1], chunk[2] = off, max(chunk[2], ts)
            v = pickle.dumps(value[0] if value else 1)
            rec = Rec(ts, "t", part, off, 0, 0, key, v, None, chunk[2])
            groups.setdefault(key, []).append(rec)
        summaries = [("t", p, c[0], c[1], c[2]) for p, c in chunks.items()]
        times = self.meta["partition_times"]
        groups = resolve_stream_times(groups, summaries, times)
        k = self.kernel
        k.drops, k.late = {}, []
        outs: list[Out] = []
        for gk in sorted(groups):
            entry, o = k.process(gk, groups[gk], self.entries.get(gk), self.meta)
            if entry is None:
                self.entries.pop(gk, None)
            else:
                self.entries[gk] = entry
            outs.extend(o)
        advance_partition_times(times, summaries)
        outs.extend(k.after_batch(self.entries, self.meta, low_watermark(times)))
        return [
            (o.key[:1], int.from_bytes(o.key[1:9], "big"), o.value and pickle.loads(o.value))
            for o in outs
        ]

    def windows(self, key: bytes) -> set[tuple[int, int]]:
        return set(self.entries.get(key, {}))


TUMBLING = TimeWindowSpec(10, 10, 0)


def test_a_quiet_partition_does_not_hold_the_windows_of_other_partitions_keys():
    page = Page(kernel_for(TUMBLING, emit_final=True))
    assert page.batch((0, b"A", 5), (1, b"B", 5)) == []
    # partition 1 stops delivering; partition 0 moves on: A's window [0, 10) closes (its
    # final result), B's waits for partition 1, as Kafka Streams' task of partition 1 would
    assert page.batch((0, b"A", 25)) == [(b"A", 0, 1)]
    assert page.windows(b"A") == {(20, 30)}
    assert page.windows(b"B") == {(0, 10)}
    assert page.batch((1, b"B", 12)) == [(b"B", 0, 1)]


def test_state_of_a_fed_partition_expires_while_another_is_quiet():
    page = Page(kernel_for(TUMBLING))  # emit on update; retention = size + grace
    page.batch((0, b"A", 5), (1, b"B", 5))
    for t in range(15, 100, 10):
        page.batch((0, b"A", t))
    assert page.windows(b"A") == {(90, 100)}  # earlier windows left state
    assert page.windows(b"B") == {(0, 10)}
    sets = page.meta["source_sets"]
    assert {k: sets[i] for k, i in page.meta["sources"].items()} == {
        b"A": (("t", 0),),
        b"B": (("t", 1),),
    }


def test_a_key_read_from_two_partitions_closes_by_the_slower_one():
    page = Page(kernel_for(TUMBLING, emit_final=True))
    page.batch((0, b"A", 5), (1, b"A", 6))
    assert page.batch((0, b"A", 30)) == []  # partition 1 can still deliver A at 6
    assert page.batch((1, b"A", 8), (1, b"C", 31)) == [(b"A", 0, 3)]


def test_a_partition_new_to_a_key_cannot_reopen_its_closed_window():
    page = Page(kernel_for(TUMBLING, emit_final=True))
    page.batch((0, b"A", 5), (1, b"B", 1))
    assert page.batch((0, b"A", 25)) == [(b"A", 0, 1)]
    # partition 1 (time 3 with this record) delivers A for the first time, for the window
    # A's partition has closed: late, judged by A's key time, not by partition 1's
    assert page.batch((1, b"A", 3)) == []
    assert page.kernel.drops == {"late": 1}
    assert page.kernel.late[0][1]["stream_time"] == 25
    assert page.windows(b"A") == {(20, 30)}


def test_a_window_scheduled_before_a_key_gained_a_slower_partition_waits_for_it():
    page = Page(kernel_for(TUMBLING, emit_final=True))
    page.batch((0, b"A", 5), (1, b"B", 0))
    # partition 1 reaches A's key time (5) and delivers A: it joins A's sources
    page.batch((0, b"A", 8), (1, b"B", 6), (1, b"A", 7))
    assert page.batch((0, b"X", 40)) == []
    assert page.batch((1, b"B", 11)) == [(b"A", 0, 3), (b"B", 0, 2)]


def test_a_partition_behind_a_key_time_does_not_lower_it():
    page = Page(kernel_for(TUMBLING, emit_final=True, retention_ms=100))
    page.batch((0, b"A", 15), (1, b"B", 1))
    assert page.batch((0, b"A", 25)) == [(b"A", 10, 1)]
    page.batch((1, b"A", 2))  # partition 1 (time 2) delivers A: late, judged by 25
    # partition 1 joined A's sources behind A's key time, which stays 25: its next record of
    # A is judged by 25 too, and the window A's final result came from stays as it was
    # (partition 1's own key B closes its window at 12)
    assert page.batch((1, b"A", 12)) == [(b"B", 0, 1)]
    assert page.kernel.drops == {"late": 1}
    assert page.entries[b"A"][(10, 20)] == [1, 15, True]


def test_a_key_that_left_state_cannot_be_reopened_by_a_partition_new_to_it():
    page = Page(kernel_for(TUMBLING, emit_final=True))  # retention = size: closed is gone
    page.batch((0, b"A", 5), (1, b"B", 1))
    assert page.batch((0, b"C", 25)) == [(b"A", 0, 1)]
    assert b"A" not in page.entries
    assert page.batch((1, b"A", 3)) == []  # late, judged by the key time A left state at
    assert page.kernel.drops == {"late": 1}
    assert page.batch((1, b"B", 30)) == [(b"B", 0, 1)]  # not A's [0, 10) a second time
    assert b"A" not in page.meta["floors"]  # forgotten once the low watermark passed it


@pytest.mark.parametrize(
    "windows",
    [SessionWindowSpec(5, 0), SlidingWindowSpec(5, 3)],
    ids=["session", "sliding"],
)
def test_session_and_sliding_windows_close_by_their_key_time(windows):
    page = Page(kernel_for(windows, emit_final=True))
    page.batch((0, b"A", 20), (1, b"B", 20))
    outs = page.batch((0, b"A", 60))
    assert [k for k, _s, _v in outs] == [b"A"]
    assert all(v == 1 for _k, _s, v in outs)


def test_a_key_of_a_page_saved_before_key_times_takes_the_partitions_of_its_next_records():
    kernel = kernel_for(TUMBLING, emit_final=True)
    page = Page(kernel)
    page.batch((0, b"A", 5), (1, b"B", 5))
    # what a page saved by the previous version holds: one next-close time, no sources
    page.meta["next_close"] = 10
    for name in ("sources", "source_sets", "floors"):
        del page.meta[name]
    # A's next record comes from partition 0: A's windows, the old one too, close by it;
    # B, not seen since, waits for the low watermark (5)
    assert page.batch((0, b"A", 25)) == [(b"A", 0, 1)]
    assert page.batch((0, b"A", 26)) == []
    assert page.batch((1, b"X", 26)) == [(b"B", 0, 1)]


def test_source_bookkeeping_holds_only_the_keys_in_state():
    page = Page(kernel_for(TUMBLING))
    page.batch((0, b"A", 5), (1, b"B", 5), (2, b"C", 5))
    page.batch((0, b"A", 40), (1, b"B", 40))  # C's partition 2 goes quiet
    page.batch((0, b"D", 1))  # late for every window: D never enters state
    assert set(page.entries) == {b"A", b"B", b"C"}
    assert set(page.meta["sources"]) == {b"A", b"B", b"C"}
    page.batch((0, b"A", 60), (1, b"B", 60))  # A's and B's windows at 40 expire
    page.batch((2, b"C", 60))  # C's window [0, 10) expires, the key is left with [60, 70)
    page.batch((0, b"A", 80), (1, b"B", 80), (2, b"E", 65))
    sets = page.meta["source_sets"]
    assert {k: sets[i] for k, i in page.meta["sources"].items()} == {
        b"A": (("t", 0),),
        b"B": (("t", 1),),
        b"C": (("t", 2),),
        b"E": (("t", 2),),
    }
    assert len(sets) == 3  # one entry per distinct set in use


def test_a_session_of_a_key_read_from_two_partitions_is_released_once_by_its_key_time():
    page = Page(kernel_for(SessionWindowSpec(5, 0), emit_final=True))
    page.batch((0, b"A", 20), (1, b"A", 20))
    # partition 0 reaches 30 with A's session [25, 25] at its close: not released, because
    # partition 1 (time 20) can still change it
    assert page.batch((0, b"X", 30), (0, b"A", 25)) == []
    page.batch((1, b"A", 22))  # merges [25, 25] into [22, 25]
    outs = page.batch((1, b"Y", 40))
    # one final result per session (the key bytes hold the end first): [20, 20], [22, 25]
    assert outs == [(b"A", 20, 2), (b"A", 25, 2)]


def test_unused_source_sets_are_dropped_and_keys_renumbered():
    meta = {
        "source_sets": [(("t", 0),), (("t", 1),), (("t", 0), ("t", 1)), (("t", 2),)],
        "sources": {b"A": 3, b"B": 1, b"C": 3},
    }
    compact_sources(meta)
    assert meta["source_sets"] == [(("t", 2),), (("t", 1),)]
    assert meta["sources"] == {b"A": 0, b"B": 1, b"C": 0}


def test_a_page_drops_source_sets_no_key_uses():
    page = Page(kernel_for(TUMBLING))
    parts = range(12)  # keys read from 2 of 12 partitions each: 66 distinct sets
    pairs = [(p, q) for p in parts for q in parts if p < q]
    page.batch(*[(p, b"x%d" % p, 0) for p in parts])
    page.batch(
        *[r for n, (p, q) in enumerate(pairs) for r in ((p, b"k%d" % n, 1), (q, b"k%d" % n, 1))]
    )
    assert len(page.meta["source_sets"]) > 64
    page.batch(*[(p, b"x%d" % p, 30) for p in parts])  # every window but the new ones expires
    assert set(page.entries) == set(page.meta["sources"]) == {b"x%d" % p for p in parts}
    assert sorted(page.meta["source_sets"]) == [(("t", p),) for p in parts]


def test_a_key_its_aggregator_deleted_keeps_its_key_time_after_the_batch():
    page = Page(kernel_for(TUMBLING, "clearing"))  # a negative value deletes the window
    page.batch((0, b"A", 22), (1, b"B", 0))
    assert page.batch((0, b"A", 25, -1), (0, b"X", 40)) == [(b"A", 20, None), (b"X", 40, 1)]
    assert page.meta["floors"] == {b"A": 40}  # partition 0 reached 40 after A's record
    assert page.batch((1, b"B", 28), (1, b"A", 25, 5)) == [(b"B", 20, 1)]
    assert page.kernel.drops == {"late": 1}


def test_the_first_records_of_a_partition_do_not_take_back_the_low_watermark():
    page = Page(kernel_for(TUMBLING, emit_final=True))
    page.batch((0, b"A", 7))
    assert page.batch((0, b"B", 12)) == [(b"A", 0, 1)]  # A's window closed and left state
    page.batch((1, b"C", 0))  # partition 1's first record: late, judged by 12
    assert page.kernel.drops == {"late": 1}
    page.batch((1, b"A", 1))
    assert page.kernel.drops == {"late": 1}
    assert page.batch((1, b"C", 30), (0, b"B", 30)) == [(b"B", 10, 1)]  # no A a second time


def test_a_key_that_entered_from_a_partition_behind_it_is_not_held_by_a_quiet_one():
    page = Page(kernel_for(TimeWindowSpec(100, 100, 0), emit_final=True))
    page.batch((0, b"A", 5), (1, b"Q", 0), (2, b"R", 0))  # partition 1 goes quiet
    assert page.batch((0, b"X", 150)) == [(b"A", 0, 1)]
    # A comes back from partition 2 (time 120, behind A's 150): judged by 150, accepted in
    # [100, 200), and closed by partition 2 when it passes 200, not by quiet partition 1
    page.batch((2, b"R", 120), (2, b"A", 120))
    assert (b"A", 100, 1) in page.batch((0, b"X", 1000), (2, b"R", 1000))


def test_a_partition_first_seen_behind_the_low_watermark_does_not_lower_a_key_time():
    page = Page(kernel_for(TUMBLING, emit_final=True))
    page.batch((0, b"A", 5))
    assert page.batch((0, b"A", 15)) == [(b"A", 0, 1)]  # the low watermark is 15
    page.batch((1, b"A", 3))  # partition 1's first record: late, judged by 15
    page.batch((1, b"A", 4))  # partition 1 is at 4, A's time stays 15: late again
    assert page.kernel.drops == {"late": 1}
    assert page.windows(b"A") == {(10, 20)}
    assert page.batch((0, b"X", 40), (1, b"X", 40)) == [(b"A", 10, 1)]  # not [0, 10) again
