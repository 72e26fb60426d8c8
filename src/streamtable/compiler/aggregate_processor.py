"""The ``transformWithState`` processor behind Python ``aggregate``/``reduce`` (windowed or not).

Follows Kafka Streams' ``KStreamAggregate`` / ``KStreamWindowAggregate``:
- records of one key are folded in (timestamp, topic, partition, offset, sequence) order, so the
  result does not depend on the order Spark's shuffle delivers them in;
- the first record of a key (or window) starts from ``initializer()``;
- the output timestamp is the largest timestamp that contributed;
- one update per key (or window) is emitted per micro-batch, as Kafka Streams' record cache
  coalesces updates;
- windows: a record for a window that has closed (stream time >= window end + grace) is dropped
  and counted; the window's state is deleted once it has closed.

Stream time here is estimated from Spark's watermark, which is global to the query and moves
between micro-batches (see the time-and-windows notes in the docs): the watermark is defined with
a delay of ``grace + size`` so that Spark itself never drops a record Kafka Streams would accept,
and the window-close rule is applied in this processor.
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
from streamtable.errors import StreamsError
from streamtable.topology.nodes import Aggregation, TimeWindowSpec

#: Output schema of the processor.
OUTPUT_DDL = "key binary, value binary, ts bigint, dropped bigint"
_STATE_DDL = "agg binary, ts bigint"
_START = struct.Struct(">q")


@dataclass(frozen=True)
class AggregateSpec:
    """What the processor needs: the fold, how to decode rows, the windows (if any)."""

    node_name: str
    aggregation: Aggregation
    key_codec: Codec
    value_codec: Codec
    windows: TimeWindowSpec | None


class AggregateProcessor(StatefulProcessor):
    """Folds each group's rows into a pickled aggregate held in a ``ValueState``."""

    def __init__(self, spec: AggregateSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: D102
        self.handle = handle
        self.state = handle.getValueState("aggregate", _STATE_DDL)

    def handleInputRows(  # noqa: D102, N802
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        spec = self.spec
        group_key: bytes = key[0]
        # rows are packs (see pack_stage): unpack, then fold in (ts, topic, partition, offset,
        # seq) order whatever order the shuffle delivered them in
        records = sorted(
            (rec for row in rows for rec in pickle.loads(row.value)), key=lambda r: r[1:]
        )
        if spec.windows is not None:
            w = spec.windows
            start = _START.unpack_from(group_key, len(group_key) - 8)[0]
            watermark = timerValues.getCurrentWatermarkInMs()
            # Kafka Streams drops a record when window end <= stream time - grace; with the
            # watermark delayed by grace + size that is end <= watermark + size.
            if watermark > 0 and start + w.size_ms <= watermark + w.size_ms:
                yield Row(key=group_key, value=None, ts=None, dropped=len(records))
                return
            raw_key = group_key[:-8]
        else:
            raw_key = group_key
        k = spec.key_codec.decode_many([raw_key])[0]
        values = spec.value_codec.decode_many([r[0] for r in records])
        stored = self.state.get()  # one round trip to the state store; None when absent
        if stored is not None:
            blob, ts = stored
            agg = pickle.loads(blob)
        else:
            agg, ts = spec.aggregation.initializer(), None
            if spec.windows is not None:
                # delete the window's state once it has closed
                self.handle.registerTimer(start)
        fold = spec.aggregation.aggregator
        for rec, v in zip(records, values, strict=True):
            try:
                agg = fold(k, v, agg)
            except Exception as e:
                raise StreamsError(
                    f"User code raised {type(e).__name__}: {e} in operator {spec.node_name!r} "
                    f"(aggregator) on the record at topic {rec[2]!r} partition {rec[3]} offset "
                    f"{rec[4]}. Kafka Streams' default processing exception handler (LogAndFail) "
                    "stops the application."
                ) from e
            ts = rec[1] if ts is None else max(ts, rec[1])
        blob = pickle.dumps(agg, protocol=5)
        self.state.update((blob, ts))
        yield Row(key=group_key, value=blob, ts=ts, dropped=0)

    def handleExpiredTimer(  # noqa: D102, N802
        self,
        key: Any,
        timerValues: TimerValues,
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        self.state.clear()
        return iter(())

    def close(self) -> None:  # noqa: D102
        pass
