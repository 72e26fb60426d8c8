"""In-memory topics of the :class:`~streamtable.testing.TopologyTestDriver`.

Input topics are append-only record logs in a folder: one file per record (a ``>qii`` header
with the timestamp in ms and the key and value lengths, -1 for null, then the bytes) and an
``end`` counter replaced atomically. A streaming Python data source (:class:`DriverTopicSource`,
format ``streamtable-driver``) reads them with the columns of Spark's Kafka source. They are
files, not Python queues, because Spark calls the reader in a Python process it starts itself.

:class:`TestInputTopic` and :class:`TestOutputTopic` are the test's handles on them (Kafka's
``TestInputTopic`` / ``TestOutputTopic``).
"""

from __future__ import annotations

import numbers
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamtable._millis import duration_ms, epoch_ms
from streamtable.errors import StreamsError
from streamtable.serde import Serde

if TYPE_CHECKING:
    from streamtable.testing.driver import TopologyTestDriver

__all__ = ["DriverTopicSource", "TestInputTopic", "TestOutputTopic", "TestRecord"]

FORMAT = "streamtable-driver"
_POLLING_DELAY = "spark.sql.streaming.pollingDelay"
_HEADER = struct.Struct(">qii")  # timestamp ms, key length, value length (-1: null)
_SCHEMA = "key binary, value binary, ts bigint, partition int, offset bigint, topic string"


# -- in-memory (folder-backed) input topics -------------------------------------------------


def _topic_dir(root: str, topic: str) -> Path:
    return Path(root) / topic.encode().hex()  # any topic name is a safe folder name


def _end(root: str, topic: str) -> int:
    try:
        return int((_topic_dir(root, topic) / "end").read_text())
    except FileNotFoundError:
        return 0


def append_records(
    root: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None, int]]
) -> int:
    """Append records to a topic log; returns the new end offset (written after the records)."""
    folder = _topic_dir(root, topic)
    folder.mkdir(parents=True, exist_ok=True)
    end = _end(root, topic)
    for key, value, ts in records:
        head = _HEADER.pack(
            ts, -1 if key is None else len(key), -1 if value is None else len(value)
        )
        (folder / f"{end:012d}").write_bytes(head + (key or b"") + (value or b""))
        end += 1
    tmp = folder / "end.tmp"
    tmp.write_text(str(end))
    os.replace(tmp, folder / "end")
    return end


def _load(root: str, topic: str, offset: int) -> tuple[Any, ...]:
    data = (_topic_dir(root, topic) / f"{offset:012d}").read_bytes()
    ts, kl, vl = _HEADER.unpack_from(data)
    pos = _HEADER.size
    key = None if kl < 0 else data[pos : pos + kl]
    pos += max(kl, 0)
    value = None if vl < 0 else data[pos : pos + vl]
    return (key, value, ts, 0, offset, topic)


try:  # the data source classes need pyspark; the module imports without it for type checks
    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
except ImportError:  # pragma: no cover
    DataSource = object  # type: ignore[assignment,misc]
    SimpleDataSourceStreamReader = object  # type: ignore[assignment,misc]


class _TopicReader(SimpleDataSourceStreamReader):  # type: ignore[misc]
    def __init__(self, root: str, topics: list[str]) -> None:
        self.root = root
        self.topics = topics

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        return {t: 0 for t in self.topics}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        end = {t: _end(self.root, t) for t in self.topics}
        return self.readBetweenOffsets(start, end), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:  # noqa: N802
        rows = [
            _load(self.root, t, off)
            for t in self.topics
            for off in range(int(start.get(t, 0)), int(end[t]))
        ]
        return iter(rows)


class DriverTopicSource(DataSource):  # type: ignore[misc]
    """Streaming source over the driver's input topics (options ``path``, ``topics``)."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``streamtable-driver``."""
        return FORMAT

    def schema(self) -> str:
        """The Kafka source's columns (``ts`` in ms; the driver converts it)."""
        return _SCHEMA

    def simpleStreamReader(self, schema: Any) -> _TopicReader:  # noqa: N802 - Spark's name
        """A reader of the topics in option ``topics`` under folder ``path``."""
        return _TopicReader(self.options["path"], self.options["topics"].split(","))


# -- records and topics ---------------------------------------------------------------------


@dataclass(frozen=True)
class TestRecord:
    """A record read from (or piped into) a test topic (Kafka's ``TestRecord``).

    ``timestamp`` is in ms; a ``datetime`` (naive: UTC) is converted to ms, so that records
    compare equal whichever form their time was given in, as Kafka's compares instants.
    ``headers`` are ``(name, bytes)`` pairs (note the order of the fields: Kafka's
    constructor takes the headers before the timestamp).

    Raises
    ------
    ValueError
        If ``timestamp`` is negative (Kafka: "Timestamp should always be non-negative or
        null").
    TypeError
        If ``timestamp`` is not an int, a datetime or ``None``, or ``headers`` not pairs.

    Examples
    --------
    >>> from datetime import datetime, UTC
    >>> TestRecord("k", "v", datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)).timestamp
    1000
    """

    __test__ = False  # not a pytest class

    key: Any
    value: Any
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    def __post_init__(self) -> None:
        ts = self.timestamp
        if isinstance(ts, datetime):
            object.__setattr__(self, "timestamp", to_millis(ts, 0))
        elif isinstance(ts, numbers.Integral) and not isinstance(ts, bool):
            object.__setattr__(self, "timestamp", int(ts))
        elif ts is not None:
            raise TypeError(
                f"TestRecord timestamp must be ms (int), a datetime or None; got {ts!r}. The "
                "fields are (key, value, timestamp, headers): Kafka's TestRecord takes the "
                "headers before the timestamp."
            )
        if self.timestamp is not None and self.timestamp < 0:
            raise ValueError(
                f"Invalid timestamp: {self.timestamp}. Timestamp should always be non-negative "
                "or null (Kafka's TestRecord)."
            )
        headers = () if self.headers is None else tuple(self.headers)
        pairs = tuple(tuple(h) if isinstance(h, list | tuple) else h for h in headers)
        if not all(
            isinstance(h, tuple)
            and len(h) == 2
            and isinstance(h[0], str)
            and (h[1] is None or isinstance(h[1], bytes))
            for h in pairs
        ):
            raise TypeError(
                f"TestRecord headers must be (name, bytes) pairs (a str name, a bytes or None "
                f"value); got {self.headers!r}."
            )
        object.__setattr__(self, "headers", pairs)


def to_millis(ts: int | datetime | None, default: int) -> int:
    if ts is None:
        return default
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        return epoch_ms(ts)
    return int(ts)


#: ``pipe_input``'s marker for an argument left out (``None`` is a null key or a tombstone).
_NO_VALUE: Any = object()


class TestInputTopic:
    """Pipes records into one input topic of a :class:`TopologyTestDriver`.

    A record piped without a timestamp gets the topic's next timestamp: from
    ``start_timestamp``, advanced by ``auto_advance`` after each such record (Kafka's
    ``TestInputTopic``). Without ``start_timestamp`` the topic starts at the driver's mocked
    wall clock when the topic is created, so with no ``auto_advance`` every such record gets
    that time, whatever ``advance_wall_clock_time`` does later (Kafka's driver takes
    ``Instant.now()`` at the topic's creation, with no advance).

    Raises
    ------
    ValueError
        If ``auto_advance`` is negative (Kafka: "autoAdvance must be positive").
    """

    __test__ = False  # not a pytest class

    def __init__(
        self,
        driver: TopologyTestDriver,
        name: str,
        key_serde: Serde,
        value_serde: Serde,
        start_timestamp: int | None = None,
        auto_advance: timedelta = timedelta(0),
    ) -> None:
        self._driver = driver
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._advance = duration_ms(auto_advance)
        if self._advance < 0:
            raise ValueError(
                f"auto_advance must not be negative (got {auto_advance!r}) for input topic "
                f"{name!r}, as in Kafka's TestInputTopic."
            )
        self._next_ts = driver.wall_clock_ms if start_timestamp is None else start_timestamp

    def _timestamp(self, ts: int | datetime | None) -> int:
        if ts is not None:
            return to_millis(ts, 0)
        t = self._next_ts
        self._next_ts += self._advance
        return t

    def pipe_input(
        self,
        key: Any = _NO_VALUE,
        value: Any = _NO_VALUE,
        timestamp: int | datetime | None = None,
        headers: Any = None,
    ) -> None:
        """Process one record completely before returning (Kafka's ``pipeInput``).

        ``pipe_input(key, value[, timestamp])``, or ``pipe_input(record)`` with a
        :class:`TestRecord`. A tombstone is ``pipe_input(key, None)``.

        Raises
        ------
        TypeError
            If the value is left out (Kafka's one-argument ``pipeInput(value)`` is
            ``pipe_input(None, value)`` or ``pipe_value_list([value])`` here: with one
            argument, Python could not tell a key from a value).
        NotImplementedError
            If ``headers`` are given (the driver cannot pipe headers yet).
        """
        if isinstance(key, TestRecord):
            if value is not _NO_VALUE or timestamp is not None or headers is not None:
                raise TypeError(
                    "pipe_input(record) takes a TestRecord alone: its key, value, timestamp "
                    "and headers are the record's."
                )
            self.pipe_record_list([key])
            return
        if value is _NO_VALUE:
            raise TypeError(
                f"pipe_input({key!r}) left out the value: pass the key and the value, "
                f"pipe_input(None, {key!r}) for a value with a null key (Kafka's "
                "pipeInput(value)), or pipe_input(key, None) for a tombstone."
            )
        if key is _NO_VALUE:
            key = None
        if headers:
            raise NotImplementedError("headers are not supported by the prototype driver")
        self._driver._pipe(
            self.name,
            [
                (
                    self.key_serde.serialize(key),
                    self.value_serde.serialize(value),
                    self._timestamp(timestamp),
                )
            ],
        )

    def advance_time(self, advance: timedelta) -> None:
        """Move the topic's time, which stamps the records piped without a timestamp
        (Kafka's ``TestInputTopic.advanceTime``).

        Raises
        ------
        ValueError
            If ``advance`` is negative (Kafka: "advance must be positive").
        """
        if advance < timedelta(0):
            raise ValueError(
                f"advance_time needs a non-negative timedelta for input topic {self.name!r}; "
                f"got {advance}."
            )
        self._next_ts += duration_ms(advance)

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        """Pipe each value with a null key, one at a time."""
        for v in values:
            self.pipe_input(None, v)

    def pipe_key_value_list(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Pipe each ``(key, value)``, one at a time."""
        for k, v in pairs:
            self.pipe_input(k, v)

    def pipe_record_list(self, records: Iterable[TestRecord]) -> None:
        """Pipe each :class:`TestRecord`, one at a time."""
        for r in records:
            self.pipe_input(r.key, r.value, r.timestamp, r.headers)


class TestOutputTopic:
    """Reads the records the topology wrote to one output topic, in order."""

    __test__ = False

    def __init__(
        self, driver: TopologyTestDriver, name: str, key_serde: Serde, value_serde: Serde
    ) -> None:
        self._queue = driver._outputs[name]
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde

    def read_record(self) -> TestRecord:
        """The next record, with its headers (dead letters' and late records' carry some);
        raises ``StreamsError`` (Kafka: NoSuchElementException) if none.
        """
        if not self._queue:
            raise StreamsError(f"Output topic {self.name!r} is empty.")
        key, value, ts, headers = self._queue.popleft()
        return TestRecord(
            self.key_serde.deserialize(key), self.value_serde.deserialize(value), ts, headers
        )

    def read_value(self) -> Any:
        """The next record's value."""
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        """The next record's ``(key, value)``."""
        r = self.read_record()
        return r.key, r.value

    def read_records_to_list(self) -> list[TestRecord]:
        """All remaining records."""
        out = []
        while self._queue:
            out.append(self.read_record())
        return out

    def read_values_to_list(self) -> list[Any]:
        """All remaining values."""
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        """All remaining ``(key, value)`` pairs."""
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Last value per key, as Kafka's ``readKeyValuesToMap``: a key whose last record is a
        tombstone stays in the map with the value ``None``.

        Raises
        ------
        StreamsError
            If a remaining record has a null key (Kafka: "Null keys not allowed with
            readKeyValuesToMap method"); the records read before it are consumed.
        """
        out: dict[Any, Any] = {}
        while self._queue:
            record = self.read_record()
            if record.key is None:
                raise StreamsError(
                    f"Output topic {self.name!r} holds a record with a null key (value "
                    f"{record.value!r}): read_key_values_to_map needs keys, as Kafka's "
                    "readKeyValuesToMap does; read it with read_key_values_to_list."
                )
            out[record.key] = record.value
        return out

    def is_empty(self) -> bool:
        """Whether every record written so far has been read."""
        return not self._queue

    def get_queue_size(self) -> int:
        """How many records are left to read."""
        return len(self._queue)
