"""Comparing the counts of an audit topic: which windows lost (or duplicated) records.

:func:`audit_report` reads the audit topic to its end (``read_committed``), keeps the last
value of each key (a re-published batch counts once), sums the counts per role, topic,
partition and window, adds the ``sunk`` counts of Parquet file sinks, and compares them
(:func:`compare`).  ``streamtable audit`` prints the result.

The rule, per ``(topic, partition, window)`` of a topic that some consumer or sink reports:

- *produced* is the sum over every producer of the topic (several producers add up);
- every consumer (reporter of ``consumed``) of the topic must have read the produced count; a
  consumer that reported other windows of the topic but not this one read 0 of it;
- a file sink given for the topic must hold the produced count as well;
- without any producer report for the topic, the largest consumed count is the reference.

``missing`` is the reference minus the lowest count compared with it (negative when a
consumer or sink has more than was produced: duplicates, or a producer that does not report).
Topics that only producers report (nobody audited reads them) are listed, not compared.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from streamtable.errors import StreamtableError
from streamtable.platform.audit import (
    CONSUMED,
    PRODUCED,
    SUNK,
    AuditCounts,
    AuditError,
    AuditRecord,
)

__all__ = [
    "AuditReport",
    "WindowAudit",
    "audit_report",
    "compare",
    "read_audit_records",
    "sunk_counts",
]

log = logging.getLogger("streamtable")


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WindowAudit:
    """The counts of one ``(topic, partition, window)``.

    Attributes
    ----------
    topic, partition : str, int
    window_start : int
        Epoch ms of the window's start (one minute of event time).
    produced : int or None
        Sum over the topic's producers; None when no producer reports the topic.
    consumed : dict[str, int]
        Per consumer (reporter, the ``application.id`` of an application's source): records
        it read from the window (0 if it read none of it).
    sunk : int or None
        Rows the file sinks given for the topic committed; None when no sink is given.
    """

    topic: str
    partition: int
    window_start: int
    produced: int | None
    consumed: dict[str, int] = field(default_factory=dict)
    sunk: int | None = None

    @property
    def reference(self) -> int:
        """What every consumer and sink should hold: produced, else the largest consumed."""
        if self.produced is not None:
            return self.produced
        return max(self.consumed.values(), default=0)

    @property
    def observed(self) -> list[int]:
        """The counts compared with :attr:`reference` (consumers', then the sinks')."""
        counts = list(self.consumed.values())
        if self.sunk is not None:
            counts.append(self.sunk)
        return counts

    @property
    def differs(self) -> bool:
        """Whether a consumer or sink holds another count than the reference."""
        return any(c != self.reference for c in self.observed)

    @property
    def missing(self) -> int:
        """Reference minus the lowest observed count; negative when there are more records
        downstream than produced (duplicates); 0 when nothing differs.
        """
        if not self.differs:
            return 0
        low = min(self.observed)
        if low < self.reference:
            return self.reference - low
        return self.reference - max(self.observed)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, with ``window_start_utc`` and ``missing``."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "window_start": self.window_start,
            "window_start_utc": _utc(self.window_start),
            "produced": self.produced,
            "consumed": dict(sorted(self.consumed.items())),
            "sunk": self.sunk,
            "missing": self.missing,
        }


@dataclass(frozen=True)
class AuditReport:
    """The result of comparing an audit topic's counts (:func:`audit_report`).

    Attributes
    ----------
    windows : list of WindowAudit
        Every compared window, ordered by topic, partition, window start.
    unconsumed_topics : list of str
        Topics only producers report (not compared).
    records : int
        Audit records read (after keeping the last value per key).
    malformed : int
        Records of the audit topic that are not audit records (skipped, logged).
    """

    windows: list[WindowAudit]
    unconsumed_topics: list[str] = field(default_factory=list)
    records: int = 0
    malformed: int = 0

    @property
    def differences(self) -> list[WindowAudit]:
        """The windows whose counts differ."""
        return [w for w in self.windows if w.differs]

    @property
    def ok(self) -> bool:
        """True when no window differs."""
        return not self.differences

    @property
    def missing(self) -> int:
        """Records missing: the sum of :attr:`WindowAudit.missing` over the windows short of
        records (duplicates in other windows do not make up for them).
        """
        return sum(w.missing for w in self.differences if w.missing > 0)

    @property
    def duplicated(self) -> int:
        """Records counted more often downstream than produced, over the windows with more."""
        return sum(-w.missing for w in self.differences if w.missing < 0)

    def totals(self) -> dict[str, dict[str, int]]:
        """``{topic: {"produced": n, "consumed:<reporter>": n, "sunk": n}}`` over all windows."""
        out: dict[str, dict[str, int]] = {}
        for w in self.windows:
            t = out.setdefault(w.topic, {})
            if w.produced is not None:
                t[PRODUCED] = t.get(PRODUCED, 0) + w.produced
            for reporter, n in w.consumed.items():
                name = f"{CONSUMED}:{reporter}"
                t[name] = t.get(name, 0) + n
            if w.sunk is not None:
                t[SUNK] = t.get(SUNK, 0) + w.sunk
        return out

    def summary(self) -> str:
        """One line: windows compared, windows that differ, records missing.

        Examples
        --------
        >>> AuditReport([WindowAudit("t", 0, 0, 5, {"app": 5})]).summary()
        'audit: 1 window(s) of 1 topic(s) compared, none differs (0 records missing)'
        """
        topics = len({w.topic for w in self.windows})
        head = f"audit: {len(self.windows)} window(s) of {topics} topic(s) compared, "
        diff = self.differences
        verdict = "none differs" if not diff else f"{len(diff)} differ"
        extra = ""
        if self.unconsumed_topics:
            extra += f"; not consumed by an audited reader: {', '.join(self.unconsumed_topics)}"
        if self.malformed:
            extra += f"; {self.malformed} malformed audit record(s) skipped"
        dup = f", {self.duplicated} duplicated" if self.duplicated else ""
        return f"{head}{verdict} ({self.missing} records missing{dup}){extra}"

    def table(self) -> str:
        """A plain-text table of the differing windows (empty string when none differs).

        Columns: topic, partition, window start (UTC), produced, consumed (one column per
        consumer, named after it, when there are several), sunk, missing.
        """
        diff = self.differences
        if not diff:
            return ""
        consumers = sorted({c for w in diff for c in w.consumed})
        head = ["topic", "partition", "window start (UTC)", "produced"]
        head += ["consumed"] if len(consumers) <= 1 else [f"consumed:{c}" for c in consumers]
        head += ["sunk", "missing"]
        rows = []
        for w in diff:
            row = [w.topic, str(w.partition), _utc(w.window_start), _opt(w.produced)]
            if len(consumers) <= 1:
                row.append(_opt(next(iter(w.consumed.values()), None)))
            else:
                row += [_opt(w.consumed.get(c)) for c in consumers]
            row += [_opt(w.sunk), str(w.missing)]
            rows.append(row)
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        numeric = {i for i in range(len(head)) if i == 1 or i >= 3}
        lines = []
        for r in [head, *rows]:
            cells = [
                c.rjust(widths[i]) if i in numeric else c.ljust(widths[i]) for i, c in enumerate(r)
            ]
            lines.append("  ".join(cells).rstrip())
        lines.insert(1, "  ".join("-" * n for n in widths))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready report: ``ok``, ``missing``, ``differences``, ``windows``, ``totals``."""
        return {
            "ok": self.ok,
            "missing": self.missing,
            "duplicated": self.duplicated,
            "windows_compared": len(self.windows),
            "differences": [w.to_dict() for w in self.differences],
            "totals": self.totals(),
            "unconsumed_topics": self.unconsumed_topics,
            "records": self.records,
            "malformed": self.malformed,
        }


def _opt(n: int | None) -> str:
    return "-" if n is None else str(n)


def compare(records: Iterable[AuditRecord]) -> AuditReport:
    """Compare audit records (the last value of each key) window by window.

    Parameters
    ----------
    records : iterable of AuditRecord
        In topic order; a later record with the same key replaces an earlier one.

    Returns
    -------
    AuditReport

    Examples
    --------
    >>> W = 1_356_998_400_000
    >>> rs = [
    ...     AuditRecord("produced", "gen", "t", 0, W, 10, "run-1"),
    ...     AuditRecord("produced", "gen", "t", 0, W + 60_000, 5, "run-1"),
    ...     AuditRecord("consumed", "app", "t", 0, W, 10, "0"),
    ...     AuditRecord("consumed", "app", "t", 0, W, 7, "0"),  # same key: replaces
    ... ]
    >>> [(w.window_start - W, w.produced, w.consumed, w.missing) for w in compare(rs).windows]
    [(0, 10, {'app': 7}, 3), (60000, 5, {'app': 0}, 5)]
    """
    last: dict[bytes, AuditRecord] = {}
    for r in records:
        last[r.key()] = r
    produced: dict[tuple[str, int, int], int] = {}
    consumed: dict[tuple[str, int, int], dict[str, int]] = {}
    sunk: dict[tuple[str, int, int], int] = {}
    consumers: dict[str, set[str]] = {}
    sunk_topics: set[str] = set()
    for r in last.values():
        if r.role == PRODUCED:
            produced[r.window] = produced.get(r.window, 0) + r.count
        elif r.role == CONSUMED:
            per = consumed.setdefault(r.window, {})
            per[r.reporter] = per.get(r.reporter, 0) + r.count
            consumers.setdefault(r.topic, set()).add(r.reporter)
        else:
            sunk[r.window] = sunk.get(r.window, 0) + r.count
            sunk_topics.add(r.topic)
    checked = set(consumers) | sunk_topics
    produced_topics = {t for t, _, _ in produced}
    keys = sorted(k for k in {*produced, *consumed, *sunk} if k[0] in checked)
    windows = [
        WindowAudit(
            topic=k[0],
            partition=k[1],
            window_start=k[2],
            produced=produced.get(k, 0) if k[0] in produced_topics else None,
            consumed={c: consumed.get(k, {}).get(c, 0) for c in sorted(consumers.get(k[0], ()))},
            sunk=sunk.get(k, 0) if k[0] in sunk_topics else None,
        )
        for k in keys
    ]
    return AuditReport(windows, sorted(produced_topics - checked), records=len(last))


def sunk_counts(path: str | Path, topic: str) -> AuditCounts:
    """Count the committed rows of a Parquet file sink (``KStream.to_files``) per window.

    Only rows whose ``topic`` column is ``topic`` are counted (a sink may hold several topics'
    records); the window is that of the ``timestamp`` column (the record's event time).

    Parameters
    ----------
    path : str or Path
        The sink's directory (local).
    topic : str
        The topic whose records the sink holds.

    Raises
    ------
    StreamsError
        If ``path`` is not a file sink with a log (:func:`streamtable.files.read_files`).
    StreamtableError
        If the sink's rows have no ``topic``, ``partition`` or ``timestamp`` column.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from streamtable.files import read_files

    try:
        table = read_files(path, columns=["topic", "partition", "timestamp"])
    except ValueError as e:  # pyarrow.ArrowInvalid: "No match for FieldRef.Name(...)"
        if "FieldRef" not in str(e):
            raise
        raise StreamtableError(
            f"File sink {str(path)!r} has no 'topic', 'partition' and 'timestamp' columns; "
            "only to_files() output can be audited."
        ) from e
    table = table.filter(pc.equal(table["topic"], topic))
    stamps = table["timestamp"]
    if pa.types.is_timestamp(stamps.type):
        stamps = pc.cast(stamps, pa.timestamp("ms", tz=stamps.type.tz), safe=False)
    counts = AuditCounts()
    parts = table["partition"].to_pylist()
    for part, ts in zip(parts, pc.cast(stamps, pa.int64()).to_pylist(), strict=True):
        counts.add(topic, int(part), ts)
    return counts


def read_audit_records(
    bootstrap_servers: str,
    topic: str = "audit",
    *,
    timeout: timedelta = timedelta(seconds=60),
    consumer_config: Mapping[str, Any] | None = None,
) -> tuple[list[AuditRecord], int]:
    """Read the audit topic from its start to its current end (``read_committed``).

    Returns
    -------
    (list of AuditRecord, int)
        The records in partition-offset order, and how many records were not audit records
        (skipped with a warning).

    Raises
    ------
    StreamtableError
        If the topic does not exist, or its end is not reached within ``timeout``.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"streamtable-audit-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **(consumer_config or {}),
        }
    )
    out: list[AuditRecord] = []
    malformed = 0
    try:
        md = consumer.list_topics(topic, timeout=timeout.total_seconds())
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise StreamtableError(
                f"The audit topic {topic!r} does not exist at {bootstrap_servers}: nothing "
                "was audited yet. Create it (streamtable.platform.create_audit_topic) and set "
                "'streamtable.audit.topic' on the applications and audit_topic= on producers."
            )
        parts = sorted(meta.partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in parts
        }
        remaining = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        deadline = time.monotonic() + timeout.total_seconds()
        while remaining:
            if time.monotonic() > deadline:
                raise StreamtableError(
                    f"Timed out after {timeout} reading the audit topic {topic!r}: partitions "
                    f"{sorted(remaining)} not read to their end."
                )
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                if msg.error():
                    continue
                if msg.offset() + 1 >= ends[msg.partition()]:
                    remaining.discard(msg.partition())
                if msg.offset() >= ends[msg.partition()]:
                    continue  # written after the end was taken: the next report sees it
                try:
                    out.append(AuditRecord.from_kafka(msg.key(), msg.value()))
                except AuditError as e:
                    malformed += 1
                    if malformed <= 3:
                        log.warning("audit: skipping %s[%d]@%d: %s", topic, msg.partition(),
                                    msg.offset(), e)  # fmt: skip
            if remaining:  # transactional markers end a partition without a message
                for tp in consumer.position([TopicPartition(topic, p) for p in remaining]):
                    if tp.offset >= ends[tp.partition]:
                        remaining.discard(tp.partition)
    finally:
        consumer.close()
    return out, malformed


def _files(files: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
    if files is None:
        return []
    pairs = list(files.items()) if isinstance(files, Mapping) else list(files)
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str | Path)
                                                                   for x in pair)):  # fmt: skip
            raise TypeError(f"files= expects (path, topic) pairs or {{path: topic}}, got {pair!r}")
    return [(str(p), str(t)) for p, t in pairs]


def audit_report(
    bootstrap_servers: str,
    topic: str = "audit",
    *,
    files: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    timeout: timedelta = timedelta(seconds=60),
    consumer_config: Mapping[str, Any] | None = None,
) -> AuditReport:
    """Read the audit topic and the given file sinks and compare their counts per window.

    Parameters
    ----------
    bootstrap_servers : str
    topic : str
        The audit topic (default ``"audit"``).
    files : mapping or iterable of (path, topic), optional
        Parquet file sinks (``KStream.to_files`` output) and the topic whose records each
        holds; their committed rows are counted as ``sunk`` (not published anywhere).
    timeout : timedelta
        How long reading the audit topic to its end may take.
    consumer_config : Mapping, optional
        Extra confluent-kafka consumer settings (e.g. security settings).

    Returns
    -------
    AuditReport

    Raises
    ------
    StreamtableError
        If the audit topic does not exist or cannot be read in time, or a path is not a
        file sink (:func:`sunk_counts`).
    """
    pairs = _files(files)
    records, malformed = read_audit_records(
        bootstrap_servers, topic, timeout=timeout, consumer_config=consumer_config
    )
    for i, (path, sink_topic) in enumerate(pairs):
        records += sunk_counts(path, sink_topic).records(SUNK, f"files-{i}", "files")
    report = compare(records)
    return AuditReport(report.windows, report.unconsumed_topics, report.records, malformed)


def report_json(report: AuditReport) -> str:
    """The report as indented JSON text (``streamtable audit --json``)."""
    return json.dumps(report.to_json(), indent=2, sort_keys=True)
