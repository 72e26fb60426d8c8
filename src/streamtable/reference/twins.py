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
