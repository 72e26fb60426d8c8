"""The ``transformWithState`` processor behind Python ``aggregate``/``reduce`` (windowed or not).

Follows Kafka Streams' ``KStreamAggregate`` / ``KStreamWindowAggregate``:
- records of one key are folded in (timestamp, topic, partition, offset, sequence) order, so the
  result does not depend on the order Spark's shuffle delivers them in;
- the first record of a key (or window) starts from ``initializer()``;
- the output timestamp is the largest timestamp that contributed;
- one update per key (or window) is emitted per micro-batch, as Kafka Streams' record cache
  coalesces updates;
- windows: a record for a window that has closed (stream time >= window end + grace) is dropped
  and counted; a closed window's aggregate is deleted from state.

State is paged (see ``pack_stage``): the group is a page of keys and its ``ValueState`` holds
``{"entries": {group key bytes: (aggregate, ts)}, "timer": ms or None}``, pickled. Per micro-batch
a page costs one state read and one write however many of its keys changed.

Stream time here is estimated from Spark's watermark, which is global to the query and moves
between micro-batches (see the time-and-windows notes in the docs): the watermark is defined with
a delay of ``grace + size`` so that Spark itself never drops a record Kafka Streams would accept,
and the window-close rule is applied here: Kafka Streams drops a record when
``window end <= stream time - grace``, which with that delay is ``window start <= watermark``.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from streamtable.compiler.codecs import Codec
from streamtable.compiler.paged.user_code import user_code_error
from streamtable.topology.nodes import Aggregation, TimeWindowSpec

#: Output schema of the processor: one row per updated key (or window), plus at most one row
#: per page and batch counting dropped late records (``key`` null).
OUTPUT_DDL = "key binary, value binary, ts bigint, dropped bigint"
_STATE_DDL = "page binary"
_START = struct.Struct(">q")


@dataclass(frozen=True)
class AggregateSpec:
    """What the processor needs: the fold, how to decode keys and values, the windows."""

    node_name: str
    aggregation: Aggregation
    key_codec: Codec
    value_codec: Codec
    windows: TimeWindowSpec | None


def _window_start(group_key: bytes) -> int:
    return _START.unpack_from(group_key, len(group_key) - 8)[0]


class AggregateProcessor(StatefulProcessor):
    """Folds the records of each key of a page into its aggregate; see the module doc."""

    def __init__(self, spec: AggregateSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: D102
        self.handle = handle
        self.state = handle.getValueState("page", _STATE_DDL)

    # -- page state -------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        stored = self.state.get()  # one round trip to the state store; None when absent
        return pickle.loads(stored[0]) if stored is not None else {"entries": {}, "timer": None}

    def _save(self, page: dict[str, Any]) -> None:
        if page["entries"]:
            self.state.update((pickle.dumps(page, protocol=5),))
        else:
            self.state.clear()

    def _evict_closed_windows(self, page: dict[str, Any], watermark: int) -> None:
        """Delete closed windows and keep one timer at the next window to close."""
        entries = page["entries"]
        if watermark > 0:
            for gk in [gk for gk in entries if _window_start(gk) <= watermark]:
                del entries[gk]
        nxt = min((_window_start(gk) for gk in entries), default=None)
        if nxt != page["timer"]:
            if page["timer"] is not None:
                self.handle.deleteTimer(page["timer"])
            if nxt is not None:
                self.handle.registerTimer(nxt)
            page["timer"] = nxt

    # -- processing --------------------------------------------------------------------------

    def handleInputRows(  # noqa: D102, N802
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        spec = self.spec
        groups: dict[bytes, list[tuple[Any, ...]]] = {}
        for row in rows:
            for gk, recs in pickle.loads(row.value).items():
                groups.setdefault(gk, []).extend(recs)
        windowed = spec.windows is not None
        watermark = timerValues.getCurrentWatermarkInMs() if windowed else 0
        page = self._load()
        entries = page["entries"]
        out: list[Row] = []
        dropped = 0
        for gk, records in groups.items():
            if windowed and watermark > 0 and _window_start(gk) <= watermark:
                dropped += len(records)
                continue
            records.sort(key=lambda r: r[1:])
            agg, ts = self._fold(gk, records, entries.get(gk))
            entries[gk] = (agg, ts)
            out.append(Row(key=gk, value=pickle.dumps(agg, protocol=5), ts=ts, dropped=0))
        if windowed:
            self._evict_closed_windows(page, watermark)
        self._save(page)
        if dropped:
            out.append(Row(key=None, value=None, ts=None, dropped=dropped))
        return iter(out)

    def _fold(
        self, group_key: bytes, records: list[tuple[Any, ...]], stored: tuple[Any, int] | None
    ) -> tuple[Any, int]:
        spec = self.spec
        raw_key = group_key[:-8] if spec.windows is not None else group_key
        k = spec.key_codec.decode_many([raw_key])[0]
        values = spec.value_codec.decode_many([r[0] for r in records])
        if stored is None:
            agg, ts = spec.aggregation.initializer(), None
        else:
            agg, ts = stored
        fold = spec.aggregation.aggregator
        for rec, v in zip(records, values, strict=True):
            try:
                agg = fold(k, v, agg)
            except Exception as e:
                raise user_code_error(e, spec.node_name, "aggregator", *rec[2:5]) from e
            ts = rec[1] if ts is None else max(ts, rec[1])
        return agg, ts

    def handleExpiredTimer(  # noqa: D102, N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        page = self._load()
        page["timer"] = None  # this one fired
        self._evict_closed_windows(page, timerValues.getCurrentWatermarkInMs())
        self._save(page)
        return iter(())

    def close(self) -> None:  # noqa: D102
        pass
