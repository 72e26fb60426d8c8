"""The windows job of the flights demo: final hourly statistics, late departures, plane sessions
and rolling three-hour departure counts.

It reads the same ``flights`` topic as the hourly job (key = carrier + flight number, timestamp =
scheduled departure, produced in order of actual departure, so a flight arrives as late as its
departure delay) and writes:

- ``flights-hourly-final``: per origin and hour, the statistics of
  :func:`~streamtable.demo.flights.add_flight` with a grace of two hours, emitted **once** per
  window when it closes (``suppress(until_window_closes)``); key = origin, value = JSON;
- ``flights-late``: the flights that came too late for their hour (departed more than the grace
  after stream time had passed the hour's end), with the reason in the record headers;
- ``plane-sessions``: per tail number, sessions of activity (scheduled departures less than six
  hours apart, one day of grace), one final record per session:
  ``{tailnum, session_start, session_end, legs}``;
- ``flights-3h``: departures per origin over three hours, every hour (hopping windows), updated
  as flights arrive: ``{origin, window_start, window_end, departures}``.

Stream time is tracked per partition of ``flights`` (see ``docs/time-and-windows.md``): a
window closes once every partition that delivered flights of its key (tail number, origin)
has read a flight scheduled at least its end + grace.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from streamtable import (
    KafkaStreams,
    Serdes,
    SessionWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    Topology,
    Windowed,
)
from streamtable.demo.flights import add_flight, hourly_record, iso, new_hour

FINAL_TOPIC = "flights-hourly-final"
LATE_TOPIC = "flights-late"
SESSIONS_TOPIC = "plane-sessions"
HOPPING_TOPIC = "flights-3h"
HOURLY_GRACE = timedelta(hours=2)
SESSION_GAP = timedelta(hours=6)
SESSION_GRACE = timedelta(days=1)
HOP_SIZE, HOP_ADVANCE, HOP_GRACE = timedelta(hours=3), timedelta(hours=1), timedelta(hours=2)


def session_record(window: Windowed, legs: int | None) -> tuple[str, dict[str, Any] | None]:
    """The output record of one plane session: key = tail number."""
    if legs is None:  # not emitted under suppression; kept for completeness
        return window.key, None
    return window.key, {
        "tailnum": window.key,
        "session_start": iso(window.start),
        "session_end": iso(window.end),
        "legs": legs,
    }


def hopping_record(window: Windowed, departures: int) -> tuple[str, dict[str, Any]]:
    """The output record of one origin's three-hour window: key = origin."""
    return window.key, {
        "origin": window.key,
        "window_start": iso(window.start),
        "window_end": iso(window.end),
        "departures": departures,
    }


def _departed(_key: Any, flight: dict[str, Any]) -> bool:
    return flight.get("dep_time") is not None


def _count_departure(_origin: str, _flight: dict[str, Any], n: int) -> int:
    return n + 1


def _zero() -> int:
    return 0


def build_windows_topology(
    input_topic: str = "flights",
    final_topic: str = FINAL_TOPIC,
    late_topic: str = LATE_TOPIC,
    sessions_topic: str = SESSIONS_TOPIC,
    hopping_topic: str = HOPPING_TOPIC,
) -> Topology:
    """The three windowed aggregations of the module doc, over one source."""
    builder = StreamsBuilder()
    flights = builder.stream(input_topic, key_serde=Serdes.string(), value_serde=Serdes.json())
    by_origin = flights.group_by(
        lambda _key, flight: flight["origin"],
        key_serde=Serdes.string(),
        value_serde=Serdes.json(),
        name="final-by-origin",
    )
    (
        by_origin.windowed_by(
            TimeWindows.of_size_and_grace(timedelta(hours=1), HOURLY_GRACE),
            late_records_topic=late_topic,
        )
        .aggregate(new_hour, add_flight, name="flights-hourly-final-store")
        .suppress(Suppressed.until_window_closes(), name="flights-hourly-final-suppress")
        .to_stream()
        .map(hourly_record)
        .to(final_topic, key_serde=Serdes.string(), value_serde=Serdes.json())
    )
    (
        flights.filter(lambda _key, flight: flight.get("tailnum") is not None)
        .group_by(lambda _key, flight: flight["tailnum"], key_serde=Serdes.string(), name="legs")
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(SESSION_GAP, SESSION_GRACE))
        .count(name="plane-sessions-store")
        .suppress(Suppressed.until_window_closes(), name="plane-sessions-suppress")
        .to_stream()
        .map(session_record)
        .to(sessions_topic, key_serde=Serdes.string(), value_serde=Serdes.json())
    )
    (
        flights.filter(_departed)
        .group_by(lambda _key, flight: flight["origin"], key_serde=Serdes.string(), name="deps")
        .windowed_by(TimeWindows.of_size_and_grace(HOP_SIZE, HOP_GRACE).advance_by(HOP_ADVANCE))
        .aggregate(_zero, _count_departure, name="flights-3h-store")
        .to_stream()
        .map(hopping_record)
        .to(hopping_topic, key_serde=Serdes.string(), value_serde=Serdes.json())
    )
    return builder.build()


def run_windows(
    bootstrap: str, *, state_dir: str | None = None, echo: Any = print
) -> dict[str, Any]:
    """Run the windows job over the ``flights`` topic until caught up; print and return figures.

    Returns
    -------
    dict
        ``final_windows``, ``late_flights``, ``plane_sessions``, ``hopping_windows``,
        ``windows_processing_s``, ``windows_dropped_records``.
    """
    from streamtable.demo._harness import (
        demo_config,
        ensure_topics,
        read_topic,
        run_until_caught_up,
    )

    topics = [FINAL_TOPIC, LATE_TOPIC, SESSIONS_TOPIC, HOPPING_TOPIC]
    ensure_topics(bootstrap, dict.fromkeys(topics, 1), recreate=True)
    app = KafkaStreams(
        build_windows_topology(),
        demo_config("streamtable-demo-flights-windows", bootstrap, state_dir),
    )
    processing_s, metrics = run_until_caught_up(app)
    final = read_topic(bootstrap, FINAL_TOPIC)
    late = read_topic(bootstrap, LATE_TOPIC)
    sessions = [json.loads(v) for _k, v, _ts in read_topic(bootstrap, SESSIONS_TOPIC) if v]
    hopping = {}
    for _k, v, _ts in read_topic(bootstrap, HOPPING_TOPIC):
        row = json.loads(v)
        hopping[(row["origin"], row["window_start"])] = row
    echo(
        f"\nwindows job: {len(final):,} final origin-hours in '{FINAL_TOPIC}' (grace "
        f"{HOURLY_GRACE}), {len(late):,} late flights in '{LATE_TOPIC}', {len(sessions):,} "
        f"plane sessions in '{SESSIONS_TOPIC}', {len(hopping):,} three-hour windows in "
        f"'{HOPPING_TOPIC}' ({processing_s:.1f} s)"
    )
    longest = sorted(sessions, key=lambda s: (-s["legs"], s["tailnum"]))[:3]
    for s in longest:
        echo(
            f"  plane {s['tailnum']}: {s['legs']} legs from {s['session_start']} to "
            f"{s['session_end']}"
        )
    return {
        "final_windows": len(final),
        "late_flights": len(late),
        "plane_sessions": len(sessions),
        "hopping_windows": len(hopping),
        "windows_processing_s": round(processing_s, 2),
        "windows_dropped_records": metrics["dropped-records"],
    }
