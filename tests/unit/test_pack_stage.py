import pickle

from _support import frame_batch
from streamtable.compiler.pack_stage import STATE_PAGES, PackStage, page_of


def unpack(rows):
    """{group key: [(value, ts, offset)]} over all packed rows."""
    out = {}
    for r in rows:
        for gk, recs in pickle.loads(r["value"]).items():
            assert r["page"] == page_of(gk)
            out.setdefault(gk, []).extend((v, ts, off) for v, ts, _t, _p, off, _s in recs)
    return out


def test_unwindowed_packs_records_of_a_key_in_input_order():
    out = next(
        PackStage()(iter([frame_batch([(b"a", b"1", 5), (b"b", b"2", 6), (b"a", b"3", 4)])]))
    )
    rows = out.to_pylist()
    assert unpack(rows) == {b"a": [(b"1", 5, 0), (b"3", 4, 2)], b"b": [(b"2", 6, 1)]}
    assert len(rows) == len({page_of(b"a"), page_of(b"b")})


def test_pages_are_pinned_because_checkpoints_depend_on_them():
    # CRC-32 of b"JFK" is 3311509919; with 128 pages that is page 31. A change here would make
    # every existing checkpoint of a Python aggregation unreadable.
    assert STATE_PAGES == 128
    assert page_of(b"JFK") == 31
    assert {page_of(bytes([i])) for i in range(256)} <= set(range(STATE_PAGES))
