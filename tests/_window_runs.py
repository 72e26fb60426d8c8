"""A window kernel driven as one source partition's processor would drive it: micro-batches cut
anywhere, the partition time as stream time, and what came out (shared by the window-kernel
tests)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from streamtable.compiler.codecs import PickleCodec, SerdeCodec
from streamtable.compiler.paged.records import Out, Rec
from streamtable.compiler.paged.session_kernels import SessionWindowKernel
from streamtable.compiler.paged.sliding_kernels import SlidingWindowKernel
from streamtable.compiler.paged.window_kernels import (
    TimeWindowKernel,
    WindowAggregateSpec,
    WindowKernel,
)
from streamtable.serde import Serdes
from streamtable.topology.nodes import (
    Aggregation,
    CustomWindowSpec,
    SessionWindowSpec,
    SlidingWindowSpec,
    TimeWindowSpec,
    WindowSpec,
)


def _append(k: Any, v: Any, a: list[Any]) -> list[Any]:
    a.append(v)  # mutates: windows must never share an aggregate object
    return a


def _extend(k: Any, a: list[Any], b: list[Any]) -> list[Any]:
    a.extend(b)
    return a


def _not_called(*args: Any) -> Any:
    raise AssertionError("the kernel called a function of the DSL's count()")


def _prepend(k: Any, a: list[Any], b: list[Any]) -> list[Any]:
    b[:0] = a  # mutates the session's own aggregate, which user mergers may do
    return b


AGGREGATIONS = {
    "count": Aggregation(lambda: 0, lambda k, v, a: a + 1, merger=lambda k, a, b: a + b),
    # the DSL's count(): the kernels count without decoding or calling its functions
    "native_count": Aggregation(_not_called, _not_called, native="count", merger=_not_called),
    "sum": Aggregation(lambda: 0, lambda k, v, a: a + v, merger=lambda k, a, b: a + b),
    "list": Aggregation(list, _append, merger=_extend),
    # a list whose merger changes the found session's aggregate in place
    "prepending": Aggregation(list, _append, merger=_prepend),
    # a sum whose aggregator returns None for a negative value: the window is deleted
    "clearing": Aggregation(
        lambda: 0, lambda k, v, a: None if v < 0 else a + v, merger=lambda k, a, b: a + b
    ),
}


def kernel_for(
    windows: WindowSpec,
    agg: str = "count",
    *,
    emit_final: bool = False,
    retention_ms: int | None = None,
    with_old: bool = False,
) -> WindowKernel:
    """The kernel of ``windows`` (retention: Kafka Streams' default unless given; ``with_old``:
    outputs carry each window's aggregate before the micro-batch)."""
    if retention_ms is None:
        if isinstance(windows, SessionWindowSpec):
            retention_ms = windows.inactivity_gap_ms + windows.grace_ms
        elif isinstance(windows, SlidingWindowSpec):
            retention_ms = 2 * windows.time_difference_ms + windows.grace_ms
        else:
            retention_ms = windows.size_ms + windows.grace_ms
    spec = WindowAggregateSpec(
        "agg",
        AGGREGATIONS[agg],
        SerdeCodec(Serdes.bytes()),
        PickleCodec(),
        windows,
        retention_ms=retention_ms,
        emit_final=emit_final,
        keep_late=True,
        with_old=with_old,
    )
    if isinstance(windows, TimeWindowSpec | CustomWindowSpec):
        return TimeWindowKernel(spec)
    if isinstance(windows, SlidingWindowSpec):
        return SlidingWindowKernel(spec)
    return SessionWindowKernel(spec)


# -- a processor for one source partition ----------------------------------------------------


@dataclass
class Run:
    """What a kernel did over a whole input."""

    entries: dict[bytes, Any]
    outs: list[Out]
    late: list[tuple[int, int, int]]  # (offset, window start, window end) per late drop
    drops: int
    low: int | None
    kernel: WindowKernel
    batches: list[list[Out]] = field(default_factory=list)
    #: per micro-batch, every window in state before it: (key, start, end) -> aggregate
    befores: list[dict[tuple[bytes, int, int], Any]] = field(default_factory=list)

    def window(self, out: Out) -> tuple[bytes, int, int]:
        """(key, start, end) of an output's windowed key."""
        k = out.key
        if isinstance(self.kernel, SessionWindowKernel):
            end = int.from_bytes(k[-16:-8], "big", signed=True)
            start = int.from_bytes(k[-8:], "big", signed=True)
            return k[:-16], start, end
        start = int.from_bytes(k[-8:], "big", signed=True)
        return k[:-8], start, start + self.kernel.spec.windows.size_ms

    def table(self) -> dict[tuple[bytes, int, int], Any]:
        """The outputs applied to a table (a tombstone deletes)."""
        table: dict[tuple[bytes, int, int], Any] = {}
        for o in self.outs:
            if o.value is None:
                table.pop(self.window(o), None)
            else:
                table[self.window(o)] = pickle.loads(o.value)
        return table

    def outputs(self) -> list[tuple[tuple[bytes, int, int], Any, int]]:
        """(window, value, ts) of every output, in order."""
        return [
            (self.window(o), None if o.value is None else pickle.loads(o.value), o.ts)
            for o in self.outs
        ]

    def state(self) -> dict[tuple[bytes, int, int], tuple[Any, int, bool]]:
        """Every window in state: (aggregate, timestamp, emitted)."""
        return {
            (gk, s, e): (w[0], w[1], w[2])
            for gk, windows in self.entries.items()
            for (s, e), w in windows.items()
        }


def drive(
    kernel: WindowKernel, records: list[tuple[bytes, int, Any]], cuts: set[int] | str = ""
) -> Run:
    """Run ``records`` ``(key, ts, value)`` of one partition (offset = index) through
    ``kernel`` as :class:`~streamtable.compiler.paged.processor.PartitionTimeProcessor` would:
    micro-batches start at the indices in ``cuts`` (``"each"``: one record per batch); each
    record's stream time is the running maximum timestamp; per batch each key's records in
    offset order, then ``after_batch`` with the partition time as low watermark. Records carry
    the stream time before them too (``time_before``), as the pack stage stamps it.
    """
    n = len(records)
    if cuts == "each":
        cuts = set(range(n))
    bounds = [0, *sorted(c for c in set(cuts or ()) if 0 < c < n), n]
    entries: dict[bytes, Any] = {}
    meta: dict[str, Any] = {}
    pt: int | None = None
    outs: list[Out] = []
    batches: list[list[Out]] = []
    befores: list[dict[tuple[bytes, int, int], Any]] = []
    late: list[tuple[int, int, int]] = []
    drops = 0
    for a, b in zip(bounds, bounds[1:], strict=False):
        groups: dict[bytes, list[Rec]] = {}
        for off in range(a, b):
            key, ts, v = records[off]
            before = pt
            pt = ts if pt is None else max(pt, ts)
            rec = Rec(ts, "t", 0, off, 0, 0, key, pickle.dumps(v), None, pt, before)
            groups.setdefault(key, []).append(rec)
        kernel.drops = {}
        kernel.late = []
        befores.append(
            {
                (gk, s, e): pickle.loads(pickle.dumps(w[0]))
                for gk, windows in entries.items()
                for (s, e), w in windows.items()
            }
        )
        batch: list[Out] = []
        for gk in sorted(groups):
            entry, o = kernel.process(gk, groups[gk], entries.get(gk), meta)
            if entry is None:
                entries.pop(gk, None)
            else:
                entries[gk] = entry
            batch.extend(o)
        batch.extend(kernel.after_batch(entries, meta, pt))
        outs.extend(batch)
        batches.append(batch)
        late.extend((r.offset, d["window_start"], d["window_end"]) for r, d in kernel.late)
        drops += kernel.drops.get("late", 0)
    return Run(entries, outs, sorted(late), drops, pt, kernel, batches, befores)


def recs(*ts: int, key: bytes = b"A", value: Any = 1) -> list[tuple[bytes, int, Any]]:
    return [(key, t, value) for t in ts]


def windows_of(run: Run, key: bytes = b"A") -> dict[tuple[int, int], Any]:
    return {(s, e): w[0] for (gk, s, e), w in run.state().items() if gk == key}


records_strategy = st.lists(
    st.tuples(st.sampled_from([b"A", b"B"]), st.integers(0, 40), st.integers(-3, 9)),
    min_size=1,
    max_size=18,
)
