"""What ``streamtable run`` shows while an application runs: one progress line per query.

Figures come from Spark's progress report of each query's last completed micro-batch
(``StreamingQuery.lastProgress``):

- ``records/s``: input records processed per second of the batch (``processedRowsPerSecond``);
- ``lag``: records behind the newest offsets the batch saw (per partition: latest offset minus
  the offset the batch read to, summed) — Kafka's consumer lag at the batch's start;
- ``batch``: the batch's wall time in ms (``durationMs.triggerExecution``);
- ``state``: rows and bytes of the query's state stores (``stateOperators``).

Modes: ``live`` (a terminal: rich's live table, one row per query), ``lines`` (not a terminal:
a plain line per query with a new batch, at most every ``interval_s``), ``json`` (one JSON
object per completed batch, for scripts) and ``quiet`` (nothing).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from streamtable.runtime.progress import end_offsets, executed, latest_offsets, unseen_progress

__all__ = ["ProgressLine", "ProgressReporter", "batch_figures"]

Mode = Literal["live", "lines", "json", "quiet"]


@dataclass(frozen=True)
class ProgressLine:
    """One query's last completed micro-batch, as the progress line shows it.

    Attributes
    ----------
    query : str
        The query's name (a sink of the topology, or an internal query).
    batch : int
        Spark's micro-batch id.
    input_records : int
        Records the batch read.
    records_per_s : float
        Records processed per second of the batch.
    lag : int or None
        Records behind the newest offsets the batch saw, over all partitions it reads (None
        when the source reports no offsets).
    batch_ms : int
        The batch's wall time, ms.
    state_rows : int
        Rows in the query's state stores after the batch.
    state_bytes : int
        Memory the state stores use, bytes.
    """

    query: str
    batch: int
    input_records: int
    records_per_s: float
    lag: int | None
    batch_ms: int
    state_rows: int
    state_bytes: int

    def line(self) -> str:
        """The figures as one line of text."""
        lag = "?" if self.lag is None else f"{self.lag:,}"
        return (
            f"{self.query}: batch {self.batch}, {self.records_per_s:,.0f} records/s, "
            f"lag {lag}, batch {self.batch_ms:,} ms, state {self.state_rows:,} rows "
            f"({_size(self.state_bytes)})"
        )


def _size(n: int) -> str:
    """``n`` bytes in B, KiB, MiB or GiB.

    >>> _size(512), _size(3 * 1024 * 1024 + 100)
    ('512 B', '3.0 MiB')
    """
    if n < 1024:
        return f"{n:,} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def batch_figures(progress: Any) -> ProgressLine:
    """The figures of a ``StreamingQueryProgress``.

    Parameters
    ----------
    progress : pyspark.sql.streaming.listener.StreamingQueryProgress
        A query's progress report.

    Returns
    -------
    ProgressLine
    """
    latest, reached = latest_offsets(progress), end_offsets(progress)
    both = latest.keys() & reached.keys()
    lag = sum(max(0, latest[tp] - reached[tp]) for tp in both) if both else None
    states = progress.stateOperators or []
    return ProgressLine(
        query=str(progress.name or progress.id),
        batch=int(progress.batchId),
        input_records=int(progress.numInputRows or 0),
        records_per_s=float(progress.processedRowsPerSecond or 0.0),
        lag=lag,
        batch_ms=int((progress.durationMs or {}).get("triggerExecution", 0)),
        state_rows=sum(int(s.numRowsTotal or 0) for s in states),
        state_bytes=sum(int(s.memoryUsedBytes or 0) for s in states),
    )


class ProgressReporter:
    """Shows the queries' progress in one of the modes of this module.

    Parameters
    ----------
    mode : {"live", "lines", "json", "quiet"}
        How to show it (see the module docstring).
    echo : callable
        Prints one line (``lines`` and ``json`` modes).
    interval_s : float
        ``lines`` mode: the least time between two lines of the same query, seconds.
    console : rich.console.Console, optional
        ``live`` mode: where the table is drawn (default: rich's console on stdout).
    """

    def __init__(
        self,
        mode: Mode,
        echo: Callable[[str], None],
        interval_s: float = 10.0,
        console: Any = None,
    ) -> None:
        self.mode = mode
        self._console = console
        self._echo = echo
        self._interval = interval_s
        self._seen: dict[str, int] = {}
        self._read: dict[str, tuple[int, str]] = {}  # json mode: query id -> newest report read
        self._shown_at: dict[str, float] = {}
        self._latest: dict[str, ProgressLine] = {}
        self._shown_batch: dict[str, int] = {}
        self._live: Any = None

    def update(self, queries: Iterable[Any]) -> None:
        """Show what the queries completed since the last call."""
        if self.mode == "quiet":
            return
        for q in queries:
            if self.mode == "json":
                # every batch completed since the last call, each converted once
                reports = unseen_progress(q, self._read)
                if reports:
                    newest = reports[-1]
                    self._read[str(newest.id)] = (int(newest.batchId), str(newest.timestamp))
            else:
                reports = [q.lastProgress]
            for progress in reports:
                # an idle report carries the next batch's id: not a batch
                if progress is None or not executed(progress):
                    continue
                figures = batch_figures(progress)
                if self._seen.get(figures.query, -1) >= figures.batch:
                    continue
                self._seen[figures.query] = figures.batch
                self._latest[figures.query] = figures
                if self.mode == "json":
                    self._echo(json.dumps(asdict(figures)))
                elif self.mode == "lines":
                    now = time.monotonic()
                    if now - self._shown_at.get(figures.query, -self._interval) >= self._interval:
                        self._shown_at[figures.query] = now
                        self._shown_batch[figures.query] = figures.batch
                        self._echo(figures.line())
        if self.mode == "live":
            self._refresh_live()

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, pad_edge=False)
        for column in ("query", "batch", "records/s", "lag", "batch ms", "state rows", "state"):
            table.add_column(column, justify="left" if column == "query" else "right")
        for f in self._latest.values():
            table.add_row(
                f.query,
                str(f.batch),
                f"{f.records_per_s:,.0f}",
                "?" if f.lag is None else f"{f.lag:,}",
                f"{f.batch_ms:,}",
                f"{f.state_rows:,}",
                _size(f.state_bytes),
            )
        return table

    def _refresh_live(self) -> None:
        if not self._latest:
            return
        if self._live is None:
            from rich.live import Live

            self._live = Live(
                self._table(), console=self._console, auto_refresh=False, transient=False
            )
            self._live.start()
        self._live.update(self._table(), refresh=True)

    def close(self) -> None:
        """Stop the live display (its last state stays on the terminal); in ``lines`` mode,
        show each query's last batch if its line was held back by the interval.
        """
        if self.mode == "lines":
            for f in self._latest.values():
                if self._shown_batch.get(f.query) != f.batch:
                    self._shown_batch[f.query] = f.batch
                    self._echo(f.line())
        if self._live is not None:
            self._live.stop()
            self._live = None
