"""Join kernels: stream-table (temporal), stream-GlobalKTable and table-table joins.

Inputs are told apart by ``Rec.side``: 0 = the left operand (the stream), 1 = the right.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from streamtable.compiler.codecs import Codec, PickleCodec, encode_for_sink
from streamtable.compiler.paged.records import Out, Rec, source_order
from streamtable.compiler.paged.user_code import call_user

STREAM, TABLE = 0, 1
LEFT, RIGHT = 0, 1


def _decode(codec: Codec, data: bytes | None) -> Any:
    return None if data is None else codec.decode_many([data])[0]


def _joined(
    kernel: Any, rec: Rec, lv: bytes | None, rv: bytes | None, ts: int | None = None
) -> Out:
    """The output ``joiner(left, right)`` for ``rec`` (``None`` for an absent side); the
    kernel gives ``joiner``, ``left_codec``, ``right_codec`` and ``node_name``.
    """
    lo = _decode(kernel.left_codec, lv)
    ro = _decode(kernel.right_codec, rv)
    joined = call_user(kernel.joiner, (lo, ro), kernel.node_name, "joiner", rec)
    return Out.of(rec, rec.key, encode_result(kernel.out_codec, joined, kernel.node_name), ts=ts)


def encode_result(codec: Codec, value: Any, node_name: str) -> bytes | None:
    """A joiner's result in ``codec``: pickled for a Python consumer, or already in the serde of
    the sink the join's results go to (which then needs no Python stage).

    A ``None`` result is a null value: a tombstone of the key in a table-table join's result
    table, a record with a null value from a stream join (Kafka Streams forwards the joiner's
    null as the record's value).

    Raises
    ------
    SerializationError
        If that serde cannot serialize ``value`` (Kafka Streams fails likewise when its sink's
        serializer rejects the record).
    """
    if value is None:
        return None
    fits = (
        "the joiner's result (KStream.to(value_serde=...), to_files(value_serde=...), or the "
        "grouping's value_serde= for a repartition)."
    )
    return encode_for_sink(codec, value, "a result of the joiner of", node_name, fits)


@dataclass
class StreamTableJoinKernel:
    """A stream joined with a table *as of* each stream record's timestamp.

    The table side keeps versions ``[(ts, value bytes or None for a tombstone)]`` per key
    (Kafka Streams' versioned key-value store). Per micro-batch, the table updates of a key
    are applied first, then each stream record (in timestamp order) looks up the latest
    version with ``ts <= its own``: the result does not depend on the order in which the two
    topics' records were read within the batch. Inner joins emit only on a match; left joins
    emit ``joiner(value, None)`` otherwise. Output: the stream record's key and timestamp.

    The table time is the largest table timestamp seen, per table partition (Kafka Streams'
    ``RocksDBVersionedStore.observedStreamTime`` belongs to one task). As in that store
    (whose grace period is its history retention), a table update older than its
    partition's table time minus ``history_ms`` is not applied (dropped, counted as
    ``expired``), and a lookup older than the table time minus ``history_ms`` finds only the
    key's latest version (if it is not newer than the stream record), else nothing. Kafka
    Streams judges both by the table time of the moment; here it is the table time earlier
    micro-batches reached (and, for an update, the key's updates before it), so that the
    result does not depend on the order in which a page's keys run. A lookup takes the time of
    the key's partition when the micro-batch updates the key, else the smallest of the
    partitions' (a page holds keys of every partition): a micro-batch expires nothing Kafka
    Streams would keep. When a key is updated, its versions older than its partition's table
    time minus ``history_ms`` are pruned, except the latest of them (it is still valid at the
    cutoff).

    >>> import pickle
    >>> from streamtable.compiler.codecs import PickleCodec
    >>> k = StreamTableJoinKernel("J", "inner", lambda s, t: f"{s}+{t}", PickleCodec(),
    ...                           PickleCodec(), None)
    >>> p = lambda v: pickle.dumps(v)
    >>> recs = [Rec(5, "t", 0, 0, 0, TABLE, b"k", p("a")), Rec(9, "t", 0, 1, 0, TABLE, b"k",
    ...         p("b")), Rec(7, "s", 0, 0, 0, STREAM, b"k", p("x"))]
    >>> entry, outs = k.process(b"k", sorted(recs), None, {})
    >>> [pickle.loads(o.value) for o in outs]
    ['x+a']
    """

    node_name: str
    join_type: str
    joiner: Callable[[Any, Any], Any]
    left_codec: Codec  # the stream's values
    right_codec: Codec  # the table's values
    history_ms: int | None
    as_of: bool = True
    drops: dict[str, int] = field(default_factory=dict)
    #: how the results are encoded: pickled, or a sink's serde (see :func:`encode_result`)
    out_codec: Codec = field(default_factory=PickleCodec)

    def process(
        self, gk: bytes | None, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Apply the key's table updates, then join its stream records.

        ``gk`` is ``None`` for a left join's stream records that cannot be looked up (a null
        key, or a null GlobalKTable lookup key of a null-key record): each is joined with
        ``None`` (Kafka Streams 3.7+, KIP-962).
        """
        if gk is None:
            return None, [_joined(self, rec, rec.value, None) for rec in records]
        if not self.as_of:
            return self._latest(records, entry)
        versions: list[tuple[int, bytes | None]] = list(entry) if entry else []
        history = self.history_ms
        # table partition -> its table time; the times earlier micro-batches reached (a
        # page's first key of the batch takes them before any update moves them; after that,
        # after_batch keeps them). A page saved by an older version starts without.
        times: dict[int, int] = meta.setdefault("table_times", {})
        before: dict[int, int] = meta.setdefault("batch_table_times", dict(times))
        key_times: dict[int, int] = {}
        partition = None  # of the key's table updates in this micro-batch
        for rec in sorted((r for r in records if r.side == TABLE), key=source_order):
            p = partition = rec.partition
            floor = key_times.get(p, before.get(p))
            if history is not None and floor is not None and rec.ts < floor - history:
                self.drops["expired"] = self.drops.get("expired", 0) + 1
                continue
            key_times[p] = rec.ts if floor is None else max(floor, rec.ts)
            times[p] = max(times.get(p, rec.ts), rec.ts)
            i = bisect.bisect_left(versions, rec.ts, key=lambda v: v[0])
            if i < len(versions) and versions[i][0] == rec.ts:
                versions[i] = (rec.ts, rec.value)
            else:
                versions.insert(i, (rec.ts, rec.value))
        # a lookup's table time: that of the key's partition if this batch updates the key
        # (none yet: nothing expires), else the smallest of the partitions' (the key's own
        # is one of them), so that no lookup expires what Kafka Streams would find
        base = (
            before.get(partition) if partition is not None else min(before.values(), default=None)
        )
        expiry = None if history is None or base is None else base - history
        outs = []
        for rec in records:
            if rec.side != STREAM:
                continue
            if expiry is not None and rec.ts < expiry:
                # past the history retention only the latest version is still known
                found = versions[-1][1] if versions and versions[-1][0] <= rec.ts else None
            else:
                i = bisect.bisect_right(versions, rec.ts, key=lambda v: v[0])
                found = versions[i - 1][1] if i else None
            if found is None and self.join_type == "inner":
                continue
            outs.append(_joined(self, rec, rec.value, found))
        if partition is not None:  # prune when the key is updated, by its partition's time
            versions = self._prune(versions, times.get(partition))
        return (versions or None), outs

    def after_batch(
        self, entries: dict[bytes, Any], meta: dict[str, Any], watermark: int
    ) -> list[Out]:
        """Keep the table times this micro-batch reached for the next one's expiry rules."""
        if "table_times" in meta:
            meta["batch_table_times"] = dict(meta["table_times"])
        return []

    def _latest(self, records: list[Rec], entry: Any) -> tuple[Any, list[Out]]:
        """GlobalKTable lookups: the latest value in offset order, whatever its timestamp
        (Kafka Streams' global tables are not time-synchronized with the stream).
        """
        value = entry
        for rec in sorted((r for r in records if r.side == TABLE), key=source_order):
            value = rec.value
        if value is None and self.join_type == "inner":
            return value, []
        return value, [
            _joined(self, rec, rec.value, value) for rec in records if rec.side == STREAM
        ]

    def _prune(
        self, versions: list[tuple[int, bytes | None]], table_time: int | None
    ) -> list[tuple[int, bytes | None]]:
        if self.history_ms is None or table_time is None or not versions:
            return versions
        cutoff = table_time - self.history_ms
        i = bisect.bisect_right(versions, cutoff, key=lambda v: v[0])
        kept = versions[max(i - 1, 0) :]
        if len(kept) == 1 and kept[0][1] is None:
            return []
        return kept


@dataclass
class TableTableJoinKernel:
    """A primary-key join of two tables (``KTableKTable{Inner,Left,Outer}Join``).

    Per key the latest value of each side is kept. A side's updates of the key in one
    micro-batch are first coalesced to its last one (offset order), as Kafka Streams' record
    cache (on by default) coalesces each source table's updates per key before its join
    processor sees them. The one or two remaining updates (in timestamp order, the left first
    on a tie) each produce the result Kafka Streams' join processors forward:

    - inner: nothing while the other side is absent; else ``joiner(l, r)``, or a tombstone
      when the updated side was deleted;
    - left: a left update always emits (``joiner(l, r or None)`` or a tombstone); a right
      update emits only while the left side exists;
    - outer: ``joiner(l, r)`` with ``None`` for an absent side, or a tombstone when both are
      absent.

    Only the last result per key and micro-batch is emitted (record-cache coalescing).
    Output ts = the update's timestamp, or the larger of it and the other side's while the
    other side exists (a deleted side has no timestamp: the processors' value getter finds
    nothing, and they take ``record.timestamp()``). As only a side's last update matters, the
    pack before the shuffle keeps just that one (``latest_per_key``).
    """

    node_name: str
    join_type: str
    joiner: Callable[[Any, Any], Any]
    left_codec: Codec
    right_codec: Codec
    drops: dict[str, int] = field(default_factory=dict)
    #: how the results are encoded: pickled, or a sink's serde (see :func:`encode_result`)
    out_codec: Codec = field(default_factory=PickleCodec)
    latest_per_key: ClassVar[bool] = True

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Apply the key's last update of each side and emit the last join result."""
        lv, lts, rv, rts = entry if entry is not None else (None, None, None, None)
        latest = [
            sorted((r for r in records if r.side == s), key=source_order)[-1:] for s in (0, 1)
        ]
        result: Out | None = None
        for rec in heapq.merge(*latest, key=lambda r: r.ts):
            # a deleted side has no timestamp: the value getter finds nothing
            ts = None if rec.value is None else rec.ts
            if rec.side == LEFT:
                lv, lts = rec.value, ts
                other_ts = None if rv is None else rts
            else:
                rv, rts = rec.value, ts
                other_ts = None if lv is None else lts
            out_ts = rec.ts if other_ts is None else max(rec.ts, other_ts)
            emitted = self._emit(rec, lv, rv, out_ts)
            if emitted is not None:
                result = emitted
        new_entry = None if lv is None and rv is None else (lv, lts, rv, rts)
        return new_entry, [] if result is None else [result]

    def _emit(self, rec: Rec, lv: bytes | None, rv: bytes | None, ts: int) -> Out | None:
        jt = self.join_type
        updated, other = (lv, rv) if rec.side == LEFT else (rv, lv)
        if jt == "inner":
            if other is None:
                return None
            if updated is None:
                return Out.of(rec, rec.key, None, ts=ts)
        elif jt == "left":
            if rec.side == RIGHT and lv is None:
                return None
            if lv is None:
                return Out.of(rec, rec.key, None, ts=ts)
        elif lv is None and rv is None:
            return Out.of(rec, rec.key, None, ts=ts)
        return _joined(self, rec, lv, rv, ts)


def _store_times(meta: dict[str, Any], name: str) -> dict[int, int | None]:
    """``meta[name]``: the largest timestamp put into each side's join store; a page saved
    before they were kept has only its stream time, taken for both sides.
    """
    times = meta.get(name)
    if times is None:
        st = meta.get("stream_time")
        times = {LEFT: st, RIGHT: st}
    return times


@dataclass
class StreamStreamJoinKernel:
    """A windowed stream-stream join (``KStreamKStreamJoin`` with KAFKA-10847's outer fix).

    Each record joins every buffered record of the other side in its window (left at ``t``
    matches right at ``t - before <= t' <= t + after``), one output per pair with ts = the
    larger timestamp. Left/outer non-matches wait until stream time passes the window's close
    (stream time > ``t + after + grace`` for left records, ``t' + before + grace`` for right
    records, as ``KStreamKStreamJoin`` keeps the window open while its close >= stream time;
    the DSL guide's table, which emits ``[E, null]`` of ts 40 at ts 60, is a millisecond off
    the code and its tests) and are then emitted once as ``joiner(v, None)`` /
    ``joiner(None, v)``. As in ``KStreamKStreamJoin``, no record is dropped for
    lateness: a record without a match whose window's end (``t + after`` for a left record,
    ``t' + before`` for a right one) is before stream time gets its null result at once
    rather than waiting for the grace, late or not, and a record past its side's join store
    retention (``before + after + grace`` before the store's observed time) still joins
    what the other side's store holds but is not kept to join later records (the store drops
    the put). These decisions use the stream time of the end of the previous micro-batch
    (within a micro-batch the page runs one key after the other, so a running maximum would
    take other keys' later records as passed).

    Stream time is the largest timestamp seen by the page, or Spark's watermark plus the
    operator's delay when that is larger (the watermark covers every page). Page timers
    emit pending non-matches when no new records arrive.
    """

    node_name: str
    join_type: str
    joiner: Callable[[Any, Any], Any]
    left_codec: Codec
    right_codec: Codec
    windows: Any
    drops: dict[str, int] = field(default_factory=dict)
    #: how the results are encoded: pickled, or a sink's serde (see :func:`encode_result`)
    out_codec: Codec = field(default_factory=PickleCodec)

    @property
    def delay_ms(self) -> int:
        """The watermark delay this kernel is run with."""
        w = self.windows
        return w.before_ms + w.after_ms + w.grace_ms

    def _close(self, side: int, ts: int) -> int:
        w = self.windows
        return ts + (w.after_ms if side == LEFT else w.before_ms) + w.grace_ms

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Join the key's records of this batch with the buffered ones.

        ``gk`` is ``None`` for records with a null key (and a value) on a side whose
        non-matches are emitted: each is emitted at once as ``joiner(v, None)`` /
        ``joiner(None, v)`` (Kafka Streams 3.7+, KIP-962).
        """
        if gk is None:
            outs = []
            for rec in records:
                if self._emits_unmatched(rec.side):
                    lv, rv = (rec.value, None) if rec.side == LEFT else (None, rec.value)
                    outs.append(_joined(self, rec, lv, rv, rec.ts))
            return None, outs
        w = self.windows
        buf: list[list[Any]] = entry if entry is not None else []  # [rec, matched]
        outs = []
        # lateness is judged by the stream time the previous micro-batches reached: the page
        # runs its keys one after the other, so the largest timestamp of this batch so far
        # may come from another key's later records (a task reads them interleaved)
        # (a page saved before this rule has only the stream time its last batch reached)
        before = meta.setdefault("batch_start_time", meta.get("stream_time"))
        # each side's join store has its own observed time (the largest timestamp put into
        # it); its fetch leaves out what is past the retention by that time. As lateness,
        # judged as the previous micro-batches left it (a page saved without: the stream time)
        times = meta.setdefault("store_times", _store_times(meta, "store_times"))
        gone_before = {
            side: (t - self.delay_ms if t is not None else None)
            for side, t in meta.setdefault("batch_store_times", dict(times)).items()
        }
        for rec in records:
            meta["stream_time"] = max(meta.get("stream_time", rec.ts), rec.ts)
            t = times.get(rec.side)
            times[rec.side] = rec.ts if t is None or rec.ts > t else t
            item = [rec, False]
            matches = []
            for other in buf:
                o = other[0]
                if o.side == rec.side:
                    continue
                gone = gone_before.get(o.side)
                if gone is not None and o.ts <= gone:
                    continue  # past the join store's retention: kept for its null result
                lt, rt = (rec.ts, o.ts) if rec.side == LEFT else (o.ts, rec.ts)
                if lt - w.before_ms <= rt <= lt + w.after_ms:
                    matches.append(other)
            # in the other side's timestamp order, as Kafka Streams' window store fetch
            # returns them (arrival order among equal timestamps)
            matches.sort(key=lambda other: other[0].ts)
            for other in matches:
                o = other[0]
                lrec, rrec = (rec, o) if rec.side == LEFT else (o, rec)
                outs.append(_joined(self, rec, lrec.value, rrec.value, max(rec.ts, o.ts)))
                item[1] = True
                other[1] = True
            # stream time with the record itself (KStreamKStreamJoin advances it first)
            now = rec.ts if before is None or before < rec.ts else before
            if not matches and max(0, self._close(rec.side, rec.ts) - w.grace_ms) < now:
                # past its window's end (timeTo < stream time; a negative `after` ends it
                # before its own timestamp): KStreamKStreamJoin emits the null result at once
                # instead of keeping the record for it, late or not
                if self._emits_unmatched(rec.side):
                    lv, rv = (rec.value, None) if rec.side == LEFT else (None, rec.value)
                    outs.append(_joined(self, rec, lv, rv, rec.ts))
                item[1] = True
            own_gone = gone_before.get(rec.side)
            if item[1] and own_gone is not None and rec.ts <= own_gone:
                # the join store drops a put past its retention: it joins no later record (one
                # that still owes its null result is kept for it, as the outer-join store does)
                continue
            buf.append(item)
        return (buf or None), outs

    def after_batch(
        self, entries: dict[bytes, Any], meta: dict[str, Any], watermark: int
    ) -> list[Out]:
        """Emit closed windows' non-matches, evict expired records, set the next timer."""
        st = meta.get("stream_time")
        if watermark > 0:
            st = max(st or 0, watermark + self.delay_ms)
            meta["stream_time"] = st
        if st is None:
            return []
        meta["batch_start_time"] = st
        times = _store_times(meta, "store_times")
        meta["batch_store_times"] = dict(times)
        pending: list[tuple[int, int, bytes, Out]] = []
        next_close = None
        for gk in list(entries):
            kept = []
            for item in entries[gk]:
                rec, matched = item
                # Kafka Streams' window is open while close >= stream time
                # (KStreamKStreamJoin.emitNonJoinedOuterRecords)
                closed = self._close(rec.side, rec.ts) < st
                if closed and not matched and self._emits_unmatched(rec.side):
                    lv, rv = (rec.value, None) if rec.side == LEFT else (None, rec.value)
                    side = 1 if rec.side == LEFT else 0
                    pending.append((rec.ts, side, gk, _joined(self, rec, lv, rv, rec.ts)))
                    item[1] = True
                # Kafka Streams keeps a record in two stores: its side's join store, whose
                # fetch returns ts > the store's time - retention (before + after + grace),
                # and, until its null result is out, the outer-join store
                owes = not item[1] and self._emits_unmatched(rec.side)
                store_time = times.get(rec.side)
                matchable = store_time is None or rec.ts > store_time - self.delay_ms
                if matchable or owes:
                    kept.append(item)
                    if owes:
                        c = self._close(rec.side, rec.ts)
                        next_close = c if next_close is None else min(next_close, c)
            if kept:
                entries[gk] = kept
            else:
                del entries[gk]
        # a watermark of next_close - delay + 1 makes stream time pass next_close
        meta["next_timer"] = None if next_close is None else next_close - self.delay_ms + 1
        # in the order of Kafka Streams' outer-join store: timestamp, right before left, key
        # bytes (TimestampedKeyAndJoinSideSerializer), arrival order among equals
        pending.sort(key=lambda p: p[:3])
        return [p[3] for p in pending]

    def _emits_unmatched(self, side: int) -> bool:
        return self.join_type == "outer" or (self.join_type == "left" and side == LEFT)
