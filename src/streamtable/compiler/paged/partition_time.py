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
from functools import partial
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamtable.compiler.pack_stage import STATE_PAGES, page_of
from streamtable.compiler.paged.records import Rec

#: Output of :class:`PartitionTimePack`: record rows (``value`` = a page's records as pickled
#: :data:`Segment` columns, read back by :func:`unpack_records`) and chunk-summary rows
#: (``chunks`` = pickled list of :data:`Chunk`), both per page.
PARTITION_TIME_DDL = "page int, value binary, chunks binary"

#: ``(topic, partition, first offset, last offset, max ts)`` of one task's range of a partition.
Chunk = tuple[str, int, int, int, int]

#: The records of one page from one source partition, as columns (plain lists, in offset
#: order): ``(topic, partition, keys, values, timestamps, offsets, seqs, olds or None,
#: stream times, times before)``. Columns pickle without a Python call per record, where
#: record tuples (``Rec``, a named tuple) made one per record to pickle and one to unpickle.
Segment = tuple[Any, ...]

#: The stream-time key of records without source coordinates (the output of another stateful
#: operator): they share one stream time, as the records of one Kafka Streams task do.
NO_PARTITION = ("", -1)

#: ``Rec`` from a plain tuple of its fields, without the named tuple's Python ``__new__``.
_rec = partial(tuple.__new__, Rec)


@dataclass(frozen=True)
class PartitionTimePack:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]`` for ``mapInArrow``.

    Like :class:`~.pack.KernelPack`, one row per page per Arrow batch holding that page's
    records (read back by :func:`unpack_records`), each record carrying in ``stream_time`` the
    largest timestamp of its partition's chunk up to and including it, and in ``time_before``
    the same before it (``None`` for the chunk's first record). After the task's last batch,
    one row per page with the summaries of every chunk the task read.

    The input must not have been shuffled since the Kafka source: a Spark task has to see each
    partition's records as a contiguous range in offset order. With ``single`` the records'
    coordinates are ignored and the operator has one stream time, the largest timestamp it has
    seen (for inputs that come out of another stateful operator). A record without a topic or
    partition counts as :data:`NO_PARTITION`'s, without an offset as offset 0.

    The per-record work (pages, running maxima, the order by page) is done on the batch's
    columns with numpy and pyarrow.

    >>> batch = pa.RecordBatch.from_pylist([
    ...     dict(key=b"a", value=b"1", ts=5, partition=0, offset=10, seq=0, topic="t"),
    ...     dict(key=b"a", value=b"2", ts=3, partition=0, offset=11, seq=0, topic="t")])
    >>> out = list(PartitionTimePack()(iter([batch])))
    >>> groups = {}
    >>> unpack_records(out[0].column(1)[0].as_py(), groups)
    >>> [(r.ts, r.offset, r.stream_time, r.time_before) for r in groups[b"a"]]
    [(5, 10, 5, None), (3, 11, 5, 5)]
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
        n = batch.num_rows
        col = dict(zip(batch.schema.names, batch.columns, strict=True))
        if col["ts"].null_count:
            raise ValueError(
                "PartitionTimePack: a record without a timestamp reached a windowed operator "
                "(every record read from Kafka has one): this is a bug in streamtable, please "
                "report it"
            )
        keys = col["key"].to_pylist()
        pages = np.fromiter((0 if k is None else page_of(k) for k in keys), np.int64, n)
        ts = col["ts"].to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        parts, ids, offsets = self._partitions(col, n)
        stream_times = np.empty(n, np.int64)
        before = np.empty(n, np.int64)
        no_before = np.zeros(n, np.bool_)
        for g, (topic, part) in enumerate(parts):
            rows = np.flatnonzero(ids == g) if len(parts) > 1 else slice(None)
            times = np.maximum.accumulate(ts[rows])
            offs = offsets[rows]
            chunk = chunks.get((topic, part))
            prior = np.empty_like(times)
            prior[1:] = times[:-1]
            if chunk is None:
                chunk = chunks[(topic, part)] = [int(offs[0]), int(offs[0]), int(times[0])]
                mask = np.zeros(len(times), np.bool_)
                mask[0] = True
                prior[0] = 0
                no_before[rows] = mask
            else:
                np.maximum(times, chunk[2], out=times)
                prior[1:] = times[:-1]
                prior[0] = chunk[2]
            chunk[1] = max(chunk[1], int(offs.max()))
            chunk[2] = int(times[-1])
            stream_times[rows] = times
            before[rows] = prior
        # rows by page, then by source partition, each in its input (offset) order
        order = np.lexsort((ids, pages)) if len(parts) > 1 else np.argsort(pages, kind="stable")
        take = pa.array(order)
        by_page = pages[order]
        by_part = ids[order]
        cut = np.flatnonzero((np.diff(by_page) != 0) | (np.diff(by_part) != 0)) + 1
        starts = [0, *cut.tolist()]
        ends = [*cut.tolist(), n]
        lists = [
            col["key"].take(take).to_pylist(),
            col["value"].take(take).to_pylist(),
            ts[order].tolist(),
            offsets[order].tolist(),
            pc.fill_null(col["seq"], 0).take(take).to_pylist(),
            col["old"].take(take).to_pylist() if "old" in col else None,
            stream_times[order].tolist(),
            pa.array(before, mask=no_before).take(take).to_pylist(),
        ]
        segments: dict[int, list[Segment]] = {}
        for s, e in zip(starts, ends, strict=True):
            topic, part = parts[int(by_part[s])]
            segment = (topic, part, *(None if c is None else c[s:e] for c in lists))
            segments.setdefault(int(by_page[s]), []).append(segment)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(list(segments), pa.int32()),
                pa.array([pickle.dumps(g, protocol=5) for g in segments.values()], pa.binary()),
                pa.nulls(len(segments), pa.binary()),
            ],
            names=["page", "value", "chunks"],
        )

    def _partitions(
        self, col: dict[str, pa.Array], n: int
    ) -> tuple[list[tuple[str, int]], np.ndarray, np.ndarray]:
        """The batch's source partitions ``[(topic, partition)]`` in order of first
        appearance, each row's index into them, and each row's offset.
        """
        if self.single:
            return [NO_PARTITION], np.zeros(n, np.int64), np.zeros(n, np.int64)
        topics = pc.fill_null(col["topic"], NO_PARTITION[0])
        parts = pc.fill_null(col["partition"], NO_PARTITION[1]).to_numpy().astype(np.int64)
        offsets = pc.fill_null(col["offset"], 0).to_numpy().astype(np.int64)
        encoded = pc.dictionary_encode(topics)
        names = encoded.dictionary.to_pylist()
        codes = encoded.indices.to_numpy().astype(np.int64)
        low = int(parts.min())
        combined = codes * (int(parts.max()) - low + 1) + (parts - low)
        unique, first, ids = np.unique(combined, return_index=True, return_inverse=True)
        if len(unique) == 1:
            return [(names[codes[0]], int(parts[0]))], np.zeros(n, np.int64), offsets
        rank = np.empty(len(unique), np.int64)
        rank[np.argsort(first)] = np.arange(len(unique))  # number them by first appearance
        found = [(names[codes[i]], int(parts[i])) for i in np.sort(first)]
        return found, rank[ids.reshape(-1)], offsets


def unpack_records(blob: bytes, groups: dict[Any, list[Rec]]) -> None:
    """Add a :class:`PartitionTimePack` record row's records to ``groups`` (``{group key:
    [Rec]}``), each key's in the row's order (offset order within a source partition).
    """
    for topic, part, keys, values, tss, offsets, seqs, olds, times, before in pickle.loads(blob):
        fields = zip(
            tss,
            repeat(topic),
            repeat(part),
            offsets,
            seqs,
            repeat(0),
            keys,
            values,
            repeat(None) if olds is None else olds,
            times,
            before,
        )
        for rec in map(_rec, fields):
            found = groups.get(rec[6])
            if found is None:
                groups[rec[6]] = [rec]
            else:
                found.append(rec)


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
    # a partition read as one chunk, with no time from an earlier micro-batch: what the pack
    # stamped on its records is its partition's time already (most micro-batches)
    settled = {tp for tp, runs in before.items() if len(runs) == 1 and tp not in partition_times}
    out: dict[Any, list[Rec]] = {}
    for gk, recs in groups.items():
        resolved = []
        for rec in recs:
            tp = (rec.topic, rec.partition)
            if tp in settled and rec.stream_time is not None:
                resolved.append(rec)
                continue
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
