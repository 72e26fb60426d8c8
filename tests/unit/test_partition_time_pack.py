"""PartitionTimePack works on columns (numpy and pyarrow) and hands records over as pickled
columns: each record must reach its page with exactly what a record-by-record pack gives it —
its partition's running maximum up to and including it (``stream_time``), the same before it
(``time_before``), and the task's chunk summaries — whatever the batches, partitions, missing
coordinates and keys.
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtable.compiler.pack_stage import page_of
from streamtable.compiler.paged.partition_time import (
    NO_PARTITION,
    PartitionTimePack,
    unpack_records,
)
from streamtable.compiler.paged.records import Rec

_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("ts", pa.int64()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("seq", pa.int64()),
    ("topic", pa.string()),
]


def _batch(rows: list[dict[str, Any]], with_old: bool) -> pa.RecordBatch:
    fields = _FIELDS + ([("old", pa.binary())] if with_old else [])
    return pa.RecordBatch.from_pylist(rows, pa.schema(fields))


def _record_by_record(
    batches: list[list[dict[str, Any]]], single: bool
) -> tuple[dict[int, dict[Any, list[Rec]]], list[tuple[str, int, int, int, int]]]:
    """What each page receives, packing one record at a time: ``({page: {key: [Rec]}},
    chunk summaries)``.
    """
    chunks: dict[tuple[str, int], list[int]] = {}
    pages: dict[int, dict[Any, list[Rec]]] = {}
    for rows in batches:
        for r in rows:
            topic, part, offset = NO_PARTITION[0], NO_PARTITION[1], 0
            if not single:
                topic = r["topic"] or topic
                part = part if r["partition"] is None else r["partition"]
                offset = r["offset"] or 0
            chunk = chunks.get((topic, part))
            if chunk is None:
                before = None
                chunk = chunks[(topic, part)] = [offset, offset, r["ts"]]
            else:
                before = chunk[2]
                chunk[1] = max(chunk[1], offset)
                chunk[2] = max(chunk[2], r["ts"])
            rec = Rec(
                r["ts"],
                topic,
                part,
                offset,
                r["seq"] or 0,
                0,
                r["key"],
                r["value"],
                r.get("old"),
                chunk[2],
                before,
            )
            page = 0 if r["key"] is None else page_of(r["key"])
            pages.setdefault(page, {}).setdefault(r["key"], []).append(rec)
    return pages, [(t, p, c[0], c[1], c[2]) for (t, p), c in chunks.items()]


def _packed(
    batches: list[list[dict[str, Any]]], single: bool, with_old: bool
) -> tuple[dict[int, dict[Any, list[Rec]]], list[tuple[str, int, int, int, int]]]:
    """What each page receives from :class:`PartitionTimePack`."""
    out = PartitionTimePack(single=single)(iter(_batch(b, with_old) for b in batches))
    pages: dict[int, dict[Any, list[Rec]]] = {}
    summaries: dict[int, list[Any]] = {}
    for rows in out:
        for row in rows.to_pylist():
            if row["chunks"] is not None:
                summaries[row["page"]] = pickle.loads(row["chunks"])
            else:
                unpack_records(row["value"], pages.setdefault(row["page"], {}))
    distinct = {pickle.dumps(s) for s in summaries.values()}
    assert len(distinct) <= 1, "every page must receive the same chunk summaries"
    return pages, next(iter(summaries.values()), [])


_row = st.fixed_dictionaries(
    {
        "key": st.sampled_from([b"a", b"b", b"key-0000042", None]),
        "value": st.binary(max_size=3) | st.none(),
        "ts": st.integers(0, 50),
        "partition": st.sampled_from([0, 1, 2, None]),
        "offset": st.integers(0, 100) | st.none(),
        "seq": st.integers(0, 3) | st.none(),
        "topic": st.sampled_from(["t", "u", None]),
        "old": st.binary(max_size=2) | st.none(),
    }
)


@settings(max_examples=300, deadline=None)
@given(
    batches=st.lists(st.lists(_row, min_size=1, max_size=12), min_size=1, max_size=4),
    single=st.booleans(),
    with_old=st.booleans(),
)
def test_each_page_receives_what_a_record_by_record_pack_gives(batches, single, with_old):
    if not with_old:
        batches = [[{k: v for k, v in r.items() if k != "old"} for r in b] for b in batches]
    assert _by_partition(*_packed(batches, single, with_old)) == _by_partition(
        *_record_by_record(batches, single)
    )


def _by_partition(pages: dict[int, dict[Any, list[Rec]]], chunks: list[Any]) -> tuple:
    """Each key's records per source partition, in their order: all the processor reads
    (it orders a key's records by ``arrival_order``, which takes each partition's records in
    their own order and merges the partitions by timestamp).
    """
    return {
        page: {gk: sorted(recs, key=lambda r: (r.topic, r.partition)) for gk, recs in g.items()}
        for page, g in pages.items()
    }, chunks


def test_one_partition_across_batches_keeps_its_running_maximum():
    rows = [
        dict(key=b"a", value=b"1", ts=9, partition=0, offset=0, seq=0, topic="t"),
        dict(key=b"b", value=b"2", ts=4, partition=0, offset=1, seq=0, topic="t"),
    ]
    later = [dict(key=b"a", value=b"3", ts=7, partition=0, offset=2, seq=0, topic="t")]
    pages, chunks = _packed([rows, later], single=False, with_old=False)
    a = pages[page_of(b"a")][b"a"]
    assert [(r.ts, r.stream_time, r.time_before) for r in a] == [(9, 9, None), (7, 9, 9)]
    (b,) = pages[page_of(b"b")][b"b"]
    assert (b.stream_time, b.time_before) == (9, 9)
    assert chunks == [("t", 0, 0, 2, 9)]


def test_a_record_without_a_timestamp_is_refused_with_a_message():
    rows = [dict(key=b"a", value=b"1", ts=None, partition=0, offset=0, seq=0, topic="t")]
    with pytest.raises(ValueError, match="a record without a timestamp reached a windowed"):
        list(PartitionTimePack()(iter([_batch(rows, with_old=False)])))
