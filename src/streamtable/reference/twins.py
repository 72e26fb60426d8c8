"""streamtable twins of the Kafka Streams reference topologies (internal: parity tests, benchmarks).

Each function builds, with streamtable's DSL, the topology that ``ReferenceApp.java``
(``streamtable/jvm/kstreams``, run by :func:`streamtable.reference.kafka_streams.run_reference`)
builds under the same name, with the same serdes (UTF-8 strings; 64-bit big-endian longs for
the aggregate), the same joiner semantics and the same output encoding, so that both engines can
read the same input topics and their output topics can be compared byte for byte.

Java's string conversions are reproduced: ``l + "|" + r`` and ``String.valueOf(x)`` print a null
as ``"null"`` (Python would print ``None``); the flights joiners parse both sides and write one
compact JSON object ``{"flight": ..., "weather"|"plane": ...}``, as Jackson's
``ObjectNode.toString()`` does (non-ASCII kept as UTF-8; doubles printed by Python's ``repr``,
which equals Java's ``Double.toString`` for plain decimals such as ``39.02`` or ``10.0``).

All callables are module-level functions, so they pickle by reference.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from streamtable import Serdes, StreamsBuilder, Topology

__all__ = [
    "stream_table_join",
    "table_table_join",
    "table_aggregate",
    "flights_weather",
    "flights_planes",
    "flights_fk_planes",
    "windowed_count",
    "windowed_aggregate",
    "flights_hourly",
    "windowed_parity",
    "join_rekey_reduce",
    "count_histogram",
    "table_join_regroup",
    "three_level",
    "flights_carrier_seats",
    "latency_echo",
    "latency_max",
    "latency_count",
    "windowed_filter_join",
    "processor_punctuation",
    "CountingProcessor",
    "java_string",
]

#: ``ReferenceApp``'s default ``history_ms`` of stream-table-join (one day).
STREAM_TABLE_HISTORY_MS = 86_400_000
#: ``ReferenceApp``'s default ``history_ms`` of flights-weather (30 days).
FLIGHTS_WEATHER_HISTORY_MS = 2_592_000_000

_S = Serdes.string()
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def java_string(value: Any) -> str:
    """``String.valueOf(value)`` for a string or null: the string itself, or ``"null"``.

    Examples
    --------
    >>> java_string("a"), java_string(None)
    ('a', 'null')
    """
    return "null" if value is None else str(value)


def _pipe(left: Any, right: Any) -> str:
    """Java's ``(l, r) -> l + "|" + r`` (and ``String.valueOf(l) + "|" + String.valueOf(r)``)."""
    return java_string(left) + "|" + java_string(right)


def _check_kind(kind: str, allowed: tuple[str, ...]) -> None:
    if kind not in allowed:
        # the Java app's message, so both engines reject the same kinds the same way
        raise ValueError(f"unsupported kind={kind}")


def stream_table_join(
    stream: str,
    table: str,
    output: str,
    *,
    kind: str = "inner",
    history_ms: int = STREAM_TABLE_HISTORY_MS,
) -> Topology:
    """Twin of ``stream-table-join``: a KStream-KTable join against a versioned table.

    ``stream`` joined with ``table`` (a store named ``table-store`` keeping versions for
    ``history_ms``), so a stream record sees the table as of its own timestamp; value
    ``stream_value + "|" + table_value`` (``"null"`` for a missing table row in a left join);
    written to ``output``. All keys and values are UTF-8 strings.

    Parameters
    ----------
    stream, table, output : str
        Topic names (the Java params ``stream``, ``table``, ``output``).
    kind : {"inner", "left"}
        The join (the Java param ``kind``).
    history_ms : int
        The table's history retention in ms (the Java param ``history_ms``).

    Returns
    -------
    Topology

    Raises
    ------
    ValueError
        For another ``kind``.
    """
    _check_kind(kind, ("inner", "left"))
    b = StreamsBuilder()
    s = b.stream(stream, key_serde=_S, value_serde=_S)
    t = b.table(
        table, key_serde=_S, value_serde=_S, name="table-store", history_retention=history_ms
    )
    joined = s.join(t, _pipe) if kind == "inner" else s.left_join(t, _pipe)
    joined.to(output, key_serde=_S, value_serde=_S)
    return b.build()


def table_table_join(left: str, right: str, output: str, *, kind: str = "inner") -> Topology:
    """Twin of ``table-table-join``: a KTable-KTable join over plain (latest-value) tables.

    Value ``String.valueOf(l) + "|" + String.valueOf(r)`` (``"null"`` for a missing side in a
    left or outer join); the join's changelog, tombstones included, written to ``output``.

    Parameters
    ----------
    left, right, output : str
        Topic names (the Java params of the same names).
    kind : {"inner", "left", "outer"}
        The join (the Java param ``kind``).

    Returns
    -------
    Topology

    Raises
    ------
    ValueError
        For another ``kind``.
    """
    _check_kind(kind, ("inner", "left", "outer"))
    b = StreamsBuilder()
    lt = b.table(left, key_serde=_S, value_serde=_S)
    rt = b.table(right, key_serde=_S, value_serde=_S)
    method = {"inner": lt.join, "left": lt.left_join, "outer": lt.outer_join}[kind]
    method(rt, _pipe).to_stream().to(output, key_serde=_S, value_serde=_S)
    return b.build()


def _group_amount(_key: str, value: str) -> tuple[str, int]:
    """Java's ``v.split(":")`` → ``(parts[0], Long.parseLong(parts[1]))``."""
    parts = value.split(":")
    return parts[0], int(parts[1])


def _zero() -> int:
    return 0


def _add(_group: str, amount: int, agg: int) -> int:
    return agg + amount


def _subtract(_group: str, amount: int, agg: int) -> int:
    return agg - amount


def table_aggregate(table: str, output: str) -> Topology:
    """Twin of ``table-aggregate``: values ``"group:amount"`` summed per group.

    The table is re-grouped by the part before ``:`` (a repartition), amounts are summed with
    an adder and a subtractor (store ``aggregate-store``, initial value 0), and the
    aggregate's changelog is written to ``output`` with string keys and 8-byte big-endian
    long values (Java's ``Serdes.Long()``). A group whose rows all left stays at 0.

    Parameters
    ----------
    table, output : str
        Topic names (the Java params of the same names).

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    (
        b.table(table, key_serde=_S, value_serde=_S)
        .group_by(_group_amount, key_serde=_S, value_serde=Serdes.long())
        .aggregate(_zero, _add, _subtract, name="aggregate-store")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _text_field(value: str, name: str) -> str | None:
    """Java's ``field(json, name)``: a top-level string field, else ``None``."""
    got = json.loads(value).get(name)
    return got if isinstance(got, str) else None


def _origin(_key: str, flight: str) -> str | None:
    return _text_field(flight, "origin")


def _tailnum(_key: str, flight: str) -> str | None:
    return _text_field(flight, "tailnum")


def _has_tailnum(_key: str, flight: str | None) -> bool:
    return flight is not None and _text_field(flight, "tailnum") is not None


def _flight_weather(flight: str, weather: str) -> str:
    """Java's ``pair("flight", f, "weather", w)``: both parsed, one compact JSON object."""
    return _JSON.encode({"flight": json.loads(flight), "weather": json.loads(weather)})


def _flight_plane(flight: str, plane: str) -> str:
    """Java's ``pair("flight", f, "plane", pl)``."""
    return _JSON.encode({"flight": json.loads(flight), "plane": json.loads(plane)})


def flights_weather(
    flights: str,
    weather: str,
    output: str,
    *,
    history_ms: int = FLIGHTS_WEATHER_HISTORY_MS,
) -> Topology:
    """Twin of ``flights-weather``: flights re-keyed by origin, temporal join with weather.

    ``selectKey`` to the flight's ``origin`` (a repartition), inner join with the ``weather``
    table (store ``weather-store``, versions kept for ``history_ms``), so each flight gets the
    observation valid at its timestamp; value ``{"flight": <flight>, "weather": <weather>}``.

    Parameters
    ----------
    flights, weather, output : str
        Topic names (the Java params of the same names).
    history_ms : int
        The weather table's history retention in ms (the Java param ``history_ms``).

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    w = b.table(
        weather,
        key_serde=_S,
        value_serde=_S,
        name="weather-store",
        history_retention=timedelta(milliseconds=history_ms),
    )
    (
        b.stream(flights, key_serde=_S, value_serde=_S)
        .select_key(_origin)
        .join(w, _flight_weather)
        .to(output, key_serde=_S, value_serde=_S)
    )
    return b.build()


def flights_planes(flights: str, planes: str, output: str) -> Topology:
    """Twin of ``flights-planes``: flights with a tail number re-keyed by it, joined with planes.

    Flights whose value is null or has no string ``tailnum`` are filtered out; the rest are
    re-keyed by ``tailnum`` (a repartition) and inner-joined with the ``planes`` table; value
    ``{"flight": <flight>, "plane": <plane>}``. (Java reads planes into a plain, latest-value
    store; streamtable's table lookups are as of the flight's timestamp. Plane records carry
    timestamp 1, before every flight, so both see the same plane.)

    Parameters
    ----------
    flights, planes, output : str
        Topic names (the Java params of the same names).

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    p = b.table(planes, key_serde=_S, value_serde=_S)
    (
        b.stream(flights, key_serde=_S, value_serde=_S)
        .filter(_has_tailnum)
        .select_key(_tailnum)
        .join(p, _flight_plane)
        .to(output, key_serde=_S, value_serde=_S)
    )
    return b.build()


def _flight_tailnum(flight: str) -> str | None:
    return _text_field(flight, "tailnum")


def flights_fk_planes(flights: str, planes: str, output: str) -> Topology:
    """Twin of ``flights-fk-planes``: the flights as a table, foreign-key joined with planes.

    ``flights`` read as a table (key: carrier + flight number, so each flight number's latest
    flight), inner-joined with the ``planes`` table on the flight's ``tailnum`` (Kafka Streams'
    foreign-key join, KIP-213: subscription and response topics); value
    ``{"flight": <flight>, "plane": <plane>}``, the join's changelog written to ``output``. A
    flight without a string ``tailnum`` joins nothing.

    Parameters
    ----------
    flights, planes, output : str
        Topic names (the Java params of the same names).

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    p = b.table(planes, key_serde=_S, value_serde=_S)
    (
        b.table(flights, key_serde=_S, value_serde=_S)
        .join(p, _flight_plane, foreign_key_extractor=_flight_tailnum)
        .to_stream()
        .to(output, key_serde=_S, value_serde=_S)
    )
    return b.build()


# --------------------------------------------------------------------------- windowed aggregations


def _windows(size_ms: int, grace_ms: int) -> Any:
    from streamtable import TimeWindows

    return TimeWindows.of_size_and_grace(
        timedelta(milliseconds=size_ms), timedelta(milliseconds=grace_ms)
    )


def _write_windowed(
    table: Any, output: str, size_ms: int, value_serde: Any, suppress: bool
) -> None:
    """``[.suppress(untilWindowCloses(unbounded))].toStream().to(output, windowed serde, v)``."""
    if suppress:
        # imported here: this module loads (for the other twins) whether or not suppression exists
        from streamtable import BufferConfig, Suppressed

        table = table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    table.to_stream().to(
        output, key_serde=Serdes.time_windowed(_S, size_ms), value_serde=value_serde
    )


def windowed_count(
    input: str, output: str, *, size_ms: int, grace_ms: int, suppress: bool = False
) -> Topology:
    """Twin of ``windowed-count``: count per key and tumbling window (group by key).

    Windows of ``size_ms`` with ``grace_ms`` of grace (store ``count-store``); with ``suppress``
    only each window's final count once it closes. Output key: the windowed key in
    ``TimeWindowedSerde`` bytes (UTF-8 key + 8-byte big-endian window start), value an 8-byte
    big-endian long.

    Parameters
    ----------
    input, output : str
        Topic names (the Java params of the same names).
    size_ms, grace_ms : int
        Window size and grace in ms (the Java params of the same names).
    suppress : bool
        ``Suppressed.untilWindowCloses(unbounded())`` (the Java param ``suppress=true``).

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    counts = (
        b.stream(input, key_serde=_S, value_serde=_S)
        .group_by_key()
        .windowed_by(_windows(size_ms, grace_ms))
        .count(name="count-store")
    )
    _write_windowed(counts, output, size_ms, Serdes.long(), suppress)
    return b.build()


def _zero_stats() -> str:
    return "0:0:0"


def _add_stats(_key: str, value: str, agg: str) -> str:
    """Java's ``count:sum:max`` fold of a ``Long.parseLong(value)``."""
    n, total, top = (int(p) for p in agg.split(":"))
    x = int(value)
    return f"{n + 1}:{total + x}:{max(top, x)}"


def windowed_aggregate(
    input: str, output: str, *, size_ms: int, grace_ms: int, suppress: bool = False
) -> Topology:
    """Twin of ``windowed-aggregate``: ``"count:sum:max"`` of integer values per key and window.

    As :func:`windowed_count` (store ``aggregate-store``) with a string aggregate, initial
    ``"0:0:0"``; the fold does not depend on the order of a window's records.

    Parameters
    ----------
    input, output : str
        Topic names.
    size_ms, grace_ms : int
        Window size and grace in ms.
    suppress : bool
        Emit only final results.

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    agg = (
        b.stream(input, key_serde=_S, value_serde=_S)
        .group_by_key()
        .windowed_by(_windows(size_ms, grace_ms))
        .aggregate(_zero_stats, _add_stats, name="aggregate-store")
    )
    _write_windowed(agg, output, size_ms, _S, suppress)
    return b.build()


def windowed_parity(
    input: str,
    *,
    size_ms: int,
    grace_ms: int,
    count_output: str,
    aggregate_output: str,
    count_final_output: str | None = None,
    aggregate_final_output: str | None = None,
) -> Topology:
    """Twin of ``windowed-parity``: :func:`windowed_count` and :func:`windowed_aggregate` of one
    input in one application.

    The updates go to ``count_output`` and ``aggregate_output``; when given, the suppressed final
    results (``untilWindowCloses(unbounded())``) to ``count_final_output`` and
    ``aggregate_final_output``.

    Parameters
    ----------
    input : str
        The input topic.
    size_ms, grace_ms : int
        Window size and grace in ms.
    count_output, aggregate_output, count_final_output, aggregate_final_output : str
        Output topics (the Java params of the same names).

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    windowed = b.stream(input, key_serde=_S, value_serde=_S).group_by_key()
    windowed = windowed.windowed_by(_windows(size_ms, grace_ms))
    counts = windowed.count(name="count-store")
    stats = windowed.aggregate(_zero_stats, _add_stats, name="aggregate-store")
    _write_windowed(counts, count_output, size_ms, Serdes.long(), False)
    _write_windowed(stats, aggregate_output, size_ms, _S, False)
    if count_final_output is not None:
        _write_windowed(counts, count_final_output, size_ms, Serdes.long(), True)
    if aggregate_final_output is not None:
        _write_windowed(stats, aggregate_final_output, size_ms, _S, True)
    return b.build()


#: ``flights-hourly``'s default window size (1 hour) and grace (2 hours).
FLIGHTS_HOURLY_SIZE_MS = 3_600_000
FLIGHTS_HOURLY_GRACE_MS = 7_200_000


def _zero_hour() -> str:
    return "0,0,0,0,0,0"


def _add_flight(_origin: str, flight: str, agg: str) -> str:
    """Java's ``addFlight``: the demo's ``add_flight`` on a comma-separated string."""
    a = [int(p) for p in agg.split(",")]
    f = json.loads(flight)
    a[0] += 1
    if f.get("dep_time") is None:
        a[2] += 1
    else:
        a[1] += 1
    delay = f.get("dep_delay")
    if delay is not None:
        d = int(delay)
        a[4] += d
        a[5] += 1
        if d > 15:
            a[3] += 1
    return ",".join(map(str, a))


def flights_hourly(
    flights: str,
    output: str,
    *,
    size_ms: int = FLIGHTS_HOURLY_SIZE_MS,
    grace_ms: int = FLIGHTS_HOURLY_GRACE_MS,
    agg: str = "count",
    suppress: bool = False,
) -> Topology:
    """Twin of ``flights-hourly``: flights grouped by ``origin`` (a repartition) per window.

    ``agg="count"``: flights per origin and window (long values, store
    ``flights-hourly-store``); ``agg="stats"``: the flights demo's statistics as the string
    ``"scheduled,departed,cancelled,delayed_15,delay_sum,delay_n"``. Output keys as
    :func:`windowed_count`.

    Parameters
    ----------
    flights, output : str
        Topic names.
    size_ms, grace_ms : int
        Window size and grace in ms (default 1 hour and 2 hours).
    agg : {"count", "stats"}
        The aggregation (the Java param ``agg``).
    suppress : bool
        Emit only final results.

    Returns
    -------
    Topology

    Raises
    ------
    ValueError
        For another ``agg``.
    """
    if agg not in ("count", "stats"):
        raise ValueError(f"unsupported agg={agg}")
    b = StreamsBuilder()
    windowed = (
        b.stream(flights, key_serde=_S, value_serde=_S)
        .group_by(_origin, key_serde=_S, name="flights-by-origin")
        .windowed_by(_windows(size_ms, grace_ms))
    )
    if agg == "count":
        _write_windowed(
            windowed.count(name="flights-hourly-store"), output, size_ms, Serdes.long(), suppress
        )
    else:
        table = windowed.aggregate(_zero_hour, _add_flight, name="flights-hourly-store")
        _write_windowed(table, output, size_ms, _S, suppress)
    return b.build()


# -- chains of several sub-topologies ------------------------------------------------------


def _region_clicks(clicks: str, region: str) -> str:
    """Java's ``(clicks, region) -> region + ":" + clicks``."""
    return f"{region}:{clicks}"


def _split_long(_key: str, value: str) -> tuple[str, int]:
    """Java's ``KeyValue.pair(v.split(":")[0], Long.parseLong(v.split(":")[1]))``."""
    parts = value.split(":")
    return parts[0], int(parts[1])


def _sum(a: int, b: int) -> int:
    return a + b


def join_rekey_reduce(
    stream: str, table: str, output: str, *, history_ms: int = STREAM_TABLE_HISTORY_MS
) -> Topology:
    """Twin of ``join-rekey-reduce``: clicks joined with regions, re-keyed, summed per region.

    The stream (values: counts as text) is inner-joined with the versioned table (store
    ``table-store``), mapped to ``(region, count)``, grouped through repartition topic
    ``by-region`` and summed (store ``region-sums``) into ``output`` (Long values): two
    sub-topologies in both engines.
    """
    b = StreamsBuilder()
    regions = b.table(
        table, key_serde=_S, value_serde=_S, name="table-store", history_retention=history_ms
    )
    (
        b.stream(stream, key_serde=_S, value_serde=_S)
        .join(regions, _region_clicks)
        .map(_split_long)
        .group_by_key(key_serde=_S, value_serde=Serdes.long(), name="by-region")
        .reduce(_sum, name="region-sums")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _count_user(user: str, n: int) -> tuple[str, str]:
    """Java's ``(user, n) -> KeyValue.pair(String.valueOf(n), user)``."""
    return str(n), user


def count_histogram(input: str, output: str) -> Topology:  # noqa: A002 - the Java param
    """Twin of ``count-histogram``: events per user (``user-counts``), then users per count
    (``histogram-store``, through repartition topic ``histogram``) into ``output``.
    """
    b = StreamsBuilder()
    (
        b.stream(input, key_serde=_S, value_serde=_S)
        .group_by_key()
        .count(name="user-counts")
        .group_by(_count_user, key_serde=_S, value_serde=_S, name="histogram")
        .count(name="histogram-store")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _passes_count_filter(_user: str, n: int) -> bool:
    return n >= 2 and n != 4


def count_filter(
    input: str,  # noqa: A002 - the Java param
    output: str,
    *,
    suppress_ms: int | None = None,
) -> Topology:
    """Twin of ``count-filter``: events per user (``user-counts``) filtered as a table, so a
    count that never passed sends nothing and one that stops passing a tombstone. With
    ``suppress_ms`` the filter reads the counts held back by ``until_time_limit``.
    """
    b = StreamsBuilder()
    counts = b.stream(input, key_serde=_S, value_serde=_S).group_by_key().count(name="user-counts")
    (
        _limited(counts, suppress_ms)
        .filter(_passes_count_filter)
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _limited(table: Any, suppress_ms: int | None) -> Any:
    """Java's ``limited``: ``table`` held back by ``untilTimeLimit(suppress_ms, unbounded())``
    when given.
    """
    if suppress_ms is None:
        return table
    from streamtable import BufferConfig, Suppressed

    limit = timedelta(milliseconds=suppress_ms)
    return table.suppress(Suppressed.until_time_limit(limit, BufferConfig.unbounded()))


def _user_at_start(wk: Any, n: int | None) -> tuple[str, int | None]:
    return f"{wk.key}@{wk.start}", n


def windowed_count_filter(
    input: str,  # noqa: A002
    output: str,
    *,
    size_ms: int,
    grace_ms: int,
    suppress: bool = False,
    suppress_ms: int | None = None,
) -> Topology:
    """Twin of ``windowed-count-filter``: events per user and time window (``count-store``)
    filtered as a table (with ``suppress``, its final results; with ``suppress_ms``, its
    updates held back by ``until_time_limit``), written keyed ``"user@start"``.
    """
    windows = _windows(size_ms, grace_ms)
    return _filtered_window_counts(
        input,
        output,
        windows,
        "count-store",
        _user_at_start,
        suppress=suppress,
        suppress_ms=suppress_ms,
    )


def _user_at_session(wk: Any, n: int | None) -> tuple[str, int | None]:
    return f"{wk.key}@{wk.start}-{wk.end}", n


def session_count_filter(
    input: str,  # noqa: A002
    output: str,
    *,
    gap_ms: int,
    grace_ms: int,
    suppress: bool = False,
) -> Topology:
    """Twin of ``session-count-filter``: events per user and session (``session-counts``)
    filtered as a table (with ``suppress``, its final results), written keyed
    ``"user@start-end"``.
    """
    from streamtable import SessionWindows

    windows = SessionWindows.of_inactivity_gap_and_grace(
        timedelta(milliseconds=gap_ms), timedelta(milliseconds=grace_ms)
    )
    return _filtered_window_counts(
        input, output, windows, "session-counts", _user_at_session, suppress=suppress
    )


def sliding_count_filter(
    input: str,  # noqa: A002
    output: str,
    *,
    difference_ms: int,
    grace_ms: int,
    suppress: bool = False,
) -> Topology:
    """Twin of ``sliding-count-filter``: events per user in sliding windows
    (``sliding-counts``) filtered as a table (with ``suppress``, its final results), written
    keyed ``"user@start"``.
    """
    from streamtable import SlidingWindows

    windows = SlidingWindows.of_time_difference_and_grace(
        timedelta(milliseconds=difference_ms), timedelta(milliseconds=grace_ms)
    )
    return _filtered_window_counts(
        input, output, windows, "sliding-counts", _user_at_start, suppress=suppress
    )


def _filtered_window_counts(
    input: str,  # noqa: A002
    output: str,
    windows: Any,
    store: str,
    key_of: Any,
    *,
    suppress: bool = False,
    suppress_ms: int | None = None,
) -> Topology:
    """Events per user in ``windows`` (store ``store``; with ``suppress``, its final results;
    with ``suppress_ms``, held back by ``until_time_limit``), filtered as a table (counts 2, 3
    and from 5 pass), written keyed ``key_of(windowed key, count)``.
    """
    from streamtable import BufferConfig, Suppressed

    b = StreamsBuilder()
    counts = b.stream(input, key_serde=_S, value_serde=_S).group_by_key().windowed_by(windows)
    table = counts.count(name=store)
    if suppress:
        table = table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    (
        _limited(table, suppress_ms)
        .filter(_passes_count_filter)
        .to_stream()
        .map(key_of)
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _subtract_amount(_group: str, amount: int, agg: int) -> int:
    return agg - amount


def table_join_regroup(left: str, right: str, output: str) -> Topology:
    """Twin of ``table-join-regroup``: regions joined with scores (two tables), re-grouped by
    region (repartition topic ``by-region``) and summed with a subtractor (``region-scores``).
    """
    b = StreamsBuilder()
    regions = b.table(left, key_serde=_S, value_serde=_S)
    scores = b.table(right, key_serde=_S, value_serde=_S)
    (
        regions.join(scores, _region_clicks_table)
        .group_by(_split_long, key_serde=_S, value_serde=Serdes.long(), name="by-region")
        .aggregate(_zero, _add, _subtract_amount, name="region-scores")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _region_clicks_table(region: str, score: str) -> str:
    """Java's ``(region, score) -> region + ":" + score``."""
    return f"{region}:{score}"


def _user_group(user: str, n: int) -> tuple[str, int]:
    """Java's ``KeyValue.pair("g" + Integer.parseInt(user.substring(1)) % 4, n)``."""
    return f"g{int(user[1:]) % 4}", n


def _all(_group: str, m: int) -> tuple[str, int]:
    return "all", m


def three_level(input: str, output: str) -> Topology:  # noqa: A002 - the Java param
    """Twin of ``three-level``: counts per user (``per-user``), each group's maximum
    (repartition ``by-group``, store ``group-max``), the overall maximum (repartition ``all``,
    store ``all-max``): three sub-topologies in both engines.
    """
    b = StreamsBuilder()
    (
        b.stream(input, key_serde=_S, value_serde=_S)
        .group_by_key()
        .count(name="per-user")
        .to_stream()
        .map(_user_group)
        .group_by_key(key_serde=_S, value_serde=Serdes.long(), name="by-group")
        .reduce(max, name="group-max")
        .to_stream()
        .map(_all)
        .group_by_key(key_serde=_S, value_serde=Serdes.long(), name="all")
        .reduce(max, name="all-max")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _carrier_seats(flight: str, plane: str) -> str:
    """Java's ``field(f, "carrier") + ":" + parse(pl).path("seats").asLong(0)``."""
    seats = json.loads(plane).get("seats")
    return f"{java_string(_text_field(flight, 'carrier'))}:{seats if isinstance(seats, int) else 0}"


def flights_carrier_seats(flights: str, planes: str, output: str) -> Topology:
    """Twin of ``flights-carrier-seats``: join, re-key, reduce on the flights.

    Flights with a tail number are re-keyed by it and joined with ``planes`` (as
    :func:`flights_planes`), re-keyed by carrier (repartition topic ``by-carrier``) and the
    planes' seats summed per carrier (store ``carrier-seats``, Long values) into ``output``.
    """
    b = StreamsBuilder()
    p = b.table(planes, key_serde=_S, value_serde=_S)
    (
        b.stream(flights, key_serde=_S, value_serde=_S)
        .filter(_has_tailnum)
        .select_key(_tailnum)
        .join(p, _carrier_seats)
        .map(_split_long)
        .group_by_key(key_serde=_S, value_serde=Serdes.long(), name="by-carrier")
        .reduce(_sum, name="carrier-seats")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def _more_than_one(_wk: Any, n: int) -> bool:
    return n > 1


def _count_at_start(wk: Any, n: int) -> tuple[str, str]:
    """Java's ``KeyValue.pair(wk.key(), n + "@" + wk.window().start())``."""
    return wk.key, f"{n}@{wk.start}"


def _region_count(count: str, region: str) -> str:
    """Java's ``(n, region) -> region + ":" + n``."""
    return f"{region}:{count}"


def windowed_filter_join(
    input: str,  # noqa: A002 - the Java param
    table: str,
    output: str,
    *,
    size_ms: int,
    grace_ms: int,
    history_ms: int = STREAM_TABLE_HISTORY_MS,
) -> Topology:
    """Twin of ``windowed-filter-join``: final counts per user and tumbling window (store
    ``count-store``, suppressed until the window closes), those above 1 re-keyed by user (a
    repartition) and joined with the users' regions (versioned table ``regions-store``: as of
    the window's last record); value ``"region:count@windowStart"``.
    """
    from streamtable import BufferConfig, Suppressed

    b = StreamsBuilder()
    regions = b.table(
        table, key_serde=_S, value_serde=_S, name="regions-store", history_retention=history_ms
    )
    (
        b.stream(input, key_serde=_S, value_serde=_S)
        .group_by_key()
        .windowed_by(_windows(size_ms, grace_ms))
        .count(name="count-store")
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .filter(_more_than_one)
        .map(_count_at_start)
        .join(regions, _region_count)
        .to(output, key_serde=_S, value_serde=_S)
    )
    return b.build()


class CountingProcessor:
    """Twin of ``ReferenceApp.CountingProcessor``: counts records per key in store
    ``counts`` and forwards the count as text; every ``stream_ms`` of stream time forwards
    ``(key, "st:<count>")`` for every key of the store, every ``wall_ms`` of wall-clock time
    ``("total", "wall:<sum>")`` when the sum is not 0.
    """

    def __init__(self, stream_ms: int, wall_ms: int) -> None:
        self.stream_ms, self.wall_ms = stream_ms, wall_ms

    def init(self, context: Any) -> None:  # noqa: D102
        from streamtable import PunctuationType

        self.context = context
        self.store = context.get_state_store("counts")
        context.schedule(
            timedelta(milliseconds=self.stream_ms), PunctuationType.STREAM_TIME, self.on_stream
        )
        context.schedule(
            timedelta(milliseconds=self.wall_ms), PunctuationType.WALL_CLOCK_TIME, self.on_wall
        )

    def process(self, record: Any) -> None:  # noqa: D102
        n = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, n)
        self.context.forward(record.with_value(str(n)))

    def on_stream(self, ts: int) -> None:  # noqa: D102
        from streamtable import Record

        for k, v in self.store.all():
            self.context.forward(Record(k, f"st:{v}", ts))

    def on_wall(self, ts: int) -> None:  # noqa: D102
        from streamtable import Record

        total = sum(v for _, v in self.store.all())
        if total:
            self.context.forward(Record("total", f"wall:{total}", ts))

    def close(self) -> None:  # noqa: D102
        pass


class _CountingSupplier:
    def __init__(self, stream_ms: int, wall_ms: int) -> None:
        self.stream_ms, self.wall_ms = stream_ms, wall_ms

    def __call__(self) -> CountingProcessor:
        return CountingProcessor(self.stream_ms, self.wall_ms)


def processor_punctuation(input: str, output: str, *, stream_ms: int, wall_ms: int) -> Topology:
    """Twin of ``processor-punctuation``: :class:`CountingProcessor` with key-value store
    ``counts`` (String keys, Long values) between ``input`` and ``output``.
    """
    from streamtable import Stores

    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), _S, Serdes.long()
        )
    )
    b.stream(input, key_serde=_S, value_serde=_S).process(
        _CountingSupplier(stream_ms, wall_ms), "counts"
    ).to(output, key_serde=_S, value_serde=_S)
    return b.build()


def _non_negative(key: str, value: str) -> bool:
    return int(value) >= 0


def latency_echo(input: str, output: str, *, columns: bool = False) -> Topology:
    """``latency-echo`` (``bench/latency.py``): the String value parsed into a Long, kept if
    ``>= 0`` (Java's ``Long.parseLong``), written as an 8-byte long; the key is kept.

    With ``columns=True`` the two steps are column expressions (Spark SQL, no Python worker:
    what Spark's real-time mode needs); same output for decimal values.

    Parameters
    ----------
    input, output : str
        The source topic (String key and value) and the output topic (String key, Long value).
    columns : bool, default False
        Column expressions instead of Python callables.

    Returns
    -------
    Topology
    """
    from streamtable import functions as F

    s, long_ = Serdes.string(), Serdes.long()
    b = StreamsBuilder()
    stream = b.stream(input, key_serde=s, value_serde=s)
    if columns:
        value = F.col("value").cast("bigint")
        stream = stream.filter(value >= 0).map_values(value)
    else:
        stream = stream.filter(_non_negative).map_values(int)
    stream.to(output, key_serde=s, value_serde=long_)
    return b.build()


def latency_max(input: str, output: str, *, columns: bool = False) -> Topology:  # noqa: A002
    """``latency-max`` (``bench/latency.py``'s keyed topology): the String value parsed into a
    Long, the maximum per key (``reduce(max)``, store ``latest``), written as an 8-byte long.

    A keyed aggregation with one state read and write and one output per record, like a keyed
    count; its output value is the largest produce time of the key, so a latency can be read
    off each output record.

    With ``columns=True`` the parse is a column expression and the reducer the built-in
    ``Reducers.max()``: Spark's own cast and aggregation, no Python worker; same output for
    decimal values.

    Parameters
    ----------
    input, output : str
        The source topic (String key, String decimal value) and the output topic (String key,
        Long value).
    columns : bool, default False
        A column expression and a built-in reducer instead of Python callables.

    Returns
    -------
    Topology
    """
    from streamtable import Reducers
    from streamtable import functions as F

    b = StreamsBuilder()
    stream = b.stream(input, key_serde=_S, value_serde=_S)
    parsed = stream.map_values(F.col("value").cast("bigint") if columns else int)
    (
        parsed.group_by_key(key_serde=_S, value_serde=Serdes.long())
        .reduce(Reducers.max() if columns else max, name="latest")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()


def latency_count(input: str, output: str) -> Topology:  # noqa: A002 - the Java param
    """``latency-count`` (``bench/latency.py``'s keyed count): records counted per key (store
    ``counts``), written as 8-byte longs. The benchmark takes a latency from its producer's
    log: the update ``(k, n)`` answers the n-th record of ``k``.

    Parameters
    ----------
    input, output : str
        The source topic (String key and value) and the output topic (String key, Long count).

    Returns
    -------
    Topology
    """
    b = StreamsBuilder()
    (
        b.stream(input, key_serde=_S, value_serde=_S)
        .group_by_key()
        .count(name="counts")
        .to_stream()
        .to(output, key_serde=_S, value_serde=Serdes.long())
    )
    return b.build()
