"""The data-loss audit as a streamtable application: counts compared as they arrive.

:func:`audit_topology` reads the audit topic as a table (the last value per key, so a
re-published batch replaces its first publication), regroups it per ``(topic, partition,
window)`` and aggregates the counts per role and reporter with the KTable DSL (``group_by`` +
``aggregate``: when a batch's count is replaced, the subtractor takes the old one out before
the adder puts the new one in).  Every change of a window whose consumers do not hold the
produced count writes an alert; when they agree again, a tombstone (null value) for the window
says the alert is resolved.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from streamtable.dsl.builder import StreamsBuilder
from streamtable.dsl.materialized import Materialized
from streamtable.platform.audit import CONSUMED, PRODUCED, ROLES
from streamtable.serde import Serdes
from streamtable.topology.topology import Topology

__all__ = ["audit_topology", "window_alert"]

_FIELDS = ("role", "reporter", "topic", "partition", "window_start", "count", "batch")


def _valid(_key: Any, value: Any) -> bool:
    """An audit record's value (others, e.g. a JSON list, are left out of the aggregation)."""
    return (
        isinstance(value, dict)
        and all(f in value for f in _FIELDS)
        and value["role"] in ROLES
        and isinstance(value["count"], int)
    )


def _window_of(_key: str, value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return f"{value['topic']}|{value['partition']}|{value['window_start']}", value


def _initial() -> dict[str, Any]:
    return {"topic": None, "partition": None, "window_start": None, "counts": {}}


def _apply(sign: int, _key: str, value: dict[str, Any], agg: dict[str, Any]) -> dict[str, Any]:
    counts = {role: dict(per) for role, per in agg["counts"].items()}
    per = counts.setdefault(value["role"], {})
    n = per.get(value["reporter"], 0) + sign * value["count"]
    if n:
        per[value["reporter"]] = n
    else:
        per.pop(value["reporter"], None)
    return {
        "topic": value["topic"],
        "partition": value["partition"],
        "window_start": value["window_start"],
        "counts": counts,
    }


def window_alert(agg: dict[str, Any], consumers: Sequence[str] = ()) -> dict[str, Any] | None:
    """The alert for an aggregated window, or None when its counts agree.

    A window is alerted when it has a produced count and a consumer holds another count.
    The consumers compared are those that reported the window, plus every one of
    ``consumers`` (an expected consumer that did not report the window read 0 of it).

    Parameters
    ----------
    agg : dict
        ``{"topic", "partition", "window_start", "counts": {role: {reporter: count}}}``.
    consumers : sequence of str
        Reporters (``application.id``) expected to read every produced window.

    Returns
    -------
    dict or None
        ``{"topic", "partition", "window_start", "window_start_utc", "produced",
        "consumed": {reporter: count}, "missing"}``; ``missing`` is produced minus the lowest
        consumed count (negative: more consumed than produced).

    Examples
    --------
    >>> agg = {"topic": "t", "partition": 0, "window_start": 0,
    ...        "counts": {"produced": {"gen": 10}, "consumed": {"app": 7}}}
    >>> window_alert(agg)["missing"], window_alert(agg, ["app", "other"])["missing"]
    (3, 10)
    """
    counts = agg.get("counts", {})
    produced = counts.get(PRODUCED, {})
    if not produced:
        return None
    total = sum(produced.values())
    consumed = {c: 0 for c in consumers}
    consumed.update(counts.get(CONSUMED, {}))
    if not consumed or all(n == total for n in consumed.values()):
        return None
    low = min(consumed.values())
    missing = total - low if low < total else total - max(consumed.values())
    start = agg["window_start"]
    return {
        "topic": agg["topic"],
        "partition": agg["partition"],
        "window_start": start,
        "window_start_utc": datetime.fromtimestamp(start / 1000, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        "produced": total,
        "consumed": dict(sorted(consumed.items())),
        "missing": missing,
    }


def _differs(consumers: tuple[str, ...], _key: str, agg: dict[str, Any]) -> bool:
    return window_alert(agg, consumers) is not None


def _alert_value(consumers: tuple[str, ...], agg: dict[str, Any]) -> dict[str, Any] | None:
    return window_alert(agg, consumers)


def audit_topology(
    audit_topic: str = "audit",
    alerts_topic: str = "audit-alerts",
    *,
    consumers: Sequence[str] = (),
    store_name: str = "audit-windows",
) -> Topology:
    """A topology that compares the audit topic's counts and writes alerts.

    Parameters
    ----------
    audit_topic : str
        Read as a table: key ``"<role>|<reporter>|<topic>|<partition>|<window>|<batch>"``,
        JSON values (:class:`~streamtable.platform.audit.AuditRecord`).  Values that are not
        audit records are left out.
    alerts_topic : str
        Receives, keyed ``"<topic>|<partition>|<window_start>"`` (String), a JSON alert
        (:func:`window_alert`) for every change of a window whose counts differ, and a
        tombstone when they agree again.
    consumers : sequence of str, optional
        ``application.id`` of consumers expected to read every produced window: a window
        lost entirely (no record of it read) is alerted only for these.  Without them, a
        window is compared with the consumers that reported it.
    store_name : str
        Name of the queryable store of the aggregated windows (``{"topic", "partition",
        "window_start", "counts": {role: {reporter: count}}}``).

    Returns
    -------
    Topology
        Run it with :class:`~streamtable.KafkaStreams` (both topics must exist) or the
        :class:`~streamtable.testing.TopologyTestDriver`.

    Notes
    -----
    Alerts are written as soon as counts differ, also while a consumer is still behind; the
    tombstone that follows when it catches up resolves them (read the alerts topic as a
    table for the windows that differ now).  Sunk counts are not compared here (they are
    not published to the audit topic); ``streamtable audit --files`` compares them.

    Examples
    --------
    >>> t = audit_topology("audit", "alerts")
    >>> t.source_topics, t.sink_topics, t.store_names
    (('audit',), ('alerts',), ('audit-STATE-STORE-0000000000', 'audit-windows'))
    """
    strings, json = Serdes.string(), Serdes.json()
    expected = tuple(consumers)
    b = StreamsBuilder()
    windows = (
        b.table(audit_topic, key_serde=strings, value_serde=json)
        .filter(_valid)
        .group_by(_window_of, key_serde=strings, value_serde=json)
        .aggregate(
            _initial,
            functools.partial(_apply, 1),
            functools.partial(_apply, -1),
            name=Materialized.as_(store_name).with_value_serde(json),
        )
    )
    (
        windows.filter(functools.partial(_differs, expected))
        .map_values(functools.partial(_alert_value, expected))
        .to_stream()
        .to(alerts_topic, key_serde=strings, value_serde=json)
    )
    return b.build()
