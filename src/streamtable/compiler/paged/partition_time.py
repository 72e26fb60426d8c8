"""Stream time that does not depend on how the input was cut into micro-batches.

Kafka Streams decides lateness by stream time: the largest timestamp a task has processed,
where a task reads its input partitions in offset order. Spark's watermark is one value per
query, recomputed between micro-batches, so which records it calls late depends on where the
batches were cut. streamtable instead tracks **partition time**, the largest timestamp read so
far from each source partition in offset order, and gives every record the partition time of its
own source partition *including the record itself*:

    stream_time(r) = max(ts of the records of r's partition up to and including r)

That value depends only on the partition's content, never on batch boundaries. It reaches the
operator in two parts, computed before Spark's shuffle while each Spark task still holds a
contiguous, offset-ordered range (a *chunk*) of one Kafka partition:

- :class:`PartitionTimePack` stamps each record with the running maximum within its chunk and
  sends every state page a summary of each chunk ``(topic, partition, first offset, last
  offset, max ts)``;
- :func:`resolve_stream_times` (in the operator, per page) adds what came before the chunk: the
  page's partition time from earlier micro-batches and the chunks of the same partition in this
  micro-batch that end before the record.

Every page receives every chunk summary, so all pages agree on each partition's time after each
micro-batch, and keep them in their meta (``partition_times``). The operator's **low
watermark** is the smallest partition time over the source partitions that have delivered
records to it. A window closes once its key's time has passed its close time: the smallest
partition time over the partitions that delivered the key (``WindowKernel.key_time``), because
then none of them can still deliver a record of the key that would be accepted into it. A
time-limited suppression (one stream time, ``single``) evicts by the low watermark.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from streamtable.compiler.pack_stage import STATE_PAGES, page_of
from streamtable.compiler.paged.records import Rec

#: Output of :class:`PartitionTimePack`: record rows (``value`` = pickled ``{group key: [Rec]}``)
#: and chunk-summary rows (``chunks`` = pickled list of :data:`Chunk`), both per page.
PARTITION_TIME_DDL = "page int, value binary, chunks binary"

#: ``(topic, partition, first offset, last offset, max ts)`` of one task's range of a partition.
Chunk = tuple[str, int, int, int, int]

#: The stream-time key of records without source coordinates (the output of another stateful
#: operator): they share one stream time, as the records of one Kafka Streams task do.
NO_PARTITION = ("", -1)


@dataclass(frozen=True)
class PartitionTimePack:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]`` for ``mapInArrow``.

    Like :class:`~.pack.KernelPack`, one row per page per Arrow batch holding that page's
    records grouped by key, each :class:`~.records.Rec` carrying in ``stream_time`` the largest
    timestamp of its partition's chunk up to and including it. After the task's last batch, one
    row per page with the summaries of every chunk the task read.

    The input must not have been shuffled since the Kafka source: a Spark task has to see each
    partition's records as a contiguous range in offset order. With ``single`` the records'
    coordinates are ignored and the operator has one stream time, the largest timestamp it has
    seen (for inputs that come out of another stateful operator).

    >>> batch = pa.RecordBatch.from_pylist([
    ...     dict(key=b"a", value=b"1", ts=5, partition=0, offset=10, seq=0, topic="t"),
    ...     dict(key=b"a", value=b"2", ts=3, partition=0, offset=11, seq=0, topic="t")])
    >>> out = list(PartitionTimePack()(iter([batch])))
    >>> recs = pickle.loads(out[0].column(1)[0].as_py())[b"a"]
    >>> [(r.ts, r.stream_time, r.time_before) for r in recs]
    [(5, 5, None), (3, 5, 5)]
    >>> pickle.loads(out[1].column(2)[0].as_py())
    [('t', 0, 10, 11, 5)]
    """

    single: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Pack each non-empty batch, then send the task's chunk summaries to every page."""
        chunks: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [first, last, max]
        for batch in batches:
            if batch.num_rows:
                yield self._pack(batch, chunks)
        if chunks:
            summary = pickle.dumps(
                [(t, p, c[0], c[1], c[2]) for (t, p), c in chunks.items()], protocol=5
            )
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(range(STATE_PAGES), pa.int32()),
                    pa.nulls(STATE_PAGES, pa.binary()),
                    pa.array([summary] * STATE_PAGES, pa.binary()),
                ],
                names=["page", "value", "chunks"],
            )

    def _pack(
        self, batch: pa.RecordBatch, chunks: dict[tuple[str, int], list[int]]
    ) -> pa.RecordBatch:
        names = batch.schema.names
        col = {n: batch.column(i).to_pylist() for i, n in enumerate(names)}
        keys, values, tss, seqs = col["key"], col["value"], col["ts"], col["seq"]
        olds = col.get("old") or [None] * batch.num_rows  # a table's changes: old values
        single = self.single
        if not single:
            topics, parts, offsets = col["topic"], col["partition"], col["offset"]
        pages: dict[int, dict[bytes | None, list[Rec]]] = {}
        for i, k in enumerate(keys):
            ts = tss[i]
            topic, part, offset = NO_PARTITION[0], NO_PARTITION[1], 0
            if not single:
                topic = topics[i] or topic
                part = part if parts[i] is None else parts[i]
                offset = offsets[i] or 0
            chunk = chunks.get((topic, part))
            if chunk is None:
                before = None
                chunk = chunks[(topic, part)] = [offset, offset, ts]
            else:
                before = chunk[2]
                if offset > chunk[1]:
                    chunk[1] = offset
                if ts > chunk[2]:
                    chunk[2] = ts
            rec = Rec(
                ts, topic, part, offset, seqs[i] or 0, 0, k, values[i], olds[i], chunk[2], before
            )
            page = 0 if k is None else page_of(k)
            pages.setdefault(page, {}).setdefault(k, []).append(rec)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(list(pages), pa.int32()),
                pa.array([pickle.dumps(g, protocol=5) for g in pages.values()], pa.binary()),
                pa.nulls(len(pages), pa.binary()),
            ],
            names=["page", "value", "chunks"],
        )


def resolve_stream_times(
    groups: dict[Any, list[Rec]], chunks: list[Chunk], partition_times: dict[Any, int]
) -> dict[Any, list[Rec]]:
    """``groups`` with each record's ``stream_time`` made its partition's time (see module).

    ``partition_times`` maps ``(topic, partition)`` to the partition time before this
    micro-batch; ``chunks`` are all chunk summaries of the micro-batch.

    >>> r = Rec(4, "t", 0, 21, 0, 0, b"k", None, None, 4)
    >>> chunks = [("t", 0, 10, 20, 9), ("t", 0, 21, 30, 4)]
    >>> (out,) = resolve_stream_times({b"k": [r]}, chunks, {("t", 0): 7})[b"k"]
    >>> out.stream_time, out.time_before  # before it: the earlier chunk's largest timestamp
    (9, 9)
    """
    before: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, part, _first, last, max_ts in chunks:
        before.setdefault((topic, part), []).append((last, max_ts))
    out: dict[Any, list[Rec]] = {}
    for gk, recs in groups.items():
        resolved = []
        for rec in recs:
            tp = (rec.topic, rec.partition)
            st = rec.stream_time if rec.stream_time is not None else rec.ts
            bt = rec.time_before  # what came before the record, as st (its own ts left out)
            prev = partition_times.get(tp)
            if prev is not None:
                if prev > st:
                    st = prev
                if bt is None or prev > bt:
                    bt = prev
            for last, max_ts in before.get(tp, ()):
                if last < rec.offset:
                    if max_ts > st:
                        st = max_ts
                    if bt is None or max_ts > bt:
                        bt = max_ts
            # most records already carry their times: copy only the ones that change
            same = st == rec.stream_time and bt == rec.time_before
            resolved.append(rec if same else rec._replace(stream_time=st, time_before=bt))
        out[gk] = resolved
    return out


def advance_partition_times(partition_times: dict[Any, int], chunks: list[Chunk]) -> None:
    """Fold this micro-batch's chunks into ``partition_times`` (in place)."""
    for topic, part, _first, _last, max_ts in chunks:
        tp = (topic, part)
        prev = partition_times.get(tp)
        if prev is None or max_ts > prev:
            partition_times[tp] = max_ts


def low_watermark(partition_times: dict[Any, int]) -> int | None:
    """The smallest partition time: no source partition can still deliver a record whose own
    partition time is below it. ``None`` before any record.
    """
    return min(partition_times.values(), default=None)
