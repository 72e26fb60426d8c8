"""The KTable-KTable foreign-key join (Kafka Streams' KIP-213), in two steps.

1. :class:`SubscriptionStage` (``mapInArrow`` over the left table's changes ``(key, new,
   old)``): extracts the old and new foreign keys and turns each change into subscription
   instructions addressed to foreign keys, as Kafka Streams'
   ``SubscriptionSendProcessorSupplier`` does (see :func:`subscription_instructions`).
2. :class:`ForeignKeyJoinKernel` (paged, one group per foreign key): keeps the right row of
   the foreign key and the left rows subscribed to it, and emits results keyed by the left
   key — ``SubscriptionReceiveProcessorSupplier`` + ``SubscriptionJoinProcessorSupplier``
   for left changes, ``ForeignTableJoinProcessorSupplier`` for right changes, and the join
   and tombstone rules of ``ResponseJoinProcessorSupplier``.

Kafka Streams sends responses back to the left table's task, where a hash of the left value
each response was computed for is compared with the current left value: responses for a
value that has since changed are dropped, so a stale result from an old foreign key never
wins. Here each foreign-key group applies subscriptions and right updates in one order
(timestamp order within a micro-batch; see :class:`ForeignKeyJoinKernel`) and holds the
current left value of each subscriber, so a result is always computed from the current left
value. What remains is the order *across* groups: when a left row moves from foreign key A
to B, the group of A may have emitted a result for it earlier in the same micro-batch (a
right update of A before the move) while the group of B emits the new one, and Spark writes
the two without an order between them. So a group emits at most the *last* result per left
key and micro-batch, and nothing for a left key whose last instruction in the group is an
unsubscription: that left change always has its own result (from the new foreign key's
group, or as a null foreign key result), which supersedes. Because the left table's changes
come at most once per key and micro-batch (the table kernels coalesce them, as Kafka
Streams' record cache does), each left key then gets at most one result per micro-batch and
the final table does not depend on how input is cut into micro-batches.

Pure Python and pyarrow: runs inside Spark's Python workers.
"""

from __future__ import annotations

import heapq
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from streamtable.compiler.codecs import Codec, PickleCodec
from streamtable.compiler.paged.join_kernels import encode_result
from streamtable.compiler.paged.records import Out, Rec, frame_schema, source_order
from streamtable.compiler.paged.user_code import call_user, user_code_error

LEFT, RIGHT = 0, 1

#: Subscription instructions (Kafka Streams' ``SubscriptionWrapper.Instruction``), plus
#: :data:`NULL_FK` for the left join's null-foreign-key results.
UNSUBSCRIBE = 0  #: ``DELETE_KEY_NO_PROPAGATE``: drop the subscription, emit nothing
UNSUBSCRIBE_PROPAGATE = 1  #: ``DELETE_KEY_AND_PROPAGATE``: drop it, emit a tombstone
SUBSCRIBE_PROPAGATE = 2  #: ``PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE``: always emit
SUBSCRIBE = 3  #: ``PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE``: emit only if the right row exists
NULL_FK = 4  #: left join, no foreign key: ``joiner(v, None)``, or a tombstone for a delete

#: Output of :class:`SubscriptionStage`: ``key`` is the left key, ``value`` one instruction
#: byte followed by the pickled left value (empty for none), ``group_key`` the foreign key
#: in the right table's key encoding (the left key for :data:`NULL_FK`); rows with
#: ``dropped`` set only count a dropped record.
SUBSCRIPTION_DDL = (
    "key binary, value binary, ts bigint, partition int, offset bigint, seq bigint, "
    "topic string, group_key binary, dropped string"
)
_COPIED = ("ts", "partition", "offset", "topic")


def subscription_instructions(
    join_type: str,
    old_present: bool,
    new_present: bool,
    old_fk: bytes | None,
    new_fk: bytes | None,
) -> list[tuple[str, int]]:
    """The instructions of one left change, as ``(target, instruction)`` pairs.

    ``target`` is ``"old"`` (the old foreign key), ``"new"`` (the new one) or ``"none"``
    (no foreign key: a :data:`NULL_FK` result). ``old_fk``/``new_fk`` are ``None`` when the
    value is absent or has no foreign key; foreign keys compare by their serialized bytes.
    The cases are those of Kafka Streams' ``SubscriptionSendProcessorSupplier``
    (``defaultJoinInstructions`` for inner, ``leftJoinInstructions`` for left joins):

    >>> subscription_instructions("inner", True, True, b"A", b"B")  # FK changed
    [('old', 0), ('new', 2)]
    >>> subscription_instructions("inner", True, True, b"A", b"A")  # FK unchanged
    [('new', 3)]
    >>> subscription_instructions("inner", False, True, None, b"A")  # insert
    [('new', 3)]
    >>> subscription_instructions("inner", True, False, b"A", None)  # delete
    [('old', 1)]
    >>> subscription_instructions("inner", True, True, b"A", None)  # FK became null
    [('old', 1)]
    >>> subscription_instructions("left", True, True, b"A", None)
    [('old', 0), ('none', 4)]
    >>> subscription_instructions("left", True, False, None, None)  # delete, null FK
    [('none', 4)]
    """
    changed = old_fk is not None and old_fk != new_fk
    if join_type == "left":
        if not old_present and not new_present:
            return []  # an idempotent delete
        out = [("old", UNSUBSCRIBE)] if changed else []
        # every change gets a result: joiner(v, right or None), or a tombstone for a delete
        # (a null foreign key still joins with None: KIP-962, Kafka Streams 3.7+)
        return [*out, ("none", NULL_FK) if new_fk is None else ("new", SUBSCRIBE_PROPAGATE)]
    if not new_present or new_fk is None:
        return [("old", UNSUBSCRIBE_PROPAGATE)] if old_fk is not None else []
    if changed:
        return [("old", UNSUBSCRIBE), ("new", SUBSCRIBE_PROPAGATE)]
    return [("new", SUBSCRIBE)]


@dataclass(frozen=True)
class SubscriptionStage:
    """Left table changes → subscription instructions grouped by foreign key.

    Input: a changes frame (``key, value, old, ts, partition, offset, seq, topic``). The
    extractor runs on the new and the old value of each change (never on ``None``); an
    exception stops the application naming the operator and the record. ``seq`` becomes
    ``2 * seq + 0`` for unsubscriptions and ``2 * seq + 1`` otherwise, so a change's
    unsubscription sorts before its other instruction if both land in one group.
    """

    node_name: str
    join_type: str
    extractor: Callable[[Any], Any]
    value_codec: Codec  # the left table's values
    fk_codec: Codec  # the right table's keys

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Turn every change of every batch into instructions."""
        for batch in batches:
            yield self._instructions(batch)

    def _fks(self, values: list[Any], col: dict[str, list[Any]]) -> list[bytes | None]:
        fks: list[Any] = []
        for i, v in enumerate(values):
            if v is None:
                fks.append(None)
                continue
            try:
                fks.append(self.extractor(v))
            except Exception as e:
                raise user_code_error(
                    e,
                    self.node_name,
                    "foreign_key_extractor",
                    col["topic"][i],
                    col["partition"][i],
                    col["offset"][i],
                ) from e
        try:
            encoded = self.fk_codec.encode_many(fks)
        except Exception:
            encoded = [self._encode_one(f, col, i) for i, f in enumerate(fks)]
        return [None if f is None else e for f, e in zip(fks, encoded, strict=True)]

    def _encode_one(self, fk: Any, col: dict[str, list[Any]], i: int) -> bytes | None:
        """One foreign key in the right table's key encoding; a failure names the record."""
        try:
            return self.fk_codec.encode_many([fk])[0]
        except Exception as e:
            raise user_code_error(
                e,
                self.node_name,
                f"foreign_key_extractor result {fk!r} does not serialize as the right table's key",
                col["topic"][i],
                col["partition"][i],
                col["offset"][i],
            ) from e

    def _instructions(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        col = {n: batch.column(i).to_pylist() for i, n in enumerate(batch.schema.names)}
        news = self.value_codec.decode_many(col["value"])
        olds = self.value_codec.decode_many(col["old"])
        new_fks = self._fks(news, col)
        old_fks = self._fks(olds, col)
        rows: dict[str, list[Any]] = {n: [] for n in (*_COPIED, "key", "value", "seq")}
        rows["group_key"], rows["dropped"] = [], []
        for i, key in enumerate(col["key"]):
            new = news[i]
            if new is not None and new_fks[i] is None and self.join_type == "inner":
                # Kafka Streams logs "Skipping record due to null foreign key" and counts it
                self._row(rows, col, i, key, b"", None, 1, "null_foreign_key")
            found = subscription_instructions(
                self.join_type, olds[i] is not None, new is not None, old_fks[i], new_fks[i]
            )
            for target, op in found:
                if target == "old":
                    gk = old_fks[i]
                elif target == "new":
                    gk = new_fks[i]
                else:
                    gk = key
                carries = op in (SUBSCRIBE, SUBSCRIBE_PROPAGATE) or (
                    op == NULL_FK and new is not None
                )
                payload = bytes([op]) + (pickle.dumps(new, protocol=5) if carries else b"")
                unsub = op in (UNSUBSCRIBE, UNSUBSCRIBE_PROPAGATE)
                self._row(rows, col, i, key, payload, gk, 0 if unsub else 1, None)
        return pa.RecordBatch.from_pydict(rows, schema=_SCHEMA)

    @staticmethod
    def _row(
        rows: dict[str, list[Any]],
        col: dict[str, list[Any]],
        i: int,
        key: bytes,
        value: bytes,
        group_key: bytes | None,
        order: int,
        dropped: str | None,
    ) -> None:
        for n in _COPIED:
            rows[n].append(col[n][i])
        rows["key"].append(key)
        rows["value"].append(value)
        rows["seq"].append(2 * (col["seq"][i] or 0) + order)
        rows["group_key"].append(group_key)
        rows["dropped"].append(dropped)


#: :data:`SUBSCRIPTION_DDL` in Arrow (``mapInArrow`` matches columns by position).
_SCHEMA = frame_schema(("group_key", pa.binary()), ("dropped", pa.string()))


@dataclass
class ForeignKeyJoinKernel:
    """One foreign key's side of the join: its right row and the left rows subscribed to it.

    Records: side 0 = instructions from :class:`SubscriptionStage` (``key`` = left key),
    side 1 = the right table's upserts (``key`` = the foreign key). Entry: ``(right value
    bytes or None, right ts, {left key: pickled left value})``. Per micro-batch the
    instructions (in timestamp, topic, partition, offset order) and the right updates (in
    offset order, as a table applies them) are merged by timestamp and applied one by one:

    - a right update re-joins every subscriber: ``joiner(left, right)``; a right delete
      gives a tombstone (inner) or ``joiner(left, None)`` (left join); output timestamp =
      the right record's (``ForeignTableJoinProcessorSupplier`` forwards it unchanged);
    - :data:`SUBSCRIBE` stores the left value and emits ``joiner(left, right)`` if the right
      row exists; :data:`SUBSCRIBE_PROPAGATE` emits in any case (a tombstone for inner, or
      ``joiner(left, None)`` for left join, when the right row is absent);
      :data:`UNSUBSCRIBE_PROPAGATE` drops the subscription and emits a tombstone; output
      timestamp = the larger of the left record's and the right row's
      (``SubscriptionJoinProcessorSupplier``);
    - :data:`NULL_FK` uses no state: ``joiner(left, None)``, or a tombstone for a delete,
      at the left record's timestamp (it is grouped by the left key, which may share a
      group with an equal foreign key's bytes without effect on it).

    Only the last result per left key of the batch is emitted, and none when the key's last
    instruction here is an :data:`UNSUBSCRIBE` (see the module doc). A right tombstone for
    an absent row changes nothing and emits nothing.
    """

    node_name: str
    join_type: str
    joiner: Callable[[Any, Any], Any]
    right_codec: Codec
    drops: dict[str, int] = field(default_factory=dict)
    #: how the results are encoded: pickled, or a sink's serde (``encode_result``)
    out_codec: Codec = field(default_factory=PickleCodec)

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Apply the group's instructions and right updates; emit the latest results."""
        rv, rts, subs = entry if entry is not None else (None, None, {})
        rights = sorted((r for r in records if r.side == RIGHT), key=source_order)
        lefts = [r for r in records if r.side == LEFT]
        last: dict[bytes, Out | None] = {}
        for rec in heapq.merge(lefts, rights, key=lambda r: r.ts):
            if rec.side == RIGHT:
                if rec.value is None and rv is None:
                    continue
                rv, rts = rec.value, rec.ts
                right = self._decode_right(rv) if subs else None
                for lk, lbytes in subs.items():
                    last[lk] = self._result(rec, lk, lbytes, rv, right, rec.ts)
                continue
            op, lbytes = rec.value[0], rec.value[1:]
            lk = rec.key
            ts = rec.ts if rv is None else max(rec.ts, rts)
            if op == UNSUBSCRIBE:
                subs.pop(lk, None)
                last[lk] = None
            elif op == UNSUBSCRIBE_PROPAGATE:
                subs.pop(lk, None)
                last[lk] = Out.of(rec, lk, None, ts=ts)
            elif op == NULL_FK:
                last[lk] = (
                    Out.of(rec, lk, None)
                    if not lbytes
                    else self._result(rec, lk, lbytes, None, None, rec.ts)
                )
            else:
                subs[lk] = lbytes
                if rv is not None or op == SUBSCRIBE_PROPAGATE:
                    right = self._decode_right(rv)
                    last[lk] = self._result(rec, lk, lbytes, rv, right, ts)
        outs = [o for o in last.values() if o is not None]
        return (None if rv is None and not subs else (rv, rts, subs)), outs

    def _decode_right(self, rv: bytes | None) -> Any:
        return None if rv is None else self.right_codec.decode_many([rv])[0]

    def _result(
        self, rec: Rec, lk: bytes, lbytes: bytes, rv: bytes | None, right: Any, ts: int
    ) -> Out:
        """``ResponseJoinProcessorSupplier``: a tombstone for an inner join without a right
        row, else ``joiner(left, right or None)``.
        """
        if rv is None and self.join_type == "inner":
            return Out.of(rec, lk, None, ts=ts)
        left = pickle.loads(lbytes)
        joined = call_user(self.joiner, (left, right), self.node_name, "joiner", rec)
        return Out.of(rec, lk, encode_result(self.out_codec, joined, self.node_name), ts=ts)
