"""Kafka Streams' metrics, computed from Spark's query progress (``KafkaStreams.metrics()``).

Kafka Streams reports ``Map<MetricName, Metric>``: a name (``process-rate``), a group
(``stream-thread-metrics``) and tags (``thread-id``, ``task-id``, ...). streamtable reports a
list of :class:`Metric` with the same three parts, computed from what each Spark streaming query
reports after every micro-batch (:mod:`streamtable.runtime.progress`). Where Kafka Streams has a
metric with the same meaning, it has the same name and group; tags differ, because a Spark query
is the unit streamtable runs (one query per sink, see ``docs/sub-topologies.md``): the tag
``query`` is the Spark query name (``<application.id>-<sink node>``), where Kafka Streams has
``thread-id`` and ``task-id``. Metrics of streamtable's own are in the group
``streamtable-metrics``.

A name ending in ``-total`` is a cumulative count since the application started (a counter);
every other metric is a gauge. Times are in milliseconds, sizes in bytes, rates per second.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import NamedTuple

from streamtable.runtime.progress import (
    RATE_WINDOW_MS,
    SAMPLES_WINDOW_MS,
    BatchFigures,
    QueryFigures,
)

#: Kafka Streams' metric groups (``StreamsMetricsImpl``), the consumer's, and streamtable's own.
THREAD_GROUP = "stream-thread-metrics"
TASK_GROUP = "stream-task-metrics"
STATE_GROUP = "stream-state-metrics"
CONSUMER_FETCH_GROUP = "consumer-fetch-manager-metrics"
STREAMTABLE_GROUP = "streamtable-metrics"

#: Drop reasons of the records Kafka Streams' exception handlers send to the dead-letter topic.
DEAD_LETTER_REASONS = ("deserialization", "processing")


class Metric(NamedTuple):
    """One metric of :meth:`KafkaStreams.metrics`: Kafka Streams' ``MetricName`` and value.

    A named tuple, so ``json.dumps(app.metrics())`` works (each metric becomes a list).

    Attributes
    ----------
    name : str
        Kafka Streams' metric name, e.g. ``"process-rate"``. A name ending in ``-total`` is a
        cumulative count (a Prometheus counter); every other metric is a gauge.
    group : str
        Kafka's metric group, e.g. ``"stream-thread-metrics"``; ``"streamtable-metrics"`` for
        streamtable's own.
    tags : dict[str, str]
        Which query, partition, store or reason the value is for (``{"query": ...}``).
    value : float
        The value; ``nan`` for an average or maximum without any sample yet (as Kafka's).
    description : str
        What the value measures, and its unit.
    """

    name: str
    group: str
    tags: dict[str, str]
    value: float
    description: str

    @property
    def is_counter(self) -> bool:
        """Whether the value is a cumulative count (the name ends in ``-total``)."""
        return self.name.endswith("-total")


def _avg(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _max(values: list[float]) -> float:
    return max(values) if values else math.nan


def _in_window(
    batches: Iterable[BatchFigures], now_ms: int, span_ms: int = RATE_WINDOW_MS
) -> list[BatchFigures]:
    """The batches that ended in the last ``span_ms`` (default: the rates' window): a batch's
    figures count from its end, when Spark reports them (a batch longer than the window still
    counts, for the window after it).
    """
    start = now_ms - span_ms
    return [b for b in batches if b.ended_ms is not None and start <= b.ended_ms <= now_ms]


def with_end_offsets(
    queries: Iterable[QueryFigures], ends: Mapping[tuple[str, int], int]
) -> list[QueryFigures]:
    """``queries`` with each source partition's end offset raised to ``ends`` (the broker's
    end offsets now), so ``records-lag`` counts the records written since the last
    micro-batch was planned, as a Kafka consumer's lag counts those since its last fetch.

    >>> q = QueryFigures("q", reached={("t", 0): 5}, latest={("t", 0): 5})
    >>> with_end_offsets([q], {("t", 0): 9, ("u", 0): 3})[0].latest
    {('t', 0): 9}
    """
    out = []
    for q in queries:
        latest = dict(q.latest)
        for tp in q.reached:
            end = ends.get(tp)
            if end is not None and end > latest.get(tp, -1):
                latest[tp] = end
        out.append(replace(q, latest=latest))
    return out


def query_metrics(q: QueryFigures, now_ms: int) -> list[Metric]:
    """Kafka Streams' thread, task, consumer and state-store metrics of one query.

    Parameters
    ----------
    q : QueryFigures
        From :meth:`ProgressLedger.snapshot`.
    now_ms : int
        The current time, ms since the epoch (the end of the rates' window).

    Returns
    -------
    list of Metric
        Tagged ``{"query": q.name}`` (plus ``topic``/``partition``, ``state-id`` or
        ``reason``); see ``docs/metrics.md`` for the list.

    Notes
    -----
    Rates count what the batches that *ended* in the last 30 s (Kafka's default
    ``metrics.sample.window.ms``) did, divided by 30 s. Averages and maxima are over the
    batches that ended in the last 60 s
    (:data:`~streamtable.runtime.progress.SAMPLES_WINDOW_MS`), ``nan`` without one, as Kafka's
    ``Avg`` and ``Max`` forget a sample 2 × 30 s after its last event.

    ``process-latency-*`` follows Kafka Streams' thread-level definition: a stream thread
    records the time of one processing loop divided by the records it processed in it.
    Here a micro-batch is the loop: its processing time (Spark's ``durationMs.addBatch``, the
    batch's Spark job with the sink's writes) divided by its input records, i.e. the average
    time spent per record, in ms. Batches without input records (Spark's no-data batches that
    only advance the watermark) are left out, as Kafka records nothing for an empty loop.

    ``commit-latency-*`` is the time of a batch's commit steps: writing its offsets to the
    checkpoint's offset log (``walCommit``) and its entry in the commit log
    (``commitOffsets``). The state stores' commits and, under ``exactly_once_v2``, the Kafka
    transactions are committed inside the batch's tasks, so they are part of ``addBatch``.
    """
    tags = {"query": q.name}
    executed = list(q.recent)
    window = _in_window(executed, now_ms)
    sampled = _in_window(executed, now_ms, SAMPLES_WINDOW_MS)
    per_record = [b.process_ms / b.input_rows for b in sampled if b.input_rows > 0]
    sizes = [float(b.input_rows) for b in sampled if b.input_rows > 0]
    commits = [float(b.commit_ms) for b in sampled]
    seconds = RATE_WINDOW_MS / 1000.0
    out = [
        Metric(
            "process-total",
            THREAD_GROUP,
            tags,
            float(q.input_rows),
            "Records processed (read from the query's sources), in total.",
        ),
        Metric(
            "process-rate",
            THREAD_GROUP,
            tags,
            sum(b.input_rows for b in window) / seconds,
            "Records processed per second over the last 30 s.",
        ),
        Metric(
            "process-latency-avg",
            THREAD_GROUP,
            tags,
            _avg(per_record),
            "Average over the micro-batches of the last 60 s of the batch's processing time "
            "(Spark's addBatch) divided by its input records, in ms per record.",
        ),
        Metric(
            "process-latency-max",
            THREAD_GROUP,
            tags,
            _max(per_record),
            "Maximum over the micro-batches of the last 60 s of the batch's processing time "
            "divided by its input records, in ms per record.",
        ),
        Metric(
            "process-records-avg",
            THREAD_GROUP,
            tags,
            _avg(sizes),
            "Average number of records processed by a micro-batch with input in the last 60 s.",
        ),
        Metric(
            "process-records-max",
            THREAD_GROUP,
            tags,
            _max(sizes),
            "Maximum number of records processed by a micro-batch in the last 60 s.",
        ),
        Metric(
            "commit-total",
            THREAD_GROUP,
            tags,
            float(q.batches),
            "Micro-batches committed (offsets, state and output), in total.",
        ),
        Metric(
            "commit-rate",
            THREAD_GROUP,
            tags,
            len(window) / seconds,
            "Micro-batches committed per second over the last 30 s.",
        ),
        Metric(
            "commit-latency-avg",
            THREAD_GROUP,
            tags,
            _avg(commits),
            "Average over the micro-batches of the last 60 s of the time to commit the batch "
            "to the checkpoint (Spark's walCommit + commitOffsets), in ms.",
        ),
        Metric(
            "commit-latency-max",
            THREAD_GROUP,
            tags,
            _max(commits),
            "Maximum over the micro-batches of the last 60 s of the time to commit the batch "
            "to the checkpoint, in ms.",
        ),
    ]
    dropped_in_window: dict[str, int] = {}
    for b in window:
        for reason, n in b.dropped:
            dropped_in_window[reason] = dropped_in_window.get(reason, 0) + n
    for reason in sorted(q.dropped):
        rtags = {**tags, "reason": reason}
        out.append(
            Metric(
                "dropped-records-total",
                TASK_GROUP,
                rtags,
                float(q.dropped[reason]),
                "Records dropped (skipped), in total, by reason.",
            )
        )
        out.append(
            Metric(
                "dropped-records-rate",
                TASK_GROUP,
                rtags,
                dropped_in_window.get(reason, 0) / seconds,
                "Records dropped per second over the last 30 s, by reason.",
            )
        )
    lags = []
    for (topic, partition), reached in sorted(q.reached.items()):
        latest = q.latest.get((topic, partition))
        if latest is None:
            continue
        lag = max(latest - reached, 0)
        lags.append(lag)
        out.append(
            Metric(
                "records-lag",
                CONSUMER_FETCH_GROUP,
                {**tags, "topic": topic, "partition": str(partition)},
                float(lag),
                "Records of the partition not yet processed: its end offset (the broker's "
                "when the metrics are read, else the one known when the last micro-batch "
                "was planned) minus the offset the last micro-batch read up to.",
            )
        )
    if lags:
        out.append(
            Metric(
                "records-lag-max",
                CONSUMER_FETCH_GROUP,
                tags,
                float(max(lags)),
                "The largest records-lag of the query's partitions.",
            )
        )
    for store in q.stores:
        stags = {**tags, "state-id": f"{store.operator}-{store.index}"}
        out.append(
            Metric(
                "estimate-num-keys",
                STATE_GROUP,
                stags,
                float(store.num_rows),
                "Rows in the stateful operator's state store (Spark's numRowsTotal: one per "
                "key for aggregations), after the last micro-batch.",
            )
        )
        out.append(
            Metric(
                "memory-used-bytes",
                STATE_GROUP,
                stags,
                float(store.memory_bytes),
                "Memory used by the operator's state store instances (Spark's "
                "memoryUsedBytes), in bytes.",
            )
        )
        if store.sst_bytes is not None:
            out.append(
                Metric(
                    "total-sst-files-size",
                    STATE_GROUP,
                    stags,
                    float(store.sst_bytes),
                    "Size of the operator's RocksDB SST files, in bytes.",
                )
            )
    return out


def application_metrics(
    queries: Iterable[QueryFigures],
    *,
    sink_rejected: Mapping[str, int] | None = None,
    aborted_batches: Mapping[str, int] | None = None,
    replayed: int = 0,
    dead_letter_topic: str | None = None,
    now_ms: int | None = None,
) -> list[Metric]:
    """Every metric of an application: :func:`query_metrics` of each query, plus
    streamtable's own.

    Parameters
    ----------
    queries : iterable of QueryFigures
        From :meth:`ProgressLedger.snapshot`.
    sink_rejected : mapping, optional
        Query name -> records its sink skipped under ``production.exception.handler=continue``
        (counted as dropped, reason ``production``).
    aborted_batches : mapping, optional
        Query name -> micro-batches whose exactly-once write failed and was aborted.
    replayed : int
        Input records of micro-batches an earlier run left unfinished.
    dead_letter_topic : str, optional
        ``errors.dead.letter.queue.topic.name``; with it, ``dead-letter-records-total``.
    now_ms : int, optional
        The current time in ms since the epoch (default: the clock).

    Returns
    -------
    list of Metric
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    rejected = dict(sink_rejected or {})
    aborted = dict(aborted_batches or {})
    out: list[Metric] = []
    dead_letters = 0
    for q in queries:
        extra = rejected.pop(q.name, 0)
        if extra:
            dropped = dict(q.dropped)
            dropped["production"] = dropped.get("production", 0) + extra
            q = QueryFigures(
                q.name,
                q.input_rows,
                q.batches,
                dropped,
                q.recent,
                q.reached,
                q.latest,
                q.stores,
            )
        out.extend(query_metrics(q, now))
        dead_letters += sum(q.dropped.get(r, 0) for r in DEAD_LETTER_REASONS)
    for name, n in sorted(rejected.items()):  # a sink whose query reported no batch yet
        if n:
            out.append(
                Metric(
                    "dropped-records-total",
                    TASK_GROUP,
                    {"query": name, "reason": "production"},
                    float(n),
                    "Records dropped (skipped), in total, by reason.",
                )
            )
    for name, n in sorted(aborted.items()):
        out.append(
            Metric(
                "aborted-batches-total",
                STREAMTABLE_GROUP,
                {"query": name},
                float(n),
                "Micro-batches whose exactly-once write to Kafka failed: the Kafka "
                "transactions its tasks had opened were aborted (nothing of them visible to "
                "read_committed consumers) and the batch is run again.",
            )
        )
    out.append(
        Metric(
            "replayed-records-total",
            STREAMTABLE_GROUP,
            {},
            float(replayed),
            "Input records of micro-batches an earlier run left unfinished, processed again "
            "by this run.",
        )
    )
    if dead_letter_topic is not None:
        out.append(
            Metric(
                "dead-letter-records-total",
                STREAMTABLE_GROUP,
                {"topic": dead_letter_topic},
                float(dead_letters),
                "Records the deserialization and processing exception handlers skipped and "
                "sent to the dead-letter topic, in total.",
            )
        )
    return out
