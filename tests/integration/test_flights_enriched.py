"""The flights join job on one month equals the pandas reference of the same data, and its
per-manufacturer table re-groups when planes change manufacturer (subtractor).
"""

import json
from collections import Counter
from datetime import timedelta

from _support import ensure_topics, produce_records, read_topic
from streamtable import KafkaStreams
from streamtable.demo import flights_dimensions as dim
from streamtable.demo import flights_enriched as fe
from streamtable.demo.flights_data import flight_records, load_flights

COMPARED = [c for c in dim.ENRICHED_COLUMNS if c != "ts"]  # output timestamps: issue 5


def _rows(dicts):
    return Counter(tuple(d[c] for c in COMPARED) for d in dicts)


def _counts(df):
    return dict(zip(df["manufacturer"].tolist(), df["flights"].tolist(), strict=True))


def test_flights_enriched_and_per_manufacturer_equal_pandas(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    t = {
        n: topic_name(n)
        for n in ("flights", "airlines", "planes", "weather", "enriched", "per-manufacturer")
    }
    ensure_topics(bs, {t["airlines"]: 1, **{t[n]: 3 for n in t if n != "airlines"}})
    flights = load_flights()
    flights = flights[flights["month"] == 2]
    airlines, planes, weather = dim.load_airlines(), dim.load_planes(), dim.load_weather()
    produce_records(bs, t["airlines"], dim.airline_records(airlines))
    produce_records(bs, t["planes"], dim.plane_records(planes))
    produce_records(bs, t["weather"], dim.weather_records(weather))
    produce_records(bs, t["flights"], flight_records(flights))
    topology = fe.build_topology(
        t["flights"],
        airlines_topic=t["airlines"],
        planes_topic=t["planes"],
        weather_topic=t["weather"],
        enriched_topic=t["enriched"],
        per_manufacturer_topic=t["per-manufacturer"],
    )
    changes = fe.manufacturer_changes(planes)
    app = KafkaStreams(topology, app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=8))
        before = fe.per_manufacturer_table(read_topic(bs, t["per-manufacturer"]))
        updates = dim.plane_update_records(
            planes, changes, timestamp_ms=fe.PLANE_UPDATE_TIMESTAMP_MS
        )
        produce_records(bs, t["planes"], updates)
        app.await_caught_up(timeout=timedelta(minutes=5))
    finally:
        app.close()

    enriched = [json.loads(v) for _k, v, _ts in read_topic(bs, t["enriched"])]
    expected = dim.expected_enriched(flights, airlines, planes, weather)
    assert len(enriched) == len(expected) == 19961
    assert _rows(enriched) == _rows(expected.to_dict("records"))

    assert before == _counts(dim.expected_flights_per_manufacturer(flights, planes))
    after = fe.per_manufacturer_table(read_topic(bs, t["per-manufacturer"]))
    moved = _counts(
        dim.expected_flights_per_manufacturer(flights, dim.apply_plane_changes(planes, changes))
    )
    # a group whose planes all moved away stays in the table with 0 (Kafka Streams' reduce
    # keeps the aggregate the subtractor returns)
    emptied = {m: 0 for m in before if m not in moved}
    assert set(emptied) == set(fe.MANUFACTURER_FIXES) & set(before)
    assert after == {**moved, **emptied}
    assert after["AIRBUS"] == before["AIRBUS"] + before["AIRBUS INDUSTRIE"]
