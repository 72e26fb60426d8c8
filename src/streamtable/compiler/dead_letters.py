"""Dead-letter records: what a skipped (or failing) record becomes on the dead-letter topic.

Kafka Streams 4.x (KIP-1034) writes a record its exception handlers skip or fail on to the topic
``errors.dead.letter.queue.topic.name``: the *original* key and value bytes of the source record,
its timestamp, and headers describing the error. streamtable writes the same record format:

==================================  ===========================================================
header                              value (UTF-8)
==================================  ===========================================================
``__streams.errors.exception``      the exception's class, module-qualified
                                    (``streamtable.errors.DeserializationError``,
                                    ``ZeroDivisionError`` for built-ins)
``__streams.errors.message``        the exception's message
``__streams.errors.stacktrace``     the Python traceback
``__streams.errors.topic``          source topic
``__streams.errors.partition``      source partition
``__streams.errors.offset``         source offset
``streamtable.errors.operator``     the operator (node name) whose code failed, or the source
                                    node for deserialization errors (Kafka has no such header)
``streamtable.errors.reason``       ``deserialization`` or ``processing``
==================================  ===========================================================

A record without source coordinates (produced by an aggregation) gets a null topic and
partition and offset ``-1``, and an exception without a message a null message, as Kafka
Streams' ``ExceptionHandlerUtils.buildDeadLetterQueueRecord`` writes them
(``String.valueOf`` of its context's ``-1``; Java's null ``getMessage()``).

Pure Python: the writer runs inside Spark's Python workers, producing through
:class:`streamtable.runtime.task_output.TaskOutput` (one transaction per Spark task under
``exactly_once_v2``, an idempotent producer otherwise).
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamtable.runtime.task_output import OutputSpec

log = logging.getLogger("streamtable")

#: Kafka Streams' header names (``ExceptionHandlerUtils``, KIP-1034).
HEADER_EXCEPTION = "__streams.errors.exception"
HEADER_MESSAGE = "__streams.errors.message"
HEADER_STACKTRACE = "__streams.errors.stacktrace"
HEADER_TOPIC = "__streams.errors.topic"
HEADER_PARTITION = "__streams.errors.partition"
HEADER_OFFSET = "__streams.errors.offset"
#: streamtable's additions.
HEADER_OPERATOR = "streamtable.errors.operator"
HEADER_REASON = "streamtable.errors.reason"

#: Drop reasons of records a handler skipped.
DESERIALIZATION = "deserialization"
PROCESSING = "processing"


def exception_class_name(e: BaseException) -> str:
    """The module-qualified class name of ``e`` (bare for built-ins).

    >>> exception_class_name(ZeroDivisionError())
    'ZeroDivisionError'
    >>> from streamtable.errors import DeserializationError
    >>> exception_class_name(DeserializationError("x"))
    'streamtable.errors.DeserializationError'
    """
    cls = type(e)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _text(value: Any) -> bytes | None:
    return None if value is None else str(value).encode("utf-8", "surrogatepass")


def error_headers(
    e: BaseException,
    *,
    topic: str | None,
    partition: int | None,
    offset: int | None,
    operator: str,
    reason: str,
) -> list[tuple[str, bytes | None]]:
    """The headers of a dead-letter record for error ``e`` (see the module's table).

    Parameters
    ----------
    e : BaseException
        The error the handler saw; its traceback (if any) becomes the stack-trace header.
    topic, partition, offset : str, int, int or None
        The source record's coordinates; ``None``: a null topic, ``-1`` for the others.
    operator : str
        The node whose code failed (the source node for deserialization errors).
    reason : {"deserialization", "processing"}
        Why the record was skipped.

    Examples
    --------
    >>> hs = dict(error_headers(ValueError("bad"), topic="in", partition=1, offset=7,
    ...                         operator="KSTREAM-MAPVALUES-0000000001", reason="processing"))
    >>> hs["__streams.errors.exception"], hs["__streams.errors.message"]
    (b'ValueError', b'bad')
    >>> hs["__streams.errors.offset"], hs["streamtable.errors.operator"]
    (b'7', b'KSTREAM-MAPVALUES-0000000001')
    >>> hs = dict(error_headers(KeyError(), topic=None, partition=None, offset=None,
    ...                         operator="KSTREAM-AGGREGATE-0000000002", reason="processing"))
    >>> [hs[f"__streams.errors.{h}"] for h in ("topic", "partition", "offset", "message")]
    [None, b'-1', b'-1', None]
    """
    stack = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return [
        (HEADER_EXCEPTION, _text(exception_class_name(e))),
        (HEADER_MESSAGE, _text(str(e) or None)),
        (HEADER_STACKTRACE, _text(stack)),
        (HEADER_TOPIC, _text(topic)),
        (HEADER_PARTITION, _text(-1 if partition is None else partition)),
        (HEADER_OFFSET, _text(-1 if offset is None else offset)),
        (HEADER_OPERATOR, _text(operator)),
        (HEADER_REASON, _text(reason)),
    ]


@dataclass(frozen=True)
class DeadLetter:
    """One record for the dead-letter topic (built on the executor).

    Attributes
    ----------
    key, value : bytes or None
        The source record's bytes (``None`` when not available, see ``docs/error-handling.md``).
    timestamp : int or None
        The source record's timestamp in ms (``None``: none was set).
    headers : list of (str, bytes or None)
        From :func:`error_headers`.
    """

    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: list[tuple[str, bytes | None]]

    @classmethod
    def of(
        cls,
        e: BaseException,
        *,
        key: bytes | None,
        value: bytes | None,
        timestamp: Any,
        topic: str | None,
        partition: int | None,
        offset: int | None,
        operator: str,
        reason: str,
    ) -> DeadLetter:
        """The dead letter of a record (or change) on which ``e`` was raised: its bytes, its
        timestamp (``None`` unless a valid one, an int >= 0) and :func:`error_headers`.

        >>> d = DeadLetter.of(ValueError("x"), key=b"k", value=None, timestamp=-1, topic="t",
        ...                   partition=0, offset=3, operator="op", reason=PROCESSING)
        >>> d.key, d.value, d.timestamp, dict(d.headers)[HEADER_OFFSET]
        (b'k', None, None, b'3')
        """
        valid = isinstance(timestamp, int) and timestamp >= 0
        headers = error_headers(
            e, topic=topic, partition=partition, offset=offset, operator=operator, reason=reason
        )
        return cls(key, value, timestamp if valid else None, headers)


@dataclass(frozen=True)
class DeadLetterSpec:
    """Where one stage writes its dead letters (built on the driver; picklable).

    Attributes
    ----------
    topic : str
        ``errors.dead.letter.queue.topic.name``.
    output : OutputSpec
        The stage's output (stable id ``<query>.dlq.<node>``; transactional under
        ``exactly_once_v2``).
    by_source_partition : bool
        The stage runs before any shuffle, so each of its Spark tasks reads one source
        partition: tasks are named after it (``topic-partition``) for their transactions,
        because Spark may number such tasks differently when a batch is re-run (see
        :class:`streamtable.runtime.task_output.TaskCoordinates`).
    """

    topic: str
    output: OutputSpec
    by_source_partition: bool = False


class DeadLetterWriter:
    """Writes the dead letters of one Spark task of one stage; connects on the first letter.

    Call :meth:`close` when the task's input is exhausted (flush, or commit the task's
    transaction under ``exactly_once_v2``) and :meth:`fail` when the task fails instead.
    """

    def __init__(self, spec: DeadLetterSpec) -> None:
        self.spec = spec
        self._out: Any = None
        self.written = 0

    def write(self, letters: list[DeadLetter], slot: str | None = None) -> None:
        """Produce ``letters`` to the dead-letter topic (asynchronously until close).

        ``slot`` names the task (its source partition, ``topic-partition``) when
        :attr:`DeadLetterSpec.by_source_partition`; the first write's slot holds for the task.
        """
        if not letters:
            return
        if self._out is None:
            from streamtable.runtime.task_output import TaskOutput

            self._out = TaskOutput(self.spec.output, slot=slot)
        for d in letters:
            self._out.produce(
                self.spec.topic,
                d.key,
                d.value,
                timestamp=d.timestamp,
                headers=d.headers,  # type: ignore[arg-type]
            )
        self.written += len(letters)

    def close(self) -> None:
        """Flush or commit what was written.

        Raises
        ------
        StreamsError
            When the records could not be written (missing topic, broker down, ...).
        """
        out, self._out = self._out, None
        if out is not None:
            out.close()

    def fail(self) -> None:
        """The task fails: under ``exactly_once_v2`` abort its transaction (nothing becomes
        visible, as Kafka Streams aborts a failing task's transaction), else flush what was
        written (at-least-once: the dead letter of the record that stops the application is
        delivered, as Kafka Streams' ``LogAndFail`` handlers send it before failing).
        Never raises: the task's own error is the one to report.
        """
        out, self._out = self._out, None
        if out is None:
            return
        try:
            if self.spec.output.exactly_once:
                out.abort()
            else:
                out.close()
        except Exception as e:  # the task's error is reported; this one only logged
            log.warning("Could not write dead letters to %r: %s", self.spec.topic, e)
