"""Reading Spark's query progress: offsets reached, records processed and dropped, batch times."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from streamtable.compiler.metrics_names import METRIC_PREFIX


def end_offsets(progress: Any) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> end offset`` of a ``StreamingQueryProgress``'s Kafka sources
    (the next offset each partition will be read from).

    A query can read one topic through several sources (a stream merged with, or joined to, a
    branch of itself): each source fetches its own end of the partition, so their offsets may
    differ. A partition's offset here is the smallest, the one every source has read up to.
    """
    out: dict[tuple[str, int], int] = {}
    for source in progress.sources:
        for tp, off in kafka_offsets(source.endOffset).items():
            out[tp] = min(off, out.get(tp, off))
    return out


def latest_offsets(progress: Any) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> latest offset`` of a ``StreamingQueryProgress``'s Kafka sources:
    the end of each partition when the micro-batch was planned (the largest over the sources
    that read it).
    """
    out: dict[tuple[str, int], int] = {}
    for source in progress.sources:
        for tp, off in kafka_offsets(source.latestOffset).items():
            out[tp] = max(off, out.get(tp, off))
    return out


def kafka_offsets(offsets: Any) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> offset`` of a Kafka source's offsets in a progress report
    (``{"topic": {"0": 21}}``, as a dict or its JSON); empty for other sources.

    >>> kafka_offsets('{"in": {"0": 21, "1": 29}}')
    {('in', 0): 21, ('in', 1): 29}
    >>> kafka_offsets(None), kafka_offsets("null")
    ({}, {})
    """
    if isinstance(offsets, str):
        try:
            offsets = json.loads(offsets)
        except ValueError:
            return {}
    out: dict[tuple[str, int], int] = {}
    if not isinstance(offsets, dict):
        return out
    for topic, parts in offsets.items():
        if isinstance(parts, dict):
            for p, off in parts.items():
                try:
                    out[(str(topic), int(p))] = int(off)
                except (TypeError, ValueError):
                    continue
    return out


def caught_up(query: Any, targets: dict[tuple[str, int], int]) -> bool:
    """True when ``query``'s last completed micro-batch read every partition up to ``targets``.

    A progress report is posted only after the batch's output and checkpoint are committed,
    so reaching the target offsets there means processed *and* committed. Partitions the query
    does not read are ignored.
    """
    progress = query.lastProgress
    if progress is None:
        return False
    reached = end_offsets(progress)
    read_topics = {t for t, _ in reached}
    for (topic, part), target in targets.items():
        if topic not in read_topics:
            continue
        if reached.get((topic, part), 0) < target:
            return False
    return bool(read_topics) or not targets


def executed(progress: Any) -> bool:
    """Whether ``progress`` reports an executed micro-batch (no-data batches included).

    Spark (4.3, ``ProgressReporter.updateIdleness``) also posts a report when a trigger finds
    no new data, at most every ``spark.sql.streaming.noDataProgressEventInterval`` (10 s): it
    has no ``addBatch`` phase and carries the id the *next* batch will have, so a reader that
    keys on batch ids must not take it for that batch.
    """
    return "addBatch" in (progress.durationMs or {})


def unseen_progress(query: Any, read: Mapping[str, tuple[int, str]]) -> list[Any]:
    """``query``'s recent progress reports newer than the newest one ``read`` of its query id,
    oldest first.

    PySpark's ``StreamingQuery.recentProgress`` converts every report Spark keeps (up to
    ``spark.sql.streaming.numRecentProgressUpdates``, 100 by default) with Py4J calls and a
    JSON round trip each, at every call: 34 ms for 99 reports of a trivial query on this
    project's 2-core machines, and a monitor calls it five times a second. This reads the
    batch ids (and, at the newest batch id read, the timestamps) of the newest reports only,
    back to the newest one read, and converts the newer ones. A query object without a JVM
    query (a test's stand-in) is read through ``recentProgress``.

    Parameters
    ----------
    query : StreamingQuery
        A running or stopped query.
    read : Mapping[str, tuple[int, str]]
        Query id -> ``(batchId, timestamp)`` of the newest report already read (the caller
        records it from the last report returned).

    Returns
    -------
    list of StreamingQueryProgress
        Idle reports included (see :func:`executed`).
    """
    jsq = getattr(query, "_jsq", None)
    if jsq is None:
        return [
            p
            for p in query.recentProgress
            if (int(p.batchId), str(p.timestamp)) > read.get(str(p.id), (-2, ""))
        ]
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    # timestamps are ISO-8601 UTC with milliseconds: their text order is their time order
    after = read.get(jsq.id().toString(), (-2, ""))
    reports = jsq.recentProgress()  # a Java array: each element is fetched on its own
    unseen = []
    for i in range(len(reports) - 1, -1, -1):
        report = reports[i]
        batch = report.batchId()
        if batch < after[0] or (batch == after[0] and report.timestamp() <= after[1]):
            break
        unseen.append(report)
    return [StreamingQueryProgress.fromJson(json.loads(r.json())) for r in reversed(unseen)]


#: Executed micro-batches kept per query at least (Spark keeps as many progress reports by
#: default, ``spark.sql.streaming.numRecentProgressUpdates``); batches of the last
#: :data:`SAMPLES_WINDOW_MS` are kept too, for the rates, averages and maxima.
RECENT_BATCHES = 100

#: Window of the rates, in ms: Kafka's ``metrics.sample.window.ms`` default.
RATE_WINDOW_MS = 30_000

#: Window of the averages and maxima, in ms: Kafka's metrics keep a sample of an average or
#: maximum until ``metrics.num.samples`` (2) × ``metrics.sample.window.ms`` after its last
#: event (``SampledStat.purgeObsoleteSamples``).
SAMPLES_WINDOW_MS = 2 * RATE_WINDOW_MS


@dataclass(frozen=True, slots=True)
class BatchFigures:
    """What one executed micro-batch of a query reported.

    Attributes
    ----------
    batch_id : int
    started_ms : int or None
        When the batch's trigger started (ms since the epoch; the progress ``timestamp``).
    ended_ms : int or None
        When it ended: ``started_ms`` plus ``durationMs.triggerExecution`` (its figures are
        known from then on).
    input_rows : int
        Records read from the query's sources (``numInputRows``).
    process_ms : int
        ``durationMs.addBatch``: running the batch's Spark job, sink writes included.
    commit_ms : int
        ``durationMs.walCommit + durationMs.commitOffsets``: writing the batch's offsets to the
        checkpoint's offset log before the job and its commit log entry after it.
    dropped : tuple of (str, int)
        Records dropped in the batch, by reason (observed metrics).
    """

    batch_id: int
    started_ms: int | None
    input_rows: int
    process_ms: int
    commit_ms: int
    dropped: tuple[tuple[str, int], ...] = ()
    ended_ms: int | None = None


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """One stateful operator of a query, after its last executed micro-batch
    (``StreamingQueryProgress.stateOperators[index]``).
    """

    operator: str
    index: int
    num_rows: int
    memory_bytes: int
    sst_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class QueryFigures:
    """A query's figures since the ledger first saw it (a snapshot; see :class:`ProgressLedger`).

    Attributes
    ----------
    name : str
        The Spark query name (``<application.id>-<sink node>``).
    input_rows, batches : int
        Records read and micro-batches executed (committed), in total.
    dropped : dict[str, int]
        Records dropped, by reason, in total.
    recent : tuple of BatchFigures
        The last executed batches (at least :data:`RECENT_BATCHES`, and those of the last
        :data:`SAMPLES_WINDOW_MS`), oldest first.
    reached, latest : dict[(str, int), int]
        Per Kafka source partition, after the last executed batch: the offset read up to
        (``endOffset``), and the partition's end when that batch was planned
        (``latestOffset``).
    stores : tuple of StoreFigures
        The query's stateful operators after its last executed batch.
    """

    name: str
    input_rows: int = 0
    batches: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    recent: tuple[BatchFigures, ...] = ()
    reached: dict[tuple[str, int], int] = field(default_factory=dict)
    latest: dict[tuple[str, int], int] = field(default_factory=dict)
    stores: tuple[StoreFigures, ...] = ()


def parse_timestamp(text: Any) -> int | None:
    """Milliseconds since the epoch of a progress ``timestamp`` (ISO 8601, UTC).

    >>> parse_timestamp("1970-01-01T00:00:01.500Z")
    1500
    >>> parse_timestamp(None) is None
    True
    """
    if not isinstance(text, str):
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _dropped(progress: Any) -> dict[str, int]:
    dropped: dict[str, int] = {}
    for name, row in (progress.observedMetrics or {}).items():
        if not name.startswith(METRIC_PREFIX):
            continue
        for reason, n in row.asDict().items():
            if n:
                dropped[reason] = dropped.get(reason, 0) + int(n)
    return dropped


def _stores(progress: Any) -> tuple[StoreFigures, ...]:
    out = []
    for i, op in enumerate(progress.stateOperators or []):
        custom = op.customMetrics or {}
        sst = custom.get("rocksdbSstFileSize")
        out.append(
            StoreFigures(
                operator=str(op.operatorName),
                index=i,
                num_rows=int(op.numRowsTotal or 0),
                memory_bytes=int(op.memoryUsedBytes or 0),
                sst_bytes=None if sst is None else int(sst),
            )
        )
    return tuple(out)


class _Running:
    """The mutable figures of one query inside the ledger."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.input_rows = 0
        self.batches = 0
        self.dropped: dict[str, int] = {}
        self.recent: deque[BatchFigures] = deque()
        self.reached: dict[tuple[str, int], int] = {}
        self.latest: dict[tuple[str, int], int] = {}
        self.stores: tuple[StoreFigures, ...] = ()

    def add(self, progress: Any) -> None:
        rows = int(progress.numInputRows or 0)
        dropped = _dropped(progress)
        self.input_rows += rows
        for reason, n in dropped.items():
            self.dropped[reason] = self.dropped.get(reason, 0) + n
        durations = progress.durationMs or {}
        self.batches += 1
        started = parse_timestamp(progress.timestamp)
        batch = BatchFigures(
            batch_id=int(progress.batchId),
            started_ms=started,
            input_rows=rows,
            process_ms=int(durations.get("addBatch", 0)),
            commit_ms=int(durations.get("walCommit", 0)) + int(durations.get("commitOffsets", 0)),
            dropped=tuple(sorted(dropped.items())),
            ended_ms=None
            if started is None
            else started + int(durations.get("triggerExecution", 0)),
        )
        self.recent.append(batch)
        horizon = None if batch.ended_ms is None else batch.ended_ms - SAMPLES_WINDOW_MS
        while len(self.recent) > RECENT_BATCHES:
            oldest = self.recent[0].ended_ms
            if horizon is not None and oldest is not None and oldest >= horizon:
                break
            self.recent.popleft()
        self.reached = end_offsets(progress)
        self.latest = latest_offsets(progress)
        self.stores = _stores(progress)

    def snapshot(self) -> QueryFigures:
        return QueryFigures(
            name=self.name,
            input_rows=self.input_rows,
            batches=self.batches,
            dropped=dict(self.dropped),
            recent=tuple(self.recent),
            reached=dict(self.reached),
            latest=dict(self.latest),
            stores=self.stores,
        )


class ProgressLedger:
    """Accumulates the per-batch figures of every query (Spark keeps only recent progress).

    :meth:`update` is called often (the application's monitor thread, every
    :meth:`KafkaStreams.metrics` call); each executed batch is counted once: per query id,
    only batches after the last one counted (a restarted query keeps its id and continues its
    batch ids). Idle reports are read and not counted (see :func:`executed`).
    """

    def __init__(self) -> None:
        self._last: dict[str, int] = {}  # query id -> last executed batch counted
        self._read: dict[str, tuple[int, str]] = {}  # query id -> newest report read
        self._queries: dict[str, _Running] = {}
        self._lock = threading.Lock()

    def update(self, queries: list[Any]) -> None:
        """Record the batches of ``queries`` not seen yet."""
        with self._lock:
            for q in queries:
                for p in unseen_progress(q, self._read):
                    qid, batch = str(p.id), int(p.batchId)
                    self._read[qid] = (batch, str(p.timestamp))
                    if not executed(p) or batch <= self._last.get(qid, -1):
                        continue
                    self._last[qid] = batch
                    name = str(p.name or qid)
                    running = self._queries.get(name)
                    if running is None:
                        running = self._queries[name] = _Running(name)
                    running.add(p)

    def totals(self) -> tuple[int, dict[str, int]]:
        """Records read by all queries, and dropped records by reason."""
        with self._lock:
            processed = 0
            dropped: dict[str, int] = {}
            for q in self._queries.values():
                processed += q.input_rows
                for reason, c in q.dropped.items():
                    dropped[reason] = dropped.get(reason, 0) + c
            return processed, dropped

    def snapshot(self) -> list[QueryFigures]:
        """Every query's figures, by query name."""
        with self._lock:
            return [self._queries[n].snapshot() for n in sorted(self._queries)]
