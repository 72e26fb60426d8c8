import pickle
import struct

from _support import frame_batch
from streamtable.compiler.pack_stage import PackStage
from streamtable.topology.nodes import TimeWindowSpec


def test_unwindowed_packs_records_of_a_key_in_input_order():
    out = next(
        PackStage()(iter([frame_batch([(b"a", b"1", 5), (b"b", b"2", 6), (b"a", b"3", 4)])]))
    )
    rows = out.to_pylist()
    assert [r["key"] for r in rows] == [b"a", b"b"]
    packed_a = pickle.loads(rows[0]["value"])
    assert [(v, ts, off) for v, ts, _t, _p, off, _s in packed_a] == [(b"1", 5, 0), (b"3", 4, 2)]
    assert rows[0]["ts"] == 5


def test_hopping_windows_put_a_record_in_every_window_it_belongs_to():
    w = TimeWindowSpec(size_ms=10, advance_ms=5, grace_ms=0)
    rows = next(PackStage(w)(iter([frame_batch([(b"k", b"v", 12)])]))).to_pylist()
    starts = sorted(struct.unpack(">q", r["key"][-8:])[0] for r in rows)
    assert starts == [5, 10]
    assert all(r["key"][:-8] == b"k" for r in rows)
    assert all(r["event_time"].timestamp() == 0.012 for r in rows)
