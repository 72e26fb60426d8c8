"""The Processor API's interfaces: ``Processor``, ``Record``, ``ProcessorContext`` (KIP-820).

Kafka Streams' ``org.apache.kafka.streams.processor.api`` in Python: a :class:`Processor` gets
``init(context)`` once per instance, ``process(record)`` per input record and ``close()`` at
the end; it sends records downstream with ``context.forward(record)``, keeps state in the
stores connected to it (``context.get_state_store(name)``) and runs code periodically through
``context.schedule(interval, PunctuationType..., punctuator)``.

How streamtable runs a processor (see ``docs/processor-api.md``): as in Kafka Streams, one
instance per task, a task per input partition, each with its own slice of the connected stores
and its own stream time. Unlike Kafka Streams, an instance lives for **one micro-batch**: the
supplier creates it, ``init`` runs, it gets the task's records of the micro-batch and its due
punctuations, then ``close``. Instance attributes therefore do not outlive a micro-batch; keep
what must survive in a state store (which Kafka Streams needs for fault tolerance anyway).
Punctuation schedules persist across micro-batches (see :meth:`ProcessorContext.schedule`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import Enum
from typing import Any, Protocol

__all__ = [
    "Cancellable",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Punctuator",
    "Record",
    "RecordMetadata",
]


class PunctuationType(str, Enum):
    """Which clock a punctuation follows (Kafka Streams' ``PunctuationType``)."""

    #: stream time: the largest record timestamp the operator has processed; advances only
    #: with records
    STREAM_TIME = "stream_time"
    #: wall-clock time: the processing clock (the micro-batch's time; the
    #: TopologyTestDriver's mocked clock in tests)
    WALL_CLOCK_TIME = "wall_clock_time"


#: ``punctuator(timestamp_ms)``: called with the stream time or wall-clock time (ms) at which
#: the punctuation fires.
Punctuator = Callable[[int], None]


@dataclass(frozen=True)
class Record:
    """One record: key, value, timestamp (ms since the epoch) and headers.

    Immutable like Kafka Streams' ``Record``: ``with_key``, ``with_value``,
    ``with_timestamp`` and ``with_headers`` return changed copies. ``None`` key or value is a
    null (a ``None`` value forwarded to a table-like consumer is a tombstone).

    Examples
    --------
    >>> r = Record("alice", 3, 1000)
    >>> r.with_value(4)
    Record(key='alice', value=4, timestamp=1000, headers=())
    >>> r.with_timestamp(5).timestamp
    5
    >>> r.with_timestamp(-1)
    Traceback (most recent call last):
    ...
    ValueError: Malformed Record: timestamp may not be negative (got -1 ms).

    Raises
    ------
    ValueError
        If the timestamp is negative, as Kafka Streams' ``Record`` constructor refuses one
        ("Malformed Record"): a processor that forwards it fails on that record, under the
        processing exception handler.
    """

    key: Any
    value: Any
    timestamp: int
    #: ``(name, bytes)`` pairs; streamtable does not carry input headers through its operators
    #: yet, so records handed to ``process`` have none and forwarded headers are dropped
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def __post_init__(self) -> None:
        if self.timestamp < 0:
            raise ValueError(
                f"Malformed Record: timestamp may not be negative (got {self.timestamp} ms)."
            )

    def with_key(self, key: Any) -> Record:
        """A copy with another key."""
        return replace(self, key=key)

    def with_value(self, value: Any) -> Record:
        """A copy with another value."""
        return replace(self, value=value)

    def with_timestamp(self, timestamp: int) -> Record:
        """A copy with another timestamp (ms)."""
        return replace(self, timestamp=int(timestamp))

    def with_headers(self, headers: tuple[tuple[str, bytes | None], ...]) -> Record:
        """A copy with other headers."""
        return replace(self, headers=tuple(headers))


@dataclass(frozen=True)
class RecordMetadata:
    """Where the record being processed comes from (Kafka Streams' ``RecordMetadata``)."""

    topic: str
    partition: int
    offset: int


class Cancellable(Protocol):
    """Handle of a scheduled punctuation; ``cancel()`` stops it for good."""

    def cancel(self) -> None:
        """Stop the punctuation (it never fires again, also after a restart)."""


class ProcessorContext(Protocol):
    """What a processor can do besides processing (Kafka Streams' ``api.ProcessorContext``).

    streamtable hands every processor an implementation; this protocol documents it.
    """

    def forward(self, record: Record) -> None:
        """Send ``record`` to the processor's downstream operators.

        From ``process``: the record keeps the input record's position in the output order.
        From a punctuator: its timestamp is whatever the record says (Kafka Streams passes
        the punctuation time as the usual choice).

        Raises
        ------
        StreamsError
            In ``process_values``, if the record's key differs from the input record's
            (Kafka Streams' ``FixedKeyProcessor`` cannot change keys). A punctuator of
            ``process_values`` has no input record to compare with: it must forward only
            keys its processor was given (Kafka Streams can forward only a ``FixedKeyRecord``
            it kept), as nothing repartitions what it forwards.
        """

    def schedule(
        self, interval: timedelta, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> Cancellable:
        """Call ``punctuator(timestamp)`` every ``interval`` of stream time or wall-clock time.

        Follows Kafka Streams 4.x: a ``STREAM_TIME`` punctuation is aligned to 0 and fires
        as soon as stream time is known, then whenever stream time reaches the next multiple
        of ``interval``; a ``WALL_CLOCK_TIME`` one fires ``interval`` after it was first
        scheduled, then every ``interval``. Missed intervals collapse into one call; the
        next one stays aligned (``last + k * interval``). Checked after each micro-batch
        (Kafka Streams' stream thread checks after each batch of polled records; its
        TopologyTestDriver, which also runs one record per micro-batch here, after each
        record).

        Must be called from ``init``: the schedule is identified by the order of the calls
        there and its next time persists with the state, so each micro-batch's new instance
        gets it back.

        Raises
        ------
        ValueError
            If ``interval`` is below 1 ms (Kafka Streams: "The minimum supported scheduling
            interval is 1 millisecond").
        StreamsError
            If called outside ``init``.
        """
        ...

    def get_state_store(self, name: str) -> Any:
        """The connected state store ``name`` (a
        :class:`~streamtable.processor.stores.KeyValueStore`).

        Raises
        ------
        StreamsError
            If the store is not connected to this processor (Kafka Streams: "Processor ...
            has no access to StateStore ...").
        """

    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed; ``None`` in punctuators."""

    def current_stream_time_ms(self) -> int:
        """The operator's stream time (ms): the largest record timestamp processed so far."""
        ...

    def current_system_time_ms(self) -> int:
        """The wall-clock time of this micro-batch (the driver's mocked clock in tests)."""
        ...

    def application_id(self) -> str:
        """``application.id``."""
        ...

    def task_id(self) -> str:
        """The task, ``"0_<partition>"`` (Kafka Streams' task id format)."""
        ...


class Processor:
    """Base class of user processors (Kafka Streams' ``api.Processor``).

    Override :meth:`process`; :meth:`init` and :meth:`close` are optional. A processor
    supplier passed to ``KStream.process`` is a zero-argument callable returning a **new**
    instance each call: the class itself, or a function.

    Examples
    --------
    >>> class Upper(Processor):
    ...     def process(self, record):
    ...         self.context.forward(record.with_value(record.value.upper()))
    """

    context: Any = None

    def init(self, context: ProcessorContext) -> None:
        """Called once per instance before any record; keeps ``context`` by default."""
        self.context = context

    def process(self, record: Record) -> None:  # pragma: no cover - abstract
        """Process one record."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(record)")

    def close(self) -> None:
        """Called after the instance's last record and punctuation of the micro-batch."""
