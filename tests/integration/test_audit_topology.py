"""The audit topology (written with streamtable) on the TopologyTestDriver: alerts as counts
arrive, a tombstone when they agree again, re-published batches counted once.
"""

from __future__ import annotations

import json

from streamtable import Serdes
from streamtable.platform import AuditRecord, audit_topology
from streamtable.platform.audit import WINDOW_MS

S, J = Serdes.string(), Serdes.json()
W = 1_356_998_400_000  # 2013-01-01T00:00:00Z


def _pipe(topic, *records: AuditRecord) -> None:
    for r in records:
        topic.pipe_input(r.key().decode(), json.loads(r.value()))


def test_alerts_follow_the_difference_of_each_window(topology_driver):
    driver = topology_driver(audit_topology("audit", "alerts", consumers=["app"]))
    audit = driver.create_input_topic("audit", S, J)
    alerts = driver.create_output_topic("alerts", S, J)
    key = f"flights|0|{W}"

    _pipe(audit, AuditRecord("produced", "gen", "flights", 0, W, 10, "run-1"))
    (alert,) = alerts.read_key_values_to_list()
    assert alert == (
        key,
        {
            "topic": "flights",
            "partition": 0,
            "window_start": W,
            "window_start_utc": "2013-01-01T00:00:00Z",
            "produced": 10,
            "consumed": {"app": 0},
            "missing": 10,
        },
    ), "an expected consumer that read nothing of the window read 0"

    _pipe(audit, AuditRecord("consumed", "app", "flights", 0, W, 6, "0"))
    assert [(k, v["consumed"], v["missing"]) for k, v in alerts.read_key_values_to_list()] == [
        (key, {"app": 6}, 4)
    ]

    # micro-batch 0 published again with the same count (a replay): no new alert value
    _pipe(audit, AuditRecord("consumed", "app", "flights", 0, W, 6, "0"))
    assert all(v is None or v["missing"] == 4 for _, v in alerts.read_key_values_to_list())

    _pipe(audit, AuditRecord("consumed", "app", "flights", 0, W, 4, "1"))
    assert alerts.read_key_values_to_list() == [(key, None)], "agreeing again resolves it"

    # another window of another partition, never read: alerted on its own key
    _pipe(audit, AuditRecord("produced", "gen", "flights", 1, W + WINDOW_MS, 3, "run-1"))
    assert [(k, v["missing"]) for k, v in alerts.read_key_values_to_list()] == [
        (f"flights|1|{W + WINDOW_MS}", 3)
    ]
    windows = driver.get_key_value_store("audit-windows")
    assert windows.get(key)["counts"] == {"produced": {"gen": 10}, "consumed": {"app": 10}}


def test_without_expected_consumers_only_reported_windows_are_compared(topology_driver):
    driver = topology_driver(audit_topology("audit", "alerts"))
    audit = driver.create_input_topic("audit", S, J)
    alerts = driver.create_output_topic("alerts", S, J)
    _pipe(audit, AuditRecord("produced", "gen", "t", 0, W, 5, "r"))
    audit.pipe_input("junk", {"not": "an audit record"})  # left out of the aggregation
    assert all(v is None for _, v in alerts.read_key_values_to_list())
    _pipe(audit, AuditRecord("consumed", "app", "t", 0, W, 7, "0"))  # 2 duplicates
    assert [
        (v["produced"], v["consumed"], v["missing"]) for _, v in alerts.read_key_values_to_list()
    ] == [(5, {"app": 7}, -2)]
