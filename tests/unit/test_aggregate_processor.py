"""The Python ``aggregate``/``reduce`` processor (:class:`AggregateProcessor`) over one page,
without Spark: its state handle is a stand-in.
"""

import pickle

from pyspark.sql import Row

from streamtable import Serdes
from streamtable.compiler.aggregate_processor import AggregateProcessor, AggregateSpec
from streamtable.compiler.codecs import PickleCodec, SerdeCodec
from streamtable.dsl.grouped import _reduce_init, _ReduceAggregator
from streamtable.topology.nodes import Aggregation

S = Serdes.string()


class PageState:
    """Stand-in for the page's ``ValueState``."""

    def __init__(self):
        self.value = None

    def get(self):
        return self.value

    def update(self, value):
        self.value = value


def processor(aggregation):
    proc = AggregateProcessor(
        AggregateSpec("clears", aggregation, SerdeCodec(S), SerdeCodec(S), PickleCodec())
    )
    proc.state = PageState()
    return proc


def batch(proc, *records):
    """One micro-batch of ``(key, value, ts)`` records (offsets in order): the updates
    ``[(key, aggregate, ts)]`` and the page's entries after it.
    """
    page: dict = {}
    for offset, (key, value, ts) in enumerate(records):
        page.setdefault(S.serialize(key), []).append((S.serialize(value), ts, "in", 0, offset, 0))
    rows = list(proc.handleInputRows(b"page", iter([Row(value=pickle.dumps(page))]), None))
    entries = pickle.loads(proc.state.value[0])["entries"]
    updates = [
        (S.deserialize(r.key), None if r.value is None else pickle.loads(r.value), r.ts)
        for r in rows
    ]
    return updates, {S.deserialize(k): v for k, v in entries.items()}


def test_a_reducer_returning_none_deletes_the_key_and_the_next_record_starts_over():
    # KStreamReduce: store.put(key, null) deletes and forwards a tombstone; the next record
    # finds no aggregate and becomes it, with its own timestamp
    proc = processor(
        Aggregation(_reduce_init, _ReduceAggregator(lambda a, v: None if v == "clear" else a + v))
    )
    assert batch(proc, ("k", "x", 5)) == ([("k", "x", 5)], {"k": ("x", 5)})
    assert batch(proc, ("k", "clear", 9)) == ([("k", None, 9)], {})
    assert batch(proc, ("k", "y", 7)) == ([("k", "y", 7)], {"k": ("y", 7)})
    # within one micro-batch too: deleted, then started over from the next value
    proc = processor(
        Aggregation(_reduce_init, _ReduceAggregator(lambda a, v: None if v == "clear" else a + v))
    )
    assert batch(proc, ("k", "x", 1), ("k", "clear", 2), ("k", "y", 3)) == (
        [("k", "y", 3)],
        {"k": ("y", 3)},
    )


def test_an_aggregator_returning_none_deletes_and_the_next_record_starts_from_the_initializer():
    proc = processor(Aggregation(lambda: "", lambda k, v, a: None if v == "clear" else a + v))
    # a key with no aggregate before the micro-batch and none after it forwards nothing: Kafka
    # Streams' caching store skips a flush with neither a new nor an old value
    assert batch(proc, ("k", "x", 1), ("k", "clear", 2)) == ([], {})
    assert batch(proc, ("k", "y", 3)) == ([("k", "y", 3)], {"k": ("y", 3)})
    # a deletion of an aggregate that was there: a tombstone at the deleting record's time
    # (out of order here), as the record cache's flush forwards it
    assert batch(proc, ("k", "z", 8)) == ([("k", "yz", 8)], {"k": ("yz", 8)})
    assert batch(proc, ("k", "clear", 4)) == ([("k", None, 4)], {})
