"""Kernels with table semantics: a topic materialized as a table, and table aggregations.

Follow Kafka Streams' ``KTableSource`` and ``KTableAggregate``/``KTableReduce``. Emission is
coalesced per micro-batch like Kafka Streams' record cache: one change per key per batch,
carrying the value before the batch as ``old``.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from streamtable.compiler.codecs import Codec
from streamtable.compiler.paged.records import Out, Rec, source_order
from streamtable.compiler.paged.user_code import call_user


@dataclass
class TableSourceKernel:
    """The latest value per key; a tombstone deletes (``KTableSource``).

    Updates apply in offset order (not timestamp order), as Kafka Streams applies a
    partition's records. Entry: ``(value bytes, ts)``. Emits ``(key, new, old)`` once per
    key per batch; nothing for a tombstone of an absent key.

    >>> k = TableSourceKernel()
    >>> r = lambda off, v: Rec(off, "t", 0, off, 0, 1, b"k", v)
    >>> entry, outs = k.process(b"k", [r(1, b"a"), r(2, b"b")], None, {})
    >>> entry, [(o.value, o.old) for o in outs]
    ((b'b', 2), [(b'b', None)])
    >>> k.process(b"k", [r(3, None)], entry, {})[1][0][:3]
    (b'k', None, b'b')
    """

    drops: dict[str, int] = field(default_factory=dict)
    #: Only a key's last record of the batch matters: the pack before the shuffle may keep
    #: just that one per key and task (:class:`~.pack.KernelPack`'s ``latest_per_key``).
    latest_per_key: ClassVar[bool] = True

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Apply the batch's upserts of one key."""
        old = entry[0] if entry is not None else None
        value, ts = entry if entry is not None else (None, None)
        last = None
        for rec in sorted(records, key=source_order):
            value, ts, last = rec.value, rec.ts, rec
        if last is None or (value is None and old is None):
            return entry if value is not None else None, []
        return (None if value is None else (value, ts)), [Out.of(last, gk, value, old)]


def _same_change(a: Rec, b: Rec) -> bool:
    """Whether two re-grouped records are halves of one source change (same source record;
    ``seq`` = 2 * the change's seq + op, see ``RegroupStage``).
    """
    return (a.offset, a.partition, a.seq // 2, a.topic) == (
        b.offset,
        b.partition,
        b.seq // 2,
        b.topic,
    )


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()
SUBTRACT, ADD = 0, 1


@dataclass
class TableAggregateKernel:
    """Aggregates re-grouped table changes (``KTableAggregate`` / ``KTableReduce``).

    Records' values are ``pickle((op, value))`` with ``op`` :data:`SUBTRACT` or :data:`ADD`
    (a subtraction sorts before the addition of the same source change). Entry:
    ``(aggregate, ts)``; output ts = max(ts of the aggregate, record ts). A subtractor or
    adder that returns ``None`` deletes the group's aggregate (a tombstone goes out; the
    next addition starts from ``initializer()``, a reduce from the value).
    """

    node_name: str
    key_codec: Codec
    initializer: Callable[[], Any] | None
    adder: Callable[..., Any]
    subtractor: Callable[..., Any]
    reduce: bool
    drops: dict[str, int] = field(default_factory=dict)

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Subtract and add the batch's changes of one group."""
        key = self.key_codec.decode_many([gk])[0]
        agg, ts = entry if entry is not None else (ABSENT, None)
        before = agg
        # the source change of the last subtraction from a present aggregate, and the
        # timestamp it gave: its addition keeps it even if the subtractor deleted the aggregate
        # (KTableAggregate/KTableReduce handle both halves of a change as one record, whose
        # timestamp is the larger of its own and the aggregate's before the change)
        subtracted: tuple[Rec, int] | None = None
        for rec in records:
            op, v = pickle.loads(rec.value)
            if (
                op == ADD
                and agg is ABSENT
                and subtracted is not None
                and _same_change(subtracted[0], rec)
            ):
                ts = subtracted[1]
            else:
                # KTableAggregate: the record's timestamp for an absent aggregate, else the
                # larger
                ts = rec.ts if ts is None or agg is ABSENT else max(ts, rec.ts)
            if op == SUBTRACT:
                if agg is ABSENT:
                    continue
                subtracted = (rec, ts)
                args = (agg, v) if self.reduce else (key, v, agg)
                agg = call_user(self.subtractor, args, self.node_name, "subtractor", rec)
                if agg is None:
                    agg = ABSENT
            else:
                if agg is ABSENT and self.reduce:
                    agg = v
                    continue
                if agg is ABSENT:
                    assert self.initializer is not None
                    agg = call_user(self.initializer, (), self.node_name, "initializer", rec)
                args = (agg, v) if self.reduce else (key, v, agg)
                agg = call_user(self.adder, args, self.node_name, "adder", rec)
                if agg is None:  # deleted, as a None from the subtractor (store.put(k, null))
                    agg = ABSENT
        if agg is ABSENT and before is ABSENT:
            return None, []
        new = None if agg is ABSENT else pickle.dumps(agg, protocol=5)
        old = None if before is ABSENT else pickle.dumps(before, protocol=5)
        out = Out.of(records[-1], gk, new, old, ts=ts)
        return (None if agg is ABSENT else (agg, ts)), [out]
