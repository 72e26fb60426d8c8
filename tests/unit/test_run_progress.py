"""``streamtable run``'s progress display, from Spark progress reports (no JVM: the reports are
plain objects with the fields of ``StreamingQueryProgress``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from streamtable._run_progress import ProgressLine, ProgressReporter, batch_figures

pytestmark = pytest.mark.unit


def progress(batch: int, *, name: str = "counts", rows: int = 100, latest=None, end=None):
    latest = {"in": {"0": 150, "1": 80}} if latest is None else latest
    end = {"in": {"0": 120, "1": 80}} if end is None else end
    return SimpleNamespace(
        id="8d1c",
        name=name,
        timestamp=f"2026-01-01T00:00:{batch:02d}.000Z",
        batchId=batch,
        numInputRows=rows,
        processedRowsPerSecond=2500.4,
        durationMs={"triggerExecution": 1234, "addBatch": 1000},
        sources=[
            SimpleNamespace(latestOffset=json.dumps(latest), endOffset=json.dumps(end)),
        ],
        stateOperators=[
            SimpleNamespace(numRowsTotal=7000, memoryUsedBytes=3 * 1024 * 1024),
            SimpleNamespace(numRowsTotal=5, memoryUsedBytes=2048),
        ],
    )


class Query:
    def __init__(self, *reports):
        self.recentProgress = list(reports)

    @property
    def lastProgress(self):
        return self.recentProgress[-1] if self.recentProgress else None


def test_figures_of_a_batch_sum_lag_over_partitions_and_state_over_operators():
    f = batch_figures(progress(7))
    assert f == ProgressLine(
        query="counts",
        batch=7,
        input_records=100,
        records_per_s=2500.4,
        lag=30,  # partition 0: 150 - 120; partition 1: caught up
        batch_ms=1234,
        state_rows=7005,
        state_bytes=3 * 1024 * 1024 + 2048,
    )
    assert f.line() == (
        "counts: batch 7, 2,500 records/s, lag 30, batch 1,234 ms, state 7,005 rows (3.0 MiB)"
    )


def test_a_source_without_offsets_shows_an_unknown_lag():
    p = progress(1)
    p.sources = [SimpleNamespace(latestOffset=None, endOffset=None)]
    f = batch_figures(p)
    assert f.lag is None and "lag ?" in f.line()


def test_json_mode_prints_every_completed_batch_once():
    lines: list[str] = []
    reporter = ProgressReporter("json", lines.append)
    q = Query(progress(0), progress(1))
    reporter.update([q])
    q.recentProgress.append(progress(2))
    reporter.update([q])
    assert [json.loads(line)["batch"] for line in lines] == [0, 1, 2]
    assert json.loads(lines[0]) == {
        "query": "counts",
        "batch": 0,
        "input_records": 100,
        "records_per_s": 2500.4,
        "lag": 30,
        "batch_ms": 1234,
        "state_rows": 7005,
        "state_bytes": 3 * 1024 * 1024 + 2048,
    }


def test_an_idle_report_is_no_batch_and_does_not_hide_the_next_one():
    """Spark 4.3 gives an idle report (a trigger without new data) the next batch's id."""
    idle = progress(1, rows=0)
    idle.durationMs = {"triggerExecution": 2, "latestOffset": 2}
    idle.processedRowsPerSecond = 0.0
    idle.timestamp = "2026-01-01T00:00:00.500Z"
    executed = [progress(0), progress(1)]
    for mode in ("json", "lines"):
        lines: list[str] = []
        reporter = ProgressReporter(mode, lines.append, interval_s=0)
        q = Query(executed[0])
        reporter.update([q])
        q.recentProgress.append(idle)
        reporter.update([q])
        q.recentProgress.append(executed[1])
        reporter.update([q])
        if mode == "json":
            assert lines == [json.dumps(asdict(batch_figures(p))) for p in executed]
        else:
            assert lines == [batch_figures(p).line() for p in executed]


def test_lines_mode_holds_lines_back_for_the_interval_and_shows_the_last_on_close():
    lines: list[str] = []
    reporter = ProgressReporter("lines", lines.append, interval_s=3600)
    a, b = Query(progress(0)), Query(progress(4, name="audit"))
    reporter.update([a, b])
    a.recentProgress.append(progress(1))
    reporter.update([a, b])  # within the interval: held back
    assert [line.split(",")[0] for line in lines] == ["counts: batch 0", "audit: batch 4"]
    reporter.close()
    assert lines[-1].startswith("counts: batch 1,")
    assert len(lines) == 3  # audit's batch 4 was shown already


def test_quiet_mode_shows_nothing():
    lines: list[str] = []
    reporter = ProgressReporter("quiet", lines.append)
    reporter.update([Query(progress(0))])
    reporter.close()
    assert lines == []


def test_live_mode_draws_a_table_row_per_query_on_a_terminal():
    import io

    from rich.console import Console

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120, color_system=None)
    reporter = ProgressReporter("live", lambda line: None, console=console)
    reporter.update([Query(progress(3)), Query(progress(9, name="audit", rows=1))])
    reporter.close()
    drawn = screen.getvalue()
    for cell in ("query", "records/s", "lag", "counts", "audit", "2,500", "7,005", "3.0 MiB"):
        assert cell in drawn
