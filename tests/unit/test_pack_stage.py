import pickle
import struct

import pyarrow as pa

from streamtable.compiler.pack_stage import PackStage
from streamtable.topology.nodes import TimeWindowSpec


def batch(rows):
    cols = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(cols[0], pa.binary()),
            pa.array(cols[1], pa.binary()),
            pa.array(cols[2], pa.int64()),
            pa.array([0] * len(rows), pa.int32()),
            pa.array(list(range(len(rows))), pa.int64()),
            pa.array([0] * len(rows), pa.int64()),
            pa.array(["t"] * len(rows), pa.string()),
        ],
        names=["key", "value", "ts", "partition", "offset", "seq", "topic"],
    )


def test_unwindowed_packs_records_of_a_key_in_input_order():
    out = next(PackStage()(iter([batch([(b"a", b"1", 5), (b"b", b"2", 6), (b"a", b"3", 4)])])))
    rows = out.to_pylist()
    assert [r["key"] for r in rows] == [b"a", b"b"]
    packed_a = pickle.loads(rows[0]["value"])
    assert [(v, ts, off) for v, ts, _t, _p, off, _s in packed_a] == [(b"1", 5, 0), (b"3", 4, 2)]
    assert rows[0]["ts"] == 5


def test_hopping_windows_put_a_record_in_every_window_it_belongs_to():
    w = TimeWindowSpec(size_ms=10, advance_ms=5, grace_ms=0)
    rows = next(PackStage(w)(iter([batch([(b"k", b"v", 12)])]))).to_pylist()
    starts = sorted(struct.unpack(">q", r["key"][-8:])[0] for r in rows)
    assert starts == [5, 10]
    assert all(r["key"][:-8] == b"k" for r in rows)
    assert all(r["event_time"].timestamp() == 0.012 for r in rows)
