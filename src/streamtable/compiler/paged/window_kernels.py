"""Kernels of windowed aggregations: time windows (tumbling and hopping), with emit-on-update
or emit-final (``suppress(until_window_closes)``) fused in.

Follows Kafka Streams' ``KStreamWindowAggregate``:

- a record at ``ts`` updates every window containing it (``TimeWindows.windowsFor``) whose close
  time ``end + grace`` is after the record's stream time; for the others it is dropped and
  counted as ``late`` (once per window, as Kafka Streams' dropped-records sensor);
- the first record of a window starts from ``initializer()``; the window's timestamp is the
  largest timestamp that contributed;
- records of a key are folded in arrival order (:func:`~.records.arrival_order`): offset order
  within a source partition, so the result does not depend on batch boundaries.

Stream time comes from :mod:`.partition_time`: each record carries its source partition's time
(``Rec.stream_time``). A key's windows close (final results) and leave state (after the
retention, by default size + grace) by the **key time**: the smallest partition time over the
source partitions that have delivered records of the key (:meth:`WindowKernel.key_time`). With
one source partition per key that is the partition's own time, as Kafka Streams closes a
task's windows by the task's stream time: a partition that stops delivering holds only the
windows of its own keys.

State entry per key: ``{(start, end): [aggregate, ts, emitted]}`` (ms). The page meta says
which partitions delivered each key in state: ``source_sets``, a list of distinct
``((topic, partition), ...)``, and ``sources``, ``{key: index in source_sets}`` (a few bytes
per key); ``floors``, ``{key: least key time}``, for keys that left state or gained a
partition, while the low watermark is below it (see :meth:`WindowKernel.process`). A key of a
page saved without them takes the partitions of its next records as its sources.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any

from streamtable.compiler.codecs import Codec, PickleCodec, encode_for_sink
from streamtable.compiler.pack_stage import STATE_PAGES
from streamtable.compiler.paged.processor import LATE
from streamtable.compiler.paged.records import Out, Rec
from streamtable.compiler.paged.user_code import call_user
from streamtable.errors import StreamsError
from streamtable.topology.nodes import Aggregation, CustomWindowSpec, TimeWindowSpec, WindowSpec

_LONG = struct.Struct(">q")


def _per_page(bound: int | None) -> int | None:
    return None if bound is None else -(-bound // STATE_PAGES)


#: ``source_sets`` are compacted (unused ones dropped) only past this many, and when more than
#: half are unused.
_MAX_UNUSED_SETS = 64

#: Below every stream time (ms).
_NEVER = -(2**63)

#: Source partitions of a key: ``((topic, partition), ...)``, sorted.
Sources = tuple[tuple[str, int], ...]


def compact_sources(meta: dict[str, Any]) -> None:
    """Drop the ``source_sets`` no key uses any more, renumbering ``sources``."""
    sets: list[Sources] = meta.get("source_sets", [])
    renumbered: dict[int, int] = {}
    kept: list[Sources] = []
    keyed: dict[bytes, int] = meta.get("sources", {})
    for gk, i in keyed.items():
        n = renumbered.get(i)
        if n is None:
            n = renumbered[i] = len(kept)
            kept.append(sets[i])
        keyed[gk] = n
    meta["source_sets"] = kept


def _next_close(meta: dict[str, Any]) -> dict[Any, int]:
    """``meta["next_close"]``: source partitions -> the earliest time a window of a key read
    from them is due (``None``: keys whose sources are not known). A page saved before kept
    one time for all its keys: it becomes the time of the keys whose sources are not known.
    """
    nxt = meta.get("next_close")
    if not isinstance(nxt, dict):
        nxt = meta["next_close"] = {} if nxt is None else {None: nxt}
    return nxt


@dataclass(frozen=True)
class WindowAggregateSpec:
    """What a window kernel needs.

    Attributes
    ----------
    node_name : str
        The aggregation's processor name (errors name it).
    aggregation : Aggregation
        ``initializer``, ``aggregator(key, value, agg)`` and, for sessions, ``merger``.
    key_codec, value_codec : Codec
        How the input's key and value bytes decode.
    windows : WindowSpec
        The windows (their grace included).
    retention_ms : int
        A window stays in state until its key time reaches ``start + retention_ms``
        (sessions: ``end + retention_ms``); at least size + grace.
    emit_final : bool
        ``suppress(until_window_closes)``: no updates, one record per window when it closes.
    keep_late : bool
        Report each late record (for a late-records topic) besides counting it.
    buffer_max_records, buffer_max_bytes : int or None
        ``emit_final`` with a bounded ``BufferConfig``: the most windows (or bytes of keys and
        aggregates) waiting for their final result; more stops the application
        (``shutDownWhenFull``). Enforced per state page, at ``ceil(bound / pages)``.
    with_old : bool
        Each update (and tombstone) carries the window's aggregate before the micro-batch in
        ``Out.old`` (pickled; ``None`` for a window new in the micro-batch), for a table
        filter after the aggregation (:mod:`streamtable.topology.old_values`). With
        ``emit_final`` the final result carries the window's aggregate before the last
        micro-batch that changed it (``None`` for a window, or session with its bounds, new
        in it; for a window emitted again in the micro-batch of its release, the value of that
        release), kept as the window's fourth state item until its final result is out: Kafka
        Streams' suppression buffer emits a window's last buffered change, whose old value is
        what the store held before that change's commit
        (``InMemoryTimeOrderedKeyValueChangeBuffer``). Across a restart that adds the filter,
        a window held from before has no old value (its final result sends nothing when it
        fails); one that removes it keeps a held window's fourth item until its final result.
    out_codec : Codec
        How emitted aggregates are encoded: pickled, or in the serde of the sink the updates
        go to (see :func:`streamtable.compiler.lower.aggregate.fold_output_codec`).
    """

    node_name: str
    aggregation: Aggregation
    key_codec: Codec
    value_codec: Codec
    windows: WindowSpec
    retention_ms: int
    emit_final: bool = False
    keep_late: bool = False
    buffer_max_records: int | None = None
    buffer_max_bytes: int | None = None
    with_old: bool = False
    out_codec: Codec = field(default_factory=PickleCodec)


#: What a sink's value serde must fit when it cannot write an aggregate (see :meth:`encode`).
_FITS = "the aggregate's type (KStream.to(value_serde=...), to_files(value_serde=...))."


@dataclass
class WindowKernel:
    """What every window kernel shares: decoding, folding, late records, closing, expiry.

    Subclasses implement :meth:`process` and say when a window closes
    (:meth:`close_time`), when it leaves state (:meth:`expire_time`) and how its windowed
    key is written (:meth:`window_key`).
    """

    spec: WindowAggregateSpec
    drops: dict[str, int] = field(default_factory=dict)
    #: ``(record, detail)`` of each late record of the current call (``spec.keep_late``)
    late: list[tuple[Rec, dict[str, Any]]] = field(default_factory=list)

    #: the current key's source partitions while :meth:`process` runs (for :meth:`schedule`)
    sources: Sources | None = field(default=None, repr=False)
    #: while :meth:`process` runs: ``None`` when the key's records all come from its one source
    #: partition (a window can be released at the record that closes it, as in Kafka Streams'
    #: task), else the key's floor: windows close at the end of the micro-batch
    release_cap: int | None = field(default=None, repr=False)
    #: keys that left state in :meth:`process`: ``{key: (sources, floor)}``, for
    #: :meth:`after_batch` to keep their key time after the micro-batch as their floor
    leaving: dict[bytes, tuple[Sources | None, int | None]] = field(
        default_factory=dict, repr=False
    )
    #: a page's ``source_sets`` and its reverse index (see :meth:`source_index`)
    _set_index: tuple[list[Sources], dict[Sources, int]] | None = field(default=None, repr=False)
    #: the DSL's ``count()`` (``Aggregation.native == "count"``): :meth:`decode`,
    #: :meth:`initial` and :meth:`fold` count without decoding or calling the count's functions
    counting: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:  # noqa: D105
        self.counting = self.spec.aggregation.native == "count"

    #: the processor gives records their partition's stream time, keeps the partition times in
    #: the page meta (``partition_times``) and calls :meth:`after_batch` with the low watermark
    partition_time = True

    # -- what a window kind defines -----------------------------------------------------------

    def close_time(self, start: int, end: int) -> int:
        """Stream time at which the window ``[start, end]`` accepts no more records."""
        raise NotImplementedError

    def expire_time(self, start: int, end: int) -> int:
        """Key time at which the window leaves state."""
        raise NotImplementedError

    def window_key(self, gk: bytes, start: int, end: int) -> bytes:
        """The windowed key's bytes (Kafka Streams' ``TimeWindowedSerializer``)."""
        return gk + _LONG.pack(start)

    # -- shared -------------------------------------------------------------------------------

    def decode(self, gk: bytes, records: list[Rec]) -> tuple[Any, list[Any]]:
        """The key object and the records' value objects (a count reads neither: ``None``s;
        the input was validated before the aggregation, see
        :func:`~streamtable.compiler.lower.record_ops.validated`).
        """
        if self.counting:
            return None, [None] * len(records)
        key = self.spec.key_codec.decode_many([gk])[0]
        return key, self.spec.value_codec.decode_many([r.value for r in records])

    def initial(self, rec: Rec) -> Any:
        """``initializer()`` (errors name the operator and ``rec``); a count's is 0."""
        if self.counting:
            return 0
        init = self.spec.aggregation.initializer
        return call_user(init, (), self.spec.node_name, "initializer", rec)

    def fold(self, key: Any, value: Any, agg: Any, rec: Rec) -> Any:
        """``aggregator(key, value, agg)`` (errors name the operator and ``rec``); a count
        adds 1 (``KStreamWindowAggregate`` counts records with a null value too).
        """
        if self.counting:
            return agg + 1
        fn = self.spec.aggregation.aggregator
        return call_user(fn, (key, value, agg), self.spec.node_name, "aggregator", rec)

    def drop_late(self, rec: Rec, start: int, end: int, st: int) -> None:
        """Count ``rec``, judged at stream time ``st``, as late for window ``[start, end]``
        (and keep it when asked).
        """
        self.drops[LATE] = self.drops.get(LATE, 0) + 1
        if self.spec.keep_late:
            self.late.append(
                (
                    rec,
                    {
                        "reason": "window-closed",
                        "window_start": start,
                        "window_end": end,
                        "stream_time": st,
                        "operator": self.spec.node_name,
                    },
                )
            )

    def release_time(self, st: int) -> int:
        """The stream time at which a record at ``st`` releases suppressed windows while the
        key is processed: ``st`` for a key read from one partition, else the key's floor
        (its windows are released by :meth:`after_batch`).
        """
        cap = self.release_cap
        return st if cap is None or cap > st else cap

    @staticmethod
    def stream_time(rec: Rec, floor: int | None) -> int:
        """The stream time ``rec`` is judged by: its partition's, or ``floor`` when that is
        larger (see :meth:`process`).
        """
        st = rec.stream_time if rec.stream_time is not None else rec.ts
        return st if floor is None or floor < st else floor

    @staticmethod
    def key_time(sources: Sources | None, times: dict[Any, int], low: int | None) -> int | None:
        """The time that closes the windows of a key read from ``sources``: the smallest of
        their partition times ``times`` (no source partition of the key can still deliver a
        record of it below that), never below the low watermark ``low`` (a partition whose
        first records came behind it was judged by it), or ``low`` for a key whose sources
        are not known.

        >>> WindowKernel.key_time((("t", 0), ("t", 1)), {("t", 0): 50, ("t", 1): 20}, 5)
        20
        >>> WindowKernel.key_time((("t", 0), ("t", 1)), {("t", 0): 50, ("t", 1): 3}, 5)
        5
        >>> WindowKernel.key_time(None, {}, 5)
        5
        """
        if not sources:
            return low
        t: int | None = None
        for tp in sources:
            pt = times.get(tp, low)
            if pt is None:
                return low
            if t is None or pt < t:
                t = pt
        return low if low is not None and t is not None and low > t else t

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Fold one key's records of this micro-batch (in arrival order) into its windows.

        Every record is judged by its partition's stream time, raised to the key's **floor**
        when that is larger: the key time that closed the key's windows after the last
        micro-batch (for a key not in state, the key time at which it left state, or the low
        watermark). A partition that delivers the key for the first time joins its sources;
        it may be behind the others, so the key keeps its floor as the least key time
        (``meta["floors"]``, until the low watermark passes it): a key's time never goes
        back, and no partition can reopen a window that has closed.
        """
        keyed: dict[bytes, int] = meta.setdefault("sources", {})
        sets: list[Sources] = meta.setdefault("source_sets", [])
        floors: dict[bytes, int] = meta.setdefault("floors", {})
        low = meta.get("low")
        had_entry = entry is not None
        i = keyed.get(gk) if had_entry else None
        before = None if i is None else sets[i]
        floor = self.key_time(before, meta.get("partition_times", {}), low) if before else low
        kept = floors.get(gk) if floors else None
        if kept is not None and (floor is None or kept > floor):
            floor = kept
        if before is not None and len(before) == 1:  # most keys: one partition, no new one
            topic, part = before[0]
            for r in records:
                if r.partition != part or r.topic != topic:
                    break
            else:
                entry, outs = self.run_key(gk, records, entry, meta, floor, before, None)
                if entry is None:
                    keyed.pop(gk, None)
                    self.leaving[gk] = (before, floor)
                return entry, outs
        read = {(r.topic, r.partition) for r in records}
        new = read.difference(before) if before else read
        sources = (
            tuple(sorted(read.union(before))) if before and new else before or tuple(sorted(read))
        )
        single = len(read) == 1 and len(sources) == 1
        cap = None if single else (_NEVER if floor is None else floor)
        if before and new and floor is not None and (low is None or floor > low):
            floors[gk] = floor  # a joining partition may be behind: the key time stays
        entry, outs = self.run_key(gk, records, entry, meta, floor, sources, cap)
        if entry is None:
            keyed.pop(gk, None)
            self.leaving[gk] = (sources, floor)
            return entry, outs
        if had_entry and before is None:  # a key of a page saved before key times
            self.sources = sources
            for start, end in entry:
                self.schedule(meta, start, end)
            self.sources = None
        keyed[gk] = i if i is not None and sources is before else self.source_index(sets, sources)
        return entry, outs

    def run_key(
        self,
        gk: bytes,
        records: list[Rec],
        entry: Any,
        meta: dict[str, Any],
        floor: int | None,
        sources: Sources | None,
        release_cap: int | None,
    ) -> tuple[Any, list[Out]]:
        """:meth:`process_key` with :attr:`sources` and :attr:`release_cap` set."""
        self.sources, self.release_cap = sources, release_cap
        try:
            return self.process_key(gk, records, entry, meta, floor)
        finally:
            self.sources = self.release_cap = None

    @staticmethod
    def keep_floor(floors: dict[bytes, int], gk: bytes, t: int | None, low: int | None) -> None:
        """Keep ``t`` as the least key time of ``gk`` while the low watermark is below it (a
        partition that never delivered the key, or is behind, must not reopen its windows).
        """
        if t is not None and (low is None or t > low):
            floors[gk] = t

    def source_index(self, sets: list[Sources], sources: Sources) -> int:
        """The index of ``sources`` in a page's ``source_sets`` (appended when new)."""
        cache = self._set_index
        if cache is None or cache[0] is not sets:
            cache = self._set_index = (sets, {s: n for n, s in enumerate(sets)})
        n = cache[1].get(sources)
        if n is None:
            n = cache[1][sources] = len(sets)
            sets.append(sources)
        return n

    def process_key(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any], floor: int | None
    ) -> tuple[Any, list[Out]]:
        """:meth:`process` for one window kind: ``floor`` is the key's stream-time floor."""
        raise NotImplementedError

    def schedule(self, meta: dict[str, Any], start: int, end: int) -> None:
        """Make sure :meth:`after_batch` looks at the page when this window of the current
        key closes/expires: ``meta["next_close"]`` maps source partitions to the earliest time
        a window of a key read from them is due.
        """
        t = self.close_time(start, end) if self.spec.emit_final else self.expire_time(start, end)
        nxt = _next_close(meta)
        have = nxt.get(self.sources)
        if have is None or t < have:
            nxt[self.sources] = t

    def update_out(
        self,
        gk: bytes,
        start: int,
        end: int,
        window: list[Any],
        rec: Rec,
        old: bytes | None = None,
    ) -> Out:
        """The update record of a changed window (emit-on-update), with the window's pickled
        aggregate before the micro-batch ``old`` when the kernel tracks it.
        """
        value = self.encode(window[0])
        return Out.of(rec, self.window_key(gk, start, end), value, old, ts=window[1])

    def encode(self, aggregate: Any) -> bytes | None:
        """An emitted aggregate's bytes in ``spec.out_codec``.

        Raises
        ------
        SerializationError
            If the serde of the sink the updates go to cannot serialize the aggregate (Kafka
            Streams fails likewise when its sink's serializer rejects the record).
        """
        spec = self.spec
        return encode_for_sink(spec.out_codec, aggregate, "an aggregate of", spec.node_name, _FITS)

    def after_batch(
        self, entries: dict[bytes, Any], meta: dict[str, Any], low: int | None
    ) -> list[Out]:
        """Emit the final result of every window its key time has closed (emit-final), and
        drop windows past their retention from state.

        ``low`` is the low watermark (the key time of keys whose sources are not known);
        ``meta["partition_times"]`` holds the partition times after this micro-batch.
        """
        times: dict[Any, int] = meta.get("partition_times", {})
        floors: dict[bytes, int] = meta.setdefault("floors", {})
        before = meta.get("low")
        if before is not None and (low is None or before > low):
            low = before  # a partition's first records must not take back what has closed
        if low is not None and low != before:
            meta["low"] = low
            if floors:
                for gk in [gk for gk, t in floors.items() if t <= low]:
                    del floors[gk]
        if self.leaving:  # keys that left state in process: their key time after the batch
            for gk, (srcs, floor) in self.leaving.items():
                if gk not in entries:
                    kt = self.key_time(srcs, times, low)
                    if kt is None or (floor is not None and floor > kt):
                        kt = floor
                    self.keep_floor(floors, gk, kt, low)
            self.leaving = {}
        nxt = _next_close(meta)
        due = False
        for srcs, t in nxt.items():
            kt = self.key_time(srcs, times, low)
            if kt is not None and t <= kt:
                due = True
                break
        if not due:
            if self.spec.emit_final:
                self.check_buffer(entries)
            return []
        emit_final = self.spec.emit_final
        sets: list[Sources] = meta.get("source_sets", [])
        keyed: dict[bytes, int] = meta.get("sources", {})
        key_times: dict[int | None, int | None] = {None: low}  # per source set
        finals: list[tuple[int, bytes, Out]] = []
        new_next: dict[Any, int] = {}
        for gk in list(entries):
            windows = entries[gk]
            i = keyed.get(gk)
            srcs = None if i is None else sets[i]
            if i in key_times:
                kt = key_times[i]
            else:
                kt = key_times[i] = self.key_time(srcs, times, low)
            if floors:
                kept = floors.get(gk)
                if kept is not None and (kt is None or kept > kt):
                    kt = kept
            key_next = new_next.get(srcs)
            for (start, end), w in list(windows.items()):
                if emit_final and not w[2]:
                    close = self.close_time(start, end)
                    if kt is not None and close <= kt:
                        w[2] = True
                        key = self.window_key(gk, start, end)
                        prev = w[3] if len(w) > 3 else None  # see WindowAggregateSpec.with_old
                        del w[3:]  # no longer needed once the final result is out
                        out = Out(key, self.encode(w[0]), prev, w[1])
                        finals.append((end, key, out))
                    elif key_next is None or close < key_next:
                        key_next = close
                expire = self.expire_time(start, end)
                if kt is not None and expire <= kt:
                    del windows[(start, end)]
                elif (not emit_final or w[2]) and (key_next is None or expire < key_next):
                    key_next = expire
            if key_next is not None:
                new_next[srcs] = key_next
            if not windows:
                del entries[gk]
                keyed.pop(gk, None)
                self.keep_floor(floors, gk, kt, low)
        if len(sets) > _MAX_UNUSED_SETS and len(sets) > 2 * len(set(keyed.values())):
            compact_sources(meta)
            self._set_index = None
        meta["next_close"] = new_next
        finals.sort(key=lambda f: (f[0], f[1]))
        if emit_final:
            self.check_buffer(entries)
        return [f[2] for f in finals]

    def check_buffer(self, entries: dict[bytes, Any]) -> None:
        """Stop the application when more results wait for their window to close than the
        suppression's ``BufferConfig`` allows (Kafka Streams' ``shutDownWhenFull``).

        Raises
        ------
        StreamsError
            Naming the operator, the page's content and the bounds.
        """
        spec = self.spec
        if spec.buffer_max_records is None and spec.buffer_max_bytes is None:
            return
        max_records = _per_page(spec.buffer_max_records)
        max_bytes = _per_page(spec.buffer_max_bytes)
        pending = [(gk, w) for gk, windows in entries.items() for w in windows.values() if not w[2]]
        n_bytes = (  # with old values, as Kafka Streams' buffer counts a change's old value
            sum(
                len(gk)
                + 16
                + len(pickle.dumps(w[0], protocol=5))
                + (len(w[3] or b"") if len(w) > 3 else 0)
                for gk, w in pending
            )
            if max_bytes is not None
            else 0
        )
        if (max_records is not None and len(pending) > max_records) or (
            max_bytes is not None and n_bytes > max_bytes
        ):
            raise StreamsError(
                f"The suppression buffer of {spec.node_name!r} is full: {len(pending)} windows "
                f"wait for their final result on one of its {STATE_PAGES} state pages (bounds "
                f"per page: {max_records} records, {max_bytes} bytes), and "
                "Suppressed.until_window_closes shuts down when full (Kafka Streams' "
                "shutDownWhenFull). Raise the BufferConfig bound or use BufferConfig.unbounded()."
            )


@dataclass
class TimeWindowKernel(WindowKernel):
    """Tumbling and hopping windows ``[start, start + size)``, and the windows of a
    user-defined ``Windows`` subclass ``[start, end)`` (``KStreamWindowAggregate``).

    >>> from streamtable.compiler.codecs import PickleCodec, SerdeCodec
    >>> from streamtable.serde import Serdes
    >>> agg = Aggregation(lambda: 0, lambda k, v, a: a + v)
    >>> spec = WindowAggregateSpec("agg", agg, SerdeCodec(Serdes.bytes()), PickleCodec(),
    ...                            TimeWindowSpec(10, 10, 5), retention_ms=15)
    >>> k = TimeWindowKernel(spec)
    >>> rec = lambda ts, off, v, st: Rec(ts, "t", 0, off, 0, 0, b"k", pickle.dumps(v),
    ...                                  None, st)
    >>> meta = {}
    >>> entry, outs = k.process(b"k", [rec(3, 0, 1, 3), rec(21, 1, 2, 21), rec(4, 2, 4, 21)],
    ...                         None, meta)
    >>> entry, k.drops
    ({(0, 10): [1, 3, False], (20, 30): [2, 21, False]}, {'late': 1})
    >>> [(int.from_bytes(o.key[-8:], "big"), pickle.loads(o.value), o.ts) for o in outs]
    [(0, 1, 3), (20, 2, 21)]
    >>> k.after_batch({b"k": entry}, meta, 20)  # window [0, 10) expires at 15; no output
    []
    >>> entry
    {(20, 30): [2, 21, False]}
    """

    def close_time(self, start: int, end: int) -> int:  # noqa: D102
        return end + self.spec.windows.grace_ms

    def expire_time(self, start: int, end: int) -> int:  # noqa: D102
        return start + self.spec.retention_ms

    def bounds_for(
        self, windows: TimeWindowSpec | CustomWindowSpec, rec: Rec
    ) -> list[tuple[int, int]]:
        """The windows ``rec`` falls in; a user-defined ``Windows.windows_for`` that raises or
        returns something else than ``{start: TimeWindow}`` stops the application, naming the
        operator and the record (Kafka Streams' ``LogAndFail``).
        """
        if isinstance(windows, TimeWindowSpec):
            return windows.bounds_for(rec.ts)
        return call_user(windows.bounds_for, (rec.ts,), self.spec.node_name, "windows_for", rec)

    def process_key(  # noqa: D102
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any], floor: int | None
    ) -> tuple[Any, list[Out]]:
        w = self.spec.windows
        assert isinstance(w, TimeWindowSpec | CustomWindowSpec)
        key, values = self.decode(gk, records)
        windows: dict[tuple[int, int], list[Any]] = entry if entry is not None else {}
        changed: dict[tuple[int, int], Rec] = {}
        deleted: dict[tuple[int, int], int] = {}  # window -> its tombstone's timestamp
        created: set[tuple[int, int]] = set()  # windows not in state before the micro-batch
        # each changed window's aggregate before the micro-batch, pickled before the first
        # fold (which may change it in place)
        olds: dict[tuple[int, int], bytes | None] = {}
        track_old = self.spec.with_old
        for rec, value in zip(records, values, strict=True):
            st = self.stream_time(rec, floor)
            for start, end in self.bounds_for(w, rec):
                if end + w.grace_ms <= st:
                    self.drop_late(rec, start, end, st)
                    continue
                window = windows.get((start, end))
                if track_old and (start, end) not in olds:
                    olds[(start, end)] = None if window is None else pickle.dumps(window[0], 5)
                if window is None:
                    if (start, end) not in changed:
                        created.add((start, end))
                    window = windows[(start, end)] = [self.initial(rec), rec.ts, False]
                    self.schedule(meta, start, end)
                window[0] = self.fold(key, value, window[0], rec)
                if rec.ts > window[1]:
                    window[1] = rec.ts
                if window[0] is None:  # KStreamWindowAggregate puts null: the window is gone
                    del windows[(start, end)]
                    # the tombstone carries the deleting record's timestamp, as the caching
                    # store's flush forwards a deletion (TimestampedCacheFlushListener)
                    deleted[(start, end)] = rec.ts
                changed[(start, end)] = rec
        outs: list[Out] = []
        if self.spec.emit_final:
            # each changed window keeps its aggregate from before the batch, for its final
            # result (see WindowAggregateSpec.with_old)
            for bounds, old in olds.items():
                kept = windows.get(bounds)
                if kept is not None:
                    kept[3:] = [old]
        else:
            # a window created and deleted within the micro-batch forwards nothing (Kafka
            # Streams' caching window store skips a flush with neither new nor old value)
            outs = [
                self.update_out(gk, s, e, windows[(s, e)], r, olds.get((s, e)))
                if (s, e) in windows
                else Out.of(r, self.window_key(gk, s, e), None, olds.get((s, e)), deleted[(s, e)])
                for (s, e), r in changed.items()
                if (s, e) in windows or (s, e) not in created
            ]
        return (windows or None), outs
