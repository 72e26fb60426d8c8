"""The foreign-key table join (KIP-213) in pure Python: the subscription stage and the paged
kernel wired as the compiled query wires them, against Kafka Streams' rules
(``SubscriptionSendProcessorSupplier``, ``SubscriptionJoinProcessorSupplier``,
``ForeignTableJoinProcessorSupplier``, ``ResponseJoinProcessorSupplier``)."""

import pickle
import random

import pyarrow as pa
import pytest

from streamtable import Serdes, StreamsBuilder
from streamtable.compiler.codecs import PickleCodec, SerdeCodec
from streamtable.compiler.paged.fk_join_kernels import (
    LEFT,
    RIGHT,
    SUBSCRIPTION_DDL,
    ForeignKeyJoinKernel,
    SubscriptionStage,
)
from streamtable.compiler.paged.records import Rec
from streamtable.compiler.paged.table_kernels import TableSourceKernel
from streamtable.errors import StreamsError, TopologyError
from streamtable.topology.nodes import JoinKind

P = PickleCodec()
KEYS = SerdeCodec(Serdes.string())
T = "tombstone"


def fk_of(value):
    """Left values are ``"<fk>/<payload>"``; an empty foreign key part means ``None``."""
    return value.split("/")[0] or None


def joiner(lv, rv):
    return f"{lv}|{rv}"


class Pipeline:
    """Left table source → subscription stage → foreign-key kernel, one call per batch."""

    def __init__(self, join_type, extractor=fk_of, join=joiner):
        self.stage = SubscriptionStage("FK", join_type, extractor, P, KEYS)
        self.kernel = ForeignKeyJoinKernel("FK", join_type, join, P)
        self.left_table = TableSourceKernel()
        self.left_entries, self.entries = {}, {}
        self.offsets = {LEFT: 0, RIGHT: 0}
        self.table = {}
        self.dropped = 0

    def batch(self, records):
        """``records``: ``(side, key, value, ts)`` in the order they were produced. Returns
        the batch's outputs as ``{left key: (value or T, ts)}`` (at most one per key)."""
        by_side = {LEFT: {}, RIGHT: {}}
        for side, key, value, ts in records:
            off = self.offsets[side]
            self.offsets[side] += 1
            k = KEYS.encode_many([key])[0]
            v = None if value is None else pickle.dumps(value)
            topic = "left" if side == LEFT else "right"
            by_side[side].setdefault(k, []).append(Rec(ts, topic, 0, off, 0, side, k, v))
        changes = []
        for k, recs in by_side[LEFT].items():
            entry, outs = self.left_table.process(k, recs, self.left_entries.get(k), {})
            self.left_entries[k] = entry
            changes.extend(outs)
        groups = {}
        for k, recs in by_side[RIGHT].items():
            groups.setdefault(k, []).extend(recs)
        if changes:
            batch = pa.RecordBatch.from_pydict(
                {
                    "key": [c.key for c in changes],
                    "value": [c.value for c in changes],
                    "ts": [c.ts for c in changes],
                    "partition": [c.partition for c in changes],
                    "offset": [c.offset for c in changes],
                    "seq": [c.seq for c in changes],
                    "topic": [c.topic for c in changes],
                    "old": [c.old for c in changes],
                }
            )
            out = next(self.stage(iter([batch])))
            # mapInArrow matches columns by position: the declared order must hold
            assert out.schema.names == [c.split()[0] for c in SUBSCRIPTION_DDL.split(", ")]
            for row in out.to_pylist():
                if row["dropped"]:
                    self.dropped += 1
                    continue
                rec = Rec(
                    row["ts"],
                    row["topic"],
                    row["partition"],
                    row["offset"],
                    row["seq"],
                    LEFT,
                    row["key"],
                    row["value"],
                )
                groups.setdefault(row["group_key"], []).append(rec)
        emitted = {}
        for gk in sorted(groups):
            entry, outs = self.kernel.process(gk, sorted(groups[gk]), self.entries.get(gk), {})
            if entry is None:
                self.entries.pop(gk, None)
            else:
                self.entries[gk] = entry
            for o in outs:
                key = KEYS.decode_many([o.key])[0]
                assert key not in emitted, f"two results for {key!r} in one batch"
                emitted[key] = (T if o.value is None else pickle.loads(o.value), o.ts)
        for key, (value, _) in emitted.items():
            if value == T:
                self.table.pop(key, None)
            else:
                self.table[key] = value
        return emitted


def one_by_one(join_type, records):
    """Feed one record per batch (Kafka Streams' processing order): what each emitted."""
    p = Pipeline(join_type)
    return [{k: v for k, (v, _) in p.batch([r]).items()} for r in records], p


def L(key, value, ts):  # noqa: N802
    return (LEFT, key, value, ts)


def R(key, value, ts):  # noqa: N802
    return (RIGHT, key, value, ts)


# order o1 references customer A, then moves to B; customers change and are deleted
SCENARIO = [
    L("o1", "A/1", 1),  # A missing
    R("A", "a", 2),  # fan-out to o1
    L("o1", "A/2", 3),  # same FK, A exists
    L("o1", "B/3", 4),  # FK change to a missing B
    R("A", "a2", 5),  # o1 no longer references A
    R("B", "b", 6),  # fan-out to o1
    R("B", None, 7),  # right delete
    L("o1", "B/4", 8),  # same FK, B missing
    L("o1", None, 9),  # left delete
]
EXPECTED = {
    "inner": [
        {},
        {"o1": "A/1|a"},
        {"o1": "A/2|a"},
        {"o1": T},  # FK changed: a previous result may exist (PROPAGATE_NULL_IF_NO_FK_VAL)
        {},
        {"o1": "B/3|b"},
        {"o1": T},
        {},  # unchanged FK without a right row (PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)
        {"o1": T},  # DELETE_KEY_AND_PROPAGATE
    ],
    "left": [
        {"o1": "A/1|None"},
        {"o1": "A/1|a"},
        {"o1": "A/2|a"},
        {"o1": "B/3|None"},
        {},
        {"o1": "B/3|b"},
        {"o1": "B/3|None"},
        {"o1": "B/4|None"},
        {"o1": T},
    ],
}


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_record_by_record_results_follow_kafka_streams(join_type):
    got, _ = one_by_one(join_type, SCENARIO)
    assert got == EXPECTED[join_type]


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_right_update_fans_out_to_every_current_subscriber(join_type):
    records = [
        L("o1", "A/1", 1),
        L("o2", "A/2", 2),
        L("o3", "B/3", 3),
        L("o2", "B/2", 4),  # o2 leaves A
        R("A", "a", 5),
    ]
    got, _ = one_by_one(join_type, records)
    assert got[-1] == {"o1": "A/1|a"}


def test_null_foreign_key():
    records = [L("o1", "/1", 1), R("A", "a", 2), L("o1", "A/2", 3), L("o1", "/3", 4)]
    got, p = one_by_one("inner", records)
    # inner: a null FK joins nothing, is counted as dropped, and deletes an earlier result
    assert got == [{}, {}, {"o1": "A/2|a"}, {"o1": T}]
    assert p.dropped == 2
    got, p = one_by_one("left", records)
    # left join: joiner(v, None) for a null FK (KIP-962, Kafka Streams 3.7+)
    assert got == [{"o1": "/1|None"}, {}, {"o1": "A/2|a"}, {"o1": "/3|None"}]
    assert p.dropped == 0
    got, _ = one_by_one("left", [L("o1", "/1", 1), L("o1", None, 2), L("o1", None, 3)])
    assert got == [{"o1": "/1|None"}, {"o1": T}, {}]  # an idempotent delete emits nothing


def test_output_timestamps():
    p = Pipeline("inner")
    p.batch([R("A", "a", 50)])
    # left-triggered: the larger of the left record's and the right row's timestamps
    assert p.batch([L("o1", "A/1", 10)]) == {"o1": ("A/1|a", 50)}
    assert p.batch([L("o1", "A/2", 70)]) == {"o1": ("A/2|a", 70)}
    # right-triggered: the right record's timestamp
    assert p.batch([R("A", "a2", 60)]) == {"o1": ("A/2|a2", 60)}
    # left delete: max(left ts, right ts) as well
    assert p.batch([L("o1", None, 40)]) == {"o1": (T, 60)}


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_foreign_key_change_in_one_batch_gives_only_the_new_result(join_type):
    p = Pipeline(join_type)
    p.batch([R("A", "a", 1), R("B", "b", 1), L("o1", "A/1", 2)])
    # A is updated before o1 moves to B: o1's group A result (A/1|a2) must not win
    out = p.batch([R("A", "a2", 3), L("o1", "B/2", 4), R("A", "a3", 5)])
    assert out == {"o1": ("B/2|b", 4)}
    assert p.table == {"o1": "B/2|b"}


def reference(join_type, records):
    """The final table by definition: each left row joined with its foreign key's row."""
    left, right = {}, {}
    for side, key, value, _ in records:
        table = left if side == LEFT else right
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    out = {}
    for key, v in left.items():
        fk = fk_of(v)
        rv = right.get(fk) if fk is not None else None
        if rv is not None or join_type == "left":
            out[key] = joiner(v, rv)
    return out


def run_batches(join_type, batches):
    p = Pipeline(join_type)
    for b in batches:
        p.batch(b)
    return p.table


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_same_final_table_with_the_batch_split_at_every_point(join_type):
    want = reference(join_type, SCENARIO)
    assert run_batches(join_type, [SCENARIO]) == want
    assert run_batches(join_type, [[r] for r in SCENARIO]) == want
    for cut in range(len(SCENARIO) + 1):
        assert run_batches(join_type, [SCENARIO[:cut], SCENARIO[cut:]]) == want, cut


def random_records(rng, n):
    records, ts = [], 0
    for _ in range(n):
        ts += rng.choice([0, 1, 2])
        t = ts - rng.choice([0, 0, 0, 3])  # some records out of timestamp order
        if rng.random() < 0.55:
            fk = rng.choice(["A", "B", "C", ""])
            value = None if rng.random() < 0.15 else f"{fk}/{rng.randrange(100)}"
            records.append(L(rng.choice(["o1", "o2", "o3", "o4"]), value, t))
        else:
            value = None if rng.random() < 0.25 else rng.choice(["x", "y", "z"])
            records.append(R(rng.choice(["A", "B", "C"]), value, t))
    return records


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_random_inputs_and_batch_splits_give_the_defined_final_table(join_type):
    rng = random.Random(213)
    for _ in range(150):
        records = random_records(rng, rng.randrange(1, 30))
        want = reference(join_type, records)
        cuts = sorted(rng.sample(range(len(records) + 1), k=min(3, len(records) + 1)))
        batches = [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True)]
        assert run_batches(join_type, batches) == want, (records, cuts)
        assert run_batches(join_type, [records]) == want


def test_extractor_error_names_operator_and_record():
    def bad(value):
        raise ValueError(f"no customer in {value!r}")

    p = Pipeline("inner", extractor=bad)
    with pytest.raises(
        StreamsError,
        match=r"ValueError: no customer in 'A/1' in operator 'FK' \(foreign_key_extractor\) "
        r"on the record at topic 'left' partition 0 offset 0",
    ):
        p.batch([L("o1", "A/1", 1)])


def test_unserializable_foreign_key_is_named():
    p = Pipeline("inner", extractor=lambda v: 42)  # the right table's keys are strings
    with pytest.raises(StreamsError, match=r"foreign_key_extractor result 42 .*offset 0"):
        p.batch([L("o1", "A/1", 1)])


def test_joiner_error_names_operator_and_the_triggering_record():
    def bad(lv, rv):
        raise KeyError(rv)

    p = Pipeline("inner", join=bad)
    p.batch([L("o1", "A/1", 1)])
    with pytest.raises(StreamsError, match=r"in operator 'FK' \(joiner\) .*topic 'right'"):
        p.batch([R("A", "a", 2)])


# -- DSL ------------------------------------------------------------------------------


def tables():
    b = StreamsBuilder()
    orders = b.table("orders", key_serde=Serdes.string(), value_serde=Serdes.string())
    customers = b.table("customers", key_serde=Serdes.string(), value_serde=Serdes.string())
    return b, orders, customers


def test_dsl_builds_a_foreign_key_join_node():
    b, orders, customers = tables()
    joined = orders.left_join(customers, joiner, foreign_key_extractor=fk_of, name="enrich")
    joined.to_stream().to("enriched", value_serde=Serdes.string())
    topo = b.build()
    node = topo.graph.by_name[joined.node_name]
    assert node.kind is JoinKind.TABLE_TABLE_FK
    assert node.join_type == "left"
    assert node.foreign_key_extractor is fk_of
    assert node.stores == ("enrich-subscription-store",)
    assert "enrich-subscription-store" in str(topo.describe())
    b, orders, customers = tables()
    unnamed = orders.join(customers, joiner, foreign_key_extractor=fk_of)
    unnamed.to_stream().to("enriched")
    node = b.build().graph.by_name[unnamed.node_name]
    assert node.name.startswith("KTABLE-FK-JOIN-OUTPUT-")
    assert node.stores[0].startswith("KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-")


def test_dsl_refuses_foreign_key_outer_join_and_bad_extractors():
    _, orders, customers = tables()
    with pytest.raises(TopologyError, match="outer_join has no foreign-key form"):
        orders.outer_join(customers, joiner, foreign_key_extractor=fk_of)
    with pytest.raises(TopologyError, match=r"foreign_key_extractor expects a callable taking"):
        orders.join(customers, joiner, foreign_key_extractor=lambda k, v: k)
    with pytest.raises(TopologyError, match=r"foreign_key_extractor expects a callable"):
        orders.left_join(customers, joiner, foreign_key_extractor="customer")
