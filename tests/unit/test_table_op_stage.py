"""``filter``/``map_values`` on a table's changes (:class:`TableOpStage`) without Spark."""

import pyarrow as pa

from streamtable.compiler.codecs import PickleCodec
from streamtable.compiler.paged.records import frame_schema
from streamtable.compiler.paged.stages import TableOpStage
from streamtable.topology.nodes import TableOpKind

P = PickleCodec()
SCHEMA = frame_schema(("old", pa.binary()))


def apply(ops, changes):
    """``[(key, new, old)]`` forwarded by the chain ``ops`` for ``changes``."""
    n = len(changes)
    batch = pa.RecordBatch.from_pydict(
        {
            "key": P.encode_many([k for k, _, _ in changes]),
            "value": P.encode_many([new for _, new, _ in changes]),
            "ts": list(range(n)),
            "partition": [0] * n,
            "offset": list(range(n)),
            "seq": [0] * n,
            "topic": ["t"] * n,
            "old": P.encode_many([old for _, _, old in changes]),
        },
        schema=SCHEMA,
    )
    stage = TableOpStage(tuple((kind, fn, f"op-{i}") for i, (kind, fn) in enumerate(ops)), P, P)
    out = next(iter(stage([batch]))).to_pydict()
    return list(
        zip(
            P.decode_many(out["key"]),
            P.decode_many(out["value"]),
            P.decode_many(out["old"]),
            strict=True,
        )
    )


def test_a_filter_forwards_nothing_for_a_row_that_neither_passes_nor_passed():
    # Kafka Streams' KTableFilter with old values: (null, null) after the predicate is dropped
    at_least_2 = (TableOpKind.FILTER, lambda k, n: n >= 2)
    changes = [("a", 1, None), ("b", 2, 1), ("c", 1, 2), ("d", 1, 0), ("e", None, 1)]
    assert apply([at_least_2], changes) == [("b", 2, None), ("c", None, 2)]


def test_map_values_forwards_every_change_even_when_it_maps_to_none():
    # KTableMapValues forwards each change it gets, whatever the mapper returns; a filter
    # after it drops a change that is (None, None) by then
    to_none = (TableOpKind.MAP_VALUES, lambda n: None)
    assert apply([to_none], [("a", 1, None), ("b", 2, 1)]) == [("a", None, None), ("b", None, None)]
    keep_all = (TableOpKind.FILTER, lambda k, n: True)
    assert apply([to_none, keep_all], [("a", 1, None)]) == []
