"""KernelPack (records packed by state page before a paged processor's shuffle), and its
``latest_per_key`` mode: one record per key and map task, for kernels that keep only a key's
latest update (``TableSourceKernel``), which must give exactly the kernel's result without it.
"""

from __future__ import annotations

import pickle

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtable import Serdes
from streamtable.compiler.codecs import SerdeCodec
from streamtable.compiler.paged import pack as pack_module
from streamtable.compiler.paged.join_kernels import TableTableJoinKernel
from streamtable.compiler.paged.pack import KernelPack
from streamtable.compiler.paged.processor import _unpack
from streamtable.compiler.paged.records import frame_schema, time_order
from streamtable.compiler.paged.table_kernels import TableSourceKernel

B = SerdeCodec(Serdes.bytes())
_SCHEMA = frame_schema()  # the frame columns a pack reads


def _batch(rows: list[tuple]) -> pa.RecordBatch:
    """Frame rows ``(key, value, ts, partition, offset, seq, topic)`` as an Arrow batch."""
    return pa.RecordBatch.from_pylist(
        [dict(zip(_SCHEMA.names, r, strict=True)) for r in rows], _SCHEMA
    )


def _materialize(
    tasks: list[list[list[tuple]]], latest: bool, entries: dict, kernel=None, sides=None
) -> tuple:
    """Pack each map task's batches (task ``i`` reads input ``sides[i]``, default 0), then
    run ``kernel`` (default ``TableSourceKernel``) over the packed rows in task order as the
    paged processor does (time sort, then the kernel): ``(entries after, outputs, packed
    record count)``.
    """
    groups: dict = {}
    packed = 0
    for i, batches in enumerate(tasks):
        side = sides[i] if sides else 0
        out = KernelPack(side, latest_per_key=latest)(iter(_batch(b) for b in batches))
        for row in (r for row_batch in out for r in row_batch.to_pylist()):
            packed += _count(row)
            _unpack(_Row(row["value"]), groups)
    kernel = kernel or TableSourceKernel()
    after, outs = dict(entries), []
    for gk in sorted(groups, key=lambda g: (g is not None, g or b"")):
        entry, emitted = kernel.process(gk, sorted(groups[gk], key=time_order), after.get(gk), {})
        if entry is None or gk is None:  # as the processor: no state without a group key
            after.pop(gk, None)
        else:
            after[gk] = entry
        outs.extend(emitted)
    return after, outs, packed


def _count(row: dict) -> int:
    return sum(len(recs) for recs in pickle.loads(row["value"]).values())


class _Row:
    def __init__(self, value: bytes) -> None:
        self.value = value


def test_latest_per_key_packs_one_record_per_key_and_task_and_the_table_is_unchanged():
    rows = [(b"a", b"1", 5, 0, 0, 0, "t"), (b"b", b"x", 6, 0, 1, 0, "t")]
    rows += [(b"a", b"2", 3, 0, 2, 0, "t"), (b"a", None, 9, 0, 3, 0, "t")]
    rows += [(b"a", b"3", 1, 0, 4, 0, "t")]  # the last in offset order, the earliest in time
    every = _materialize([[rows]], latest=False, entries={})
    latest = _materialize([[rows]], latest=True, entries={})
    assert every[2] == 5 and latest[2] == 2
    assert latest[:2] == every[:2]
    assert latest[0] == {b"a": (b"3", 1), b"b": (b"x", 6)}


def test_latest_per_key_flushes_every_so_many_keys(monkeypatch):
    monkeypatch.setattr(pack_module, "LATEST_KEYS_PER_FLUSH", 2)
    batches = [[(bytes([k]), b"v", 1, 0, k, 0, "t")] for k in range(5)]
    out = list(KernelPack(0, latest_per_key=True)(iter(_batch(b) for b in batches)))
    assert len(out) == 3  # after keys 0-1, after keys 2-3, at the end of the task
    assert sum(_count(r) for b in out for r in b.to_pylist()) == 5


def _rows(keys: list[bytes | None]) -> st.SearchStrategy:
    """Frame rows over ``keys``, with few coordinates so that records tie on all of them."""
    return st.tuples(
        st.sampled_from(keys),  # key (None: a record without a group key, kept as it is)
        st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"])),  # value (None: tombstone)
        st.integers(0, 2),  # ts
        st.sampled_from([None, 0, 1]),  # partition (None: a stateful upstream's row)
        st.one_of(st.none(), st.integers(0, 1)),  # offset
        st.integers(0, 1),  # seq
        st.one_of(st.none(), st.just("t")),  # topic
    )


_ROW = _rows([b"a", b"b", b"c"])
_ROW_OR_UNKEYED = _rows([b"a", b"b", b"c", None])


def test_latest_per_key_breaks_ties_as_the_kernel_does():
    """Rows of a stateful upstream carry no offset: the later of two with the same ts wins,
    and of different ts the later in time."""
    tied = [(b"a", b"1", 5, None, None, 0, None), (b"a", b"2", 5, None, None, 0, None)]
    tied += [(b"b", b"1", 7, None, None, 0, None), (b"b", b"2", 6, None, None, 0, None)]
    for latest in (False, True):
        table = _materialize([[tied[:1], tied[1:]]], latest=latest, entries={})[0]
        assert table == {b"a": (b"2", 5), b"b": (b"1", 7)}


@settings(max_examples=300, deadline=None)
@given(
    tasks=st.lists(st.lists(st.lists(_ROW_OR_UNKEYED, max_size=6), max_size=3), max_size=3),
    before=st.dictionaries(
        st.sampled_from([b"a", b"b", b"c"]), st.tuples(st.just(b"0"), st.integers(0, 4))
    ),
    flush_every=st.integers(1, 4),
)
def test_latest_per_key_gives_exactly_the_kernel_result_of_every_record(tasks, before, flush_every):
    """Any split into tasks and batches, ties on every coordinate (rows of a stateful
    upstream have no offset), flushes mid-task: the same table and the same changes."""
    old = pack_module.LATEST_KEYS_PER_FLUSH
    pack_module.LATEST_KEYS_PER_FLUSH = flush_every
    try:
        every = _materialize(tasks, latest=False, entries=before)
        latest = _materialize(tasks, latest=True, entries=before)
    finally:
        pack_module.LATEST_KEYS_PER_FLUSH = old
    assert latest[:2] == every[:2]
    assert latest[2] <= every[2]


@settings(max_examples=300, deadline=None)
@given(
    left=st.lists(st.lists(st.lists(_ROW, max_size=5), max_size=2), max_size=2),
    right=st.lists(st.lists(st.lists(_ROW, max_size=5), max_size=2), max_size=2),
    join_type=st.sampled_from(["inner", "left", "outer"]),
    before=st.dictionaries(
        st.sampled_from([b"a", b"b", b"c"]),
        st.tuples(
            st.one_of(st.none(), st.just(b"0")),
            st.integers(0, 2),
            st.one_of(st.none(), st.just(b"0")),
            st.integers(0, 2),
        ),
    ),
)
def test_latest_per_key_gives_exactly_the_table_table_join_result_of_every_record(
    left, right, join_type, before
):
    """The primary-key join reads each side's last update of a key: packing only those
    gives the same results, whatever the tasks of either side."""
    kernel = TableTableJoinKernel("J", join_type, lambda lv, rv: (lv, rv), B, B)
    sides = [0] * len(left) + [1] * len(right)
    every = _materialize(left + right, False, before, kernel, sides)
    latest = _materialize(left + right, True, before, kernel, sides)
    assert latest[:2] == every[:2]
