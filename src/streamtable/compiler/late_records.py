"""Writing the records a windowed operator dropped as late to a topic, with the reason in headers.

Kafka Streams only counts such records (the ``dropped-records`` metric); streamtable can also
keep them: ``windowed_by(..., late_records_topic=T)``. The operator reports each late record
as a row (``dropped`` = 1, reason ``late``, a JSON ``detail``); this stage, right after the
operator, produces those rows to ``T`` with confluent-kafka and passes every row on unchanged
(the counting and removal happen after it).

A record keeps its key and value bytes (the grouped stream's serdes), its timestamp, and is
partitioned by murmur2 of the key like Java's producer. Headers (UTF-8 values):
``streamtable.late.reason`` (``window-closed``), ``streamtable.late.operator``,
``streamtable.late.window.start`` / ``.end`` and ``streamtable.late.stream.time`` (ms),
``streamtable.source.topic`` / ``.partition`` / ``.offset``.

Delivery follows ``processing.guarantee``: under ``exactly_once_v2`` each task's late records are
one Kafka transaction (:mod:`streamtable.runtime.task_output`), under ``at_least_once`` a retried
Spark task writes its late records again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from streamtable.errors import StreamsError
from streamtable.runtime.task_output import OutputSpec, TaskOutput


def late_headers(detail: dict[str, Any], topic: str, partition: int, offset: int) -> list[Any]:
    """The headers of one late record.

    >>> late_headers({"reason": "window-closed", "operator": "agg", "window_start": 0,
    ...               "window_end": 10, "stream_time": 12}, "in", 0, 7)[:2]
    [('streamtable.late.reason', b'window-closed'), ('streamtable.late.operator', b'agg')]
    """
    return [
        ("streamtable.late.reason", str(detail["reason"]).encode()),
        ("streamtable.late.operator", str(detail["operator"]).encode()),
        ("streamtable.late.window.start", str(detail["window_start"]).encode()),
        ("streamtable.late.window.end", str(detail["window_end"]).encode()),
        ("streamtable.late.stream.time", str(detail["stream_time"]).encode()),
        ("streamtable.source.topic", str(topic).encode()),
        ("streamtable.source.partition", str(partition).encode()),
        ("streamtable.source.offset", str(offset).encode()),
    ]


@dataclass(frozen=True)
class LateRecordsWriter:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]`` for ``mapInArrow`` (see module)."""

    topic: str
    spec: OutputSpec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Produce the late rows of each batch; yield every batch unchanged."""
        out = TaskOutput(self.spec)
        try:
            for batch in batches:
                col = {n: batch.column(i) for i, n in enumerate(batch.schema.names)}
                details = col["detail"].to_pylist()
                rows = [i for i, d in enumerate(details) if d is not None]
                if rows and not out.replayed:
                    keys = col["key"].to_pylist()
                    values = col["value"].to_pylist()
                    ts = col["ts"].to_pylist()
                    topics = col["topic"].to_pylist()
                    parts = col["partition"].to_pylist()
                    offsets = col["offset"].to_pylist()
                    for i in rows:
                        headers = late_headers(
                            json.loads(details[i]), topics[i], parts[i], offsets[i]
                        )
                        out.produce(
                            self.topic, keys[i], values[i], timestamp=ts[i], headers=headers
                        )
                yield batch
            out.close()
        except StreamsError as e:
            out.abort()
            raise StreamsError(
                f"Could not write late records to topic {self.topic!r}: {e} Check that the "
                "topic exists and the broker is reachable."
            ) from e
        except BaseException:
            out.abort()
            raise
