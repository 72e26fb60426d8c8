"""Reading Spark's query progress: offsets reached, records processed, records dropped."""

from __future__ import annotations

import json
import threading
from typing import Any

from streamtable.compiler.metrics_names import METRIC_PREFIX


def end_offsets(progress: Any) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> end offset`` of a ``StreamingQueryProgress``'s Kafka sources
    (the next offset each partition will be read from).
    """
    out: dict[tuple[str, int], int] = {}
    for source in progress.sources:
        end = source.endOffset
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if not isinstance(end, dict):
            continue
        for topic, parts in end.items():
            if isinstance(parts, dict):
                for p, off in parts.items():
                    out[(topic, int(p))] = int(off)
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


class ProgressLedger:
    """Accumulates per-batch figures of every query (Spark keeps only recent progress)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], tuple[int, dict[str, int]]] = {}
        self._lock = threading.Lock()

    def update(self, queries: list[Any]) -> None:
        """Record the batches of ``queries`` not seen yet."""
        with self._lock:
            for q in queries:
                for p in q.recentProgress:
                    key = (str(p.id), int(p.batchId))
                    if key in self._seen:
                        continue
                    dropped: dict[str, int] = {}
                    for name, row in (p.observedMetrics or {}).items():
                        if not name.startswith(METRIC_PREFIX):
                            continue
                        for reason, n in row.asDict().items():
                            if n:
                                dropped[reason] = dropped.get(reason, 0) + int(n)
                    self._seen[key] = (int(p.numInputRows or 0), dropped)

    def totals(self) -> tuple[int, dict[str, int]]:
        """Records read by all queries, and dropped records by reason."""
        with self._lock:
            processed = 0
            dropped: dict[str, int] = {}
            for n, d in self._seen.values():
                processed += n
                for reason, c in d.items():
                    dropped[reason] = dropped.get(reason, 0) + c
            return processed, dropped
