"""The flights job on one month equals a pandas group-by of the same data."""

from datetime import timedelta

import pytest

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams
from streamtable.demo import flights
from streamtable.demo.flights_data import expected_hourly, flight_records, load_flights


def test_flights_hourly_equals_batch_group_by(kafka_broker, spark, topic_name, app_config):
    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("flights"), topic_name("hourly")
    df = load_flights()
    df = df[df["month"] == 2]
    ensure_topics(bs, {src: 3, out: 3})
    produce_records(bs, src, flight_records(df))
    app = KafkaStreams(flights.build_topology(src, out), app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=5))
        assert app.metrics()["dropped-records"].get("late", 0) == 0
    finally:
        app.close()
    final = flights.latest_per_window(read_topic(bs, out))
    expected = {(r["origin"], r["window_start"]): r for r in expected_hourly(df).to_dict("records")}
    assert set(final) == set(expected)
    for key, exp in expected.items():
        got = final[key]
        for col in ("window_end", "scheduled", "departed", "cancelled", "delayed_15"):
            assert got[col] == exp[col], (key, col)
        if exp["avg_dep_delay_min"] is None:
            assert got["avg_dep_delay_min"] is None, key
        else:
            assert got["avg_dep_delay_min"] == pytest.approx(exp["avg_dep_delay_min"], rel=1e-12), (
                key
            )
