"""``suppress(until_time_limit)``: a key's updates are held back, then its latest value is
emitted once stream time has passed the first held update's timestamp + the limit.

Follows Kafka Streams' ``KTableSuppressProcessor`` with its in-memory time-ordered buffer:
the buffer time of a key is the timestamp of the update that put it in the buffer, and later
updates replace the value without moving it ("non-resetting"); an evicted key is emitted with
its latest value and timestamp, tombstones included. When the buffer exceeds its bounds, the
oldest keys are emitted early (``emit_early_when_full``) or the application stops
(``shut_down_when_full``).

Stream time is the largest timestamp the operator has seen (one stream time for the operator,
as for one Kafka Streams task; see :mod:`.partition_time` ``single=True``), and eviction is
evaluated once per micro-batch, after the batch's updates, so updates of one micro-batch
coalesce as in Kafka Streams' record cache. ``until_window_closes`` is not here: it is fused
into the window kernels.

Entry per key: ``[buffer time, value bytes or None, ts]``, and with ``with_old`` a fourth item:
the old value of the key's last held update (Kafka Streams' buffer keeps each key's last
change, ``BufferValue.oldValue``, and evicts ``Change(newValue, oldValue)``), emitted as
``Out.old`` for a table filter after the suppression (:mod:`streamtable.topology.old_values`).
An entry held without it (by a version before old values, or with no filter after the
suppression) and let go with no change since goes out with no old value: a filter then sends
nothing for it when it fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from streamtable.compiler.pack_stage import STATE_PAGES
from streamtable.compiler.paged.records import Out, Rec
from streamtable.errors import StreamsError
from streamtable.topology.nodes import SuppressSpec


@dataclass
class TimeLimitSuppressKernel:
    """See the module doc.

    >>> k = TimeLimitSuppressKernel("sup", SuppressSpec(False, time_limit_ms=10))
    >>> rec = lambda ts, v: Rec(ts, "", -1, 0, 0, 0, b"k", v, None, ts)
    >>> meta = {}
    >>> entry, outs = k.process(b"k", [rec(5, b"a"), rec(7, b"b")], None, meta)
    >>> entry, outs
    ([5, b'b', 7], [])
    >>> k.after_batch({b"k": entry}, meta, 14)  # 14 < 5 + 10: still held
    []
    >>> entries = {b"k": entry}
    >>> [(o.key, o.value, o.ts) for o in k.after_batch(entries, meta, 15)], entries
    ([(b'k', b'b', 7)], {})

    With ``with_old``, the held update's old value is that of the key's last change:

    >>> k = TimeLimitSuppressKernel("sup", SuppressSpec(False, time_limit_ms=10), with_old=True)
    >>> change = lambda ts, new, old: Rec(ts, "", -1, 0, 0, 0, b"k", new, old)
    >>> entry, _ = k.process(b"k", [change(5, b"2", b"1"), change(7, b"3", b"2")], None, {})
    >>> [(o.value, o.old) for o in k.after_batch({b"k": entry}, {"next_close": 5}, 15)]
    [(b'3', b'2')]
    """

    node_name: str
    spec: SuppressSpec
    with_old: bool = False
    drops: dict[str, int] = field(default_factory=dict)
    late: list[Any] = field(default_factory=list)

    #: run on stream time (one for the whole operator)
    partition_time = True

    def process(
        self, gk: bytes, records: list[Rec], entry: Any, meta: dict[str, Any]
    ) -> tuple[Any, list[Out]]:
        """Buffer one key's updates of this micro-batch."""
        with_old = self.with_old
        for rec in records:
            if entry is None:
                entry = (
                    [rec.ts, rec.value, rec.ts, rec.old]
                    if with_old
                    else [rec.ts, rec.value, rec.ts]
                )
                nxt = meta.get("next_close")
                if nxt is None or rec.ts < nxt:
                    meta["next_close"] = rec.ts
            else:
                entry[1], entry[2] = rec.value, rec.ts
                if with_old:
                    entry[3:] = [rec.old]  # (a 3-item entry was held without old values)
                elif len(entry) > 3:  # held while a filter read old values: no longer kept
                    del entry[3:]
        return entry, []

    def _bound(self, total: int | None) -> int | None:
        return None if total is None else math.ceil(total / STATE_PAGES)

    def after_batch(
        self, entries: dict[bytes, Any], meta: dict[str, Any], low: int | None
    ) -> list[Out]:
        """Emit the keys whose buffer time + limit stream time has reached, then enforce the
        buffer's bounds.
        """
        outs: list[Out] = []
        nxt = meta.get("next_close")
        if low is not None and nxt is not None and nxt + self.spec.time_limit_ms <= low:
            expiry = low - self.spec.time_limit_ms
            for gk in sorted(entries, key=lambda g: (entries[g][0], g)):
                if entries[gk][0] > expiry:
                    break
                outs.append(self._emit(gk, entries.pop(gk)))
        max_records, max_bytes = (
            self._bound(self.spec.max_records),
            self._bound(self.spec.max_bytes),
        )
        if max_records is not None or max_bytes is not None:
            outs.extend(self._enforce(entries, max_records, max_bytes))
        meta["next_close"] = min((e[0] for e in entries.values()), default=None)
        return outs

    def _enforce(
        self, entries: dict[bytes, Any], max_records: int | None, max_bytes: int | None
    ) -> list[Out]:
        def size() -> int:  # a held old value counts, as in Kafka Streams' buffer
            return sum(len(g) + len(e[1] or b"") + _old_size(e) + 8 for g, e in entries.items())

        def over() -> bool:
            return (max_records is not None and len(entries) > max_records) or (
                max_bytes is not None and size() > max_bytes
            )

        if not over():
            return []
        if not self.spec.emit_early:
            raise StreamsError(
                f"The suppression buffer of {self.node_name!r} is full ({len(entries)} keys, "
                f"{size()} bytes on one of its {STATE_PAGES} state pages; bounds per page: "
                f"{max_records} records, {max_bytes} bytes) and is configured to shut down "
                "when full (Kafka Streams' shutDownWhenFull). Raise the bound, or use "
                "BufferConfig....emit_early_when_full()."
            )
        outs = []
        for gk in sorted(entries, key=lambda g: (entries[g][0], g)):
            if not over():
                break
            outs.append(self._emit(gk, entries.pop(gk)))
        return outs

    @staticmethod
    def _emit(gk: bytes, entry: list[Any]) -> Out:
        return Out(gk, entry[1], entry[3] if len(entry) > 3 else None, entry[2])


def _old_size(entry: list[Any]) -> int:
    return len(entry[3] or b"") if len(entry) > 3 else 0
