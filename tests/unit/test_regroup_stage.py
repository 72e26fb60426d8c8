"""``KTable.group_by``'s re-grouping stage (:class:`RegroupStage`) without Spark."""

import pickle

from _support import change_batch
from streamtable.compiler.codecs import PickleCodec
from streamtable.compiler.paged.stages import ADD, SUBTRACT, RegroupStage

P = PickleCodec()


def regroup(selector, changes):
    """``[(group key, op, value)]`` of the table ``changes`` ``[(key, new, old)]``."""
    batch = change_batch(changes, topic="users")
    out = next(iter(RegroupStage(selector, "by-region", P, P, P)([batch]))).to_pydict()
    return [
        (P.decode_many([k])[0], *pickle.loads(v))
        for k, v in zip(out["key"], out["value"], strict=True)
    ]


def test_pairs_with_a_null_value_or_none_at_all_are_neither_added_nor_subtracted():
    # Kafka Streams' KTableRepartitionMap forwards a selected pair only when the pair, its key
    # and its value are all non-null, on the old side as on the new
    def region_and_amount(user, row):
        return None if row.get("gone") else (row["region"], row["amount"])

    changes = [
        ("u1", {"region": "eu", "amount": None}, None),
        ("u2", {"region": "eu", "amount": 5}, None),
        ("u3", {"region": "us", "amount": 7}, {"region": "eu", "amount": None}),
        ("u4", {"region": "us", "gone": True}, {"region": "eu", "amount": 2}),
    ]
    assert regroup(region_and_amount, changes) == [
        ("eu", ADD, 5),
        ("us", ADD, 7),
        ("eu", SUBTRACT, 2),
    ]
