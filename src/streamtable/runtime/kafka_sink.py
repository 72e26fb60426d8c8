"""streamtable's own Kafka sink: a ``foreachBatch`` writing each task's rows with ``TaskOutput``.

Used instead of Spark's Kafka sink when ``processing.guarantee=exactly_once_v2`` (one Kafka
transaction per task and micro-batch, see :mod:`streamtable.runtime.task_output`) or when
``production.exception.handler=continue`` (records the producer rejects are skipped and counted).
It also carries each record's event time through as the Kafka record timestamp, as Kafka Streams
does (Spark's 4.2 connector cannot set it).

The rows are those of :func:`streamtable.compiler.lower.sink.sink_frame`: ``key, value, topic``,
optionally ``partition``, ``ts`` (ms) and ``src`` (the source partition a task of a stateless
query reads: the task's stable name for the exactly-once protocol).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from streamtable.compiler.lower.sink import SOURCE_SLOT_COLUMN
from streamtable.errors import StreamsError
from streamtable.runtime.task_output import OutputSpec, TaskOutput

RESULT_DDL = "written bigint, rejected bigint"


@dataclass(frozen=True)
class PartitionWriter:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]`` for ``mapInArrow``: one task's writes.

    Yields one row ``(written, rejected)``. Under exactly-once a replayed batch still reads all
    its input (so upstream state is committed as in the first run) but writes nothing.
    """

    spec: OutputSpec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Write every row of the task; yield the counts."""
        out: TaskOutput | None = None
        slot: str | None = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                slots = _slots(batch)
                if out is None:
                    slot = slots[0]
                    out = TaskOutput(self.spec, slot=slot)
                if any(s != slot for s in slots):
                    raise StreamsError(
                        f"A task of output stage {self.spec.stage!r} holds records of several "
                        f"source partitions ({slot!r} and {sorted(set(slots) - {slot})}); it "
                        "cannot be written exactly once."
                    )
                if out.produced == 0 and out.replayed:
                    continue  # read the rest of the input, write nothing
                self._write(out, batch)
            if out is not None:
                out.close()
        except BaseException:
            if out is not None:
                out.abort()
            raise
        produced, rejected = (0, 0) if out is None else (out.produced, out.rejected)
        yield pa.RecordBatch.from_pydict(
            {"written": [produced], "rejected": [rejected]},
            schema=pa.schema([("written", pa.int64()), ("rejected", pa.int64())]),
        )

    @staticmethod
    def _write(out: TaskOutput, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        keys = batch.column(names.index("key")).to_pylist()
        values = batch.column(names.index("value")).to_pylist()
        topics = batch.column(names.index("topic")).to_pylist()
        ts = batch.column(names.index("ts")).to_pylist() if "ts" in names else None
        parts = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        out.produce_many(topics, keys, values, ts, parts)


def _slots(batch: pa.RecordBatch) -> list[str | None]:
    """The distinct source-partition names of a batch's rows (``[None]`` after a shuffle)."""
    if SOURCE_SLOT_COLUMN not in batch.schema.names:
        return [None]
    import pyarrow.compute as pc

    values = pc.unique(batch.column(batch.schema.names.index(SOURCE_SLOT_COLUMN))).to_pylist()
    return values or [None]


class ForeachBatchSink:
    """The ``foreachBatch`` function of one query: runs :class:`PartitionWriter` on every task.

    Runs on the driver; keeps, for :meth:`KafkaStreams.metrics`, the number of records skipped
    by ``production.exception.handler=continue`` (``rejected``) and, under
    ``exactly_once_v2``, the number of micro-batches whose write failed (``aborted``): the
    Spark job raised, so every transaction its failed tasks had opened was aborted (by the task,
    or by the fencing ``init_transactions`` of the batch's next run) and Spark runs the batch
    again. A task that failed and then succeeded on a Spark retry inside one job is not
    counted (Spark keeps no result of a failed task attempt).

    Parameters
    ----------
    spec : OutputSpec
    query : str
        The name of the Spark query this sink writes for (the ``query`` tag of its metrics).
    """

    def __init__(self, spec: OutputSpec, query: str = "") -> None:
        self.spec = spec
        self.query = query
        self._lock = threading.Lock()
        self.written = 0
        self.rejected = 0
        self.aborted = 0

    def __call__(self, df: Any, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` (one Spark job; the task partitions are ``df``'s)."""
        # one row per task, summed here: no extra shuffle stage per micro-batch
        try:
            rows = df.mapInArrow(PartitionWriter(self.spec), RESULT_DDL).collect()
        except BaseException:
            if self.spec.exactly_once:
                with self._lock:
                    self.aborted += 1
            raise
        with self._lock:
            self.written += sum(int(r["written"]) for r in rows)
            self.rejected += sum(int(r["rejected"]) for r in rows)
