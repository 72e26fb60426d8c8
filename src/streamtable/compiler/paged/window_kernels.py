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
(``Rec.stream_time``), and :meth:`WindowKernel.after_batch` receives the operator's low
watermark, the smallest partition time, which closes windows (final results) and expires them
from state (after the retention, by default size + grace).

State entry per key: ``{(start, end): [aggregate, ts, emitted]}`` (ms).
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any

from streamtable.compiler.codecs import Codec
from streamtable.compiler.pack_stage import STATE_PAGES
from streamtable.compiler.paged.processor import LATE
from streamtable.compiler.paged.records import Out, Rec
from streamtable.compiler.paged.user_code import call_user
from streamtable.errors import StreamsError
from streamtable.topology.nodes import Aggregation, CustomWindowSpec, TimeWindowSpec, WindowSpec

_LONG = struct.Struct(">q")


def _per_page(bound: int | None) -> int | None:
    return None if bound is None else -(-bound // STATE_PAGES)


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
        A window stays in state until the low watermark reaches ``start + retention_ms``
        (sessions: ``end + retention_ms``); at least size + grace.
    emit_final : bool
        ``suppress(until_window_closes)``: no updates, one record per window when it closes.
    keep_late : bool
        Report each late record (for a late-records topic) besides counting it.
    buffer_max_records, buffer_max_bytes : int or None
        ``emit_final`` with a bounded ``BufferConfig``: the most windows (or bytes of keys and
        aggregates) waiting for their final result; more stops the application
        (``shutDownWhenFull``). Enforced per state page, at ``ceil(bound / pages)``.
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

    #: the processor gives records their partition's stream time and calls
    #: :meth:`after_batch` with the low watermark
    partition_time = True

    # -- what a window kind defines -----------------------------------------------------------

    def close_time(self, start: int, end: int) -> int:
        """Stream time at which the window ``[start, end]`` accepts no more records."""
        raise NotImplementedError

    def expire_time(self, start: int, end: int) -> int:
        """Low watermark at which the window leaves state."""
        raise NotImplementedError

    def window_key(self, gk: bytes, start: int, end: int) -> bytes:
        """The windowed key's bytes (Kafka Streams' ``TimeWindowedSerializer``)."""
        return gk + _LONG.pack(start)

    # -- shared -------------------------------------------------------------------------------

    def decode(self, gk: bytes, records: list[Rec]) -> tuple[Any, list[Any]]:
        """The key object and the records' value objects."""
        key = self.spec.key_codec.decode_many([gk])[0]
        return key, self.spec.value_codec.decode_many([r.value for r in records])

    def initial(self, rec: Rec) -> Any:
        """``initializer()`` (errors name the operator and ``rec``)."""
        init = self.spec.aggregation.initializer
        return call_user(init, (), self.spec.node_name, "initializer", rec)

    def fold(self, key: Any, value: Any, agg: Any, rec: Rec) -> Any:
        """``aggregator(key, value, agg)`` (errors name the operator and ``rec``)."""
        fn = self.spec.aggregation.aggregator
        return call_user(fn, (key, value, agg), self.spec.node_name, "aggregator", rec)

    def drop_late(self, rec: Rec, start: int, end: int) -> None:
        """Count ``rec`` as late for window ``[start, end]`` (and keep it when asked)."""
        self.drops[LATE] = self.drops.get(LATE, 0) + 1
        if self.spec.keep_late:
            self.late.append(
                (
                    rec,
                    {
                        "reason": "window-closed",
                        "window_start": start,
                        "window_end": end,
                        "stream_time": rec.stream_time,
                        "operator": self.spec.node_name,
                    },
                )
            )

    @staticmethod
    def stream_time(rec: Rec, low: int | None) -> int:
        """The stream time ``rec`` is judged by: its partition's, or the low watermark of the
        last micro-batch when that is larger (a partition that delivers its first records
        after others have closed windows must not reopen them).
        """
        st = rec.stream_time if rec.stream_time is not None else rec.ts
        return st if low is None or low < st else low

    def schedule(self, meta: dict[str, Any], start: int, end: int) -> None:
        """Make sure :meth:`after_batch` looks at the page when this window closes/expires."""
        t = self.close_time(start, end) if self.spec.emit_final else self.expire_time(start, end)
        nxt = meta.get("next_close")
        if nxt is None or t < nxt:
            meta["next_close"] = t

    def update_out(self, gk: bytes, start: int, end: int, window: list[Any], rec: Rec) -> Out:
        """The update record of a changed window (emit-on-update)."""
        value = pickle.dumps(window[0], protocol=5)
        return Out.of(rec, self.window_key(gk, start, end), value, ts=window[1])

    def after_batch(
        self, entries: dict[bytes, Any], meta: dict[str, Any], low: int | None
    ) -> list[Out]:
        """Emit the final result of every window the low watermark has closed (emit-final),
        and drop windows past their retention from state.
        """
        if low is not None:
            meta["low"] = low
        nxt = meta.get("next_close")
        if low is None or nxt is None or low < nxt:
            if self.spec.emit_final:
                self.check_buffer(entries)
            return []
        emit_final = self.spec.emit_final
        finals: list[tuple[int, bytes, Out]] = []
        new_next: int | None = None
        for gk in list(entries):
            windows = entries[gk]
            for (start, end), w in list(windows.items()):
                if emit_final and not w[2]:
                    close = self.close_time(start, end)
                    if close <= low:
                        w[2] = True
                        key = self.window_key(gk, start, end)
                        out = Out(key, pickle.dumps(w[0], protocol=5), None, w[1])
                        finals.append((end, key, out))
                    elif new_next is None or close < new_next:
                        new_next = close
                expire = self.expire_time(start, end)
                if expire <= low:
                    del windows[(start, end)]
                elif (not emit_final or w[2]) and (new_next is None or expire < new_next):
                    new_next = expire
            if not windows:
                del entries[gk]
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
        n_bytes = (
            sum(len(gk) + 16 + len(pickle.dumps(w[0], protocol=5)) for gk, w in pending)
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

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Fold one key's records of this micro-batch (in arrival order) into its windows."""
        raise NotImplementedError


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

    def process(  # noqa: D102
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        w = self.spec.windows
        assert isinstance(w, TimeWindowSpec | CustomWindowSpec)
        key, values = self.decode(gk, records)
        windows: dict[tuple[int, int], list[Any]] = entry if entry is not None else {}
        changed: dict[tuple[int, int], Rec] = {}
        deleted: dict[tuple[int, int], int] = {}  # window -> its tombstone's timestamp
        closed_before = meta.get("low")
        for rec, value in zip(records, values, strict=True):
            st = self.stream_time(rec, closed_before)
            for start, end in self.bounds_for(w, rec):
                if end + w.grace_ms <= st:
                    self.drop_late(rec, start, end)
                    continue
                window = windows.get((start, end))
                if window is None:
                    window = windows[(start, end)] = [self.initial(rec), rec.ts, False]
                    self.schedule(meta, start, end)
                window[0] = self.fold(key, value, window[0], rec)
                if rec.ts > window[1]:
                    window[1] = rec.ts
                if window[0] is None:  # KStreamWindowAggregate puts null: the window is gone
                    del windows[(start, end)]
                    deleted[(start, end)] = window[1]
                changed[(start, end)] = rec
        outs: list[Out] = []
        if not self.spec.emit_final:
            outs = [
                self.update_out(gk, s, e, windows[(s, e)], r)
                if (s, e) in windows
                else Out.of(r, self.window_key(gk, s, e), None, ts=deleted[(s, e)])
                for (s, e), r in changed.items()
            ]
        return (windows or None), outs
