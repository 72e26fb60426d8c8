"""What a failed streaming query's error means: transient (restart the query) or not, and the
line of it that says why.

A query's error reaches the driver as Spark's ``StreamingQueryException``; when a Python worker
or the ``foreachBatch`` proxy raised it, its message starts with Python's ``Traceback`` line and
names the cause only further down.
"""

from __future__ import annotations

import re

from streamtable.runtime.task_output import PRODUCER_FATAL

#: Marks of Kafka errors that go away on their own (leader elections, coordinator moves, a
#: broker restarting); Kafka Streams retries these for task.timeout.ms.
_TRANSIENT = (
    "org.apache.kafka.common.errors.TimeoutException",
    "NotLeaderOrFollowerException",
    "LeaderNotAvailableException",
    "NotCoordinatorException",
    "CoordinatorNotAvailableException",
    "NetworkException",
    "DisconnectException",
    "Timed out waiting for a node assignment",
    "_TRANSPORT",
    "_TIMED_OUT",
    "NOT_COORDINATOR",
    "COORDINATOR_NOT_AVAILABLE",
    "NOT_LEADER",
    "LEADER_NOT_AVAILABLE",
    # a zombie of an earlier run (or attempt) took a transactional id over: the batch is re-run
    # with a new producer, which fences the zombie in turn (Kafka Streams' TaskMigrated)
    "fenced by a newer instance",
    "PRODUCER_FENCED",
    PRODUCER_FATAL,
    # a Python process Spark started (a planner on the driver, a worker outside the daemon)
    # did not connect back within the 10 s Spark allows (a constant of its
    # PythonWorkerFactory): on an overloaded machine the next attempt starts another
    "Python worker failed to connect back",
)

#: A quoted span of one line: a record's value or a SQL literal inside an error (``The value
#: 'NOT_LEADER' of the type "STRING" cannot be cast``, ``b'...'``); an apostrophe inside a word
#: (``doesn't``) opens none.
_QUOTED = re.compile(r"""(?<!\w)b?'[^'\n]*'(?!\w)|(?<!\w)b?"[^"\n]*"(?!\w)""")

#: An exception line of a Python or Java traceback: ``module.Name: message``.
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.$]*(Error|Exception|Exit): ")


def is_transient(exc: BaseException) -> bool:
    """Whether a failed query's error is a transient Kafka error worth a restart.

    The marks of transient errors are looked for outside quoted spans: a record's value that
    a Spark SQL error quotes, such as ``'NOT_LEADER'``, makes no error transient (it would be
    retried for ``task.timeout.ms`` before failing).

    >>> is_transient(RuntimeError("org.apache.kafka.common.errors.TimeoutException: x"))
    True
    >>> is_transient(RuntimeError("User code raised ZeroDivisionError"))
    False
    >>> is_transient(RuntimeError("[CAST_INVALID_INPUT] The value 'NOT_LEADER' of the type "
    ...                           '"STRING" cannot be cast to "INT"'))
    False
    """
    text = _QUOTED.sub("", str(exc))
    return any(mark in text for mark in _TRANSIENT) and "User code raised" not in text


def headline(exc: BaseException, limit: int = 300) -> str:
    r"""The line of a query's error that names its cause, at most ``limit`` characters.

    That is the last exception line (``module.Name: message``) before Spark's
    ``=== Streaming Query ===`` section, else the first line.

    >>> headline(RuntimeError(
    ...     "An exception was raised by the Python Proxy. Return Message: Traceback (most "
    ...     "recent call last):\n  File \"x.py\", line 1, in f\n"
    ...     "KeyError: 'a'\n\nDuring handling of the above exception, another exception "
    ...     "occurred:\n\nstreamtable.errors.StreamsError: Producing to topic 't' failed\n\n"
    ...     "=== Streaming Query ===\nIdentifier: q"))
    "streamtable.errors.StreamsError: Producing to topic 't' failed"
    >>> headline(ValueError("one line"))
    'one line'
    """
    body = str(exc).split("=== Streaming Query ===", 1)[0]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    line = last_exception_line(body) or (lines[0] if lines else type(exc).__name__)
    return line[:limit]


def last_exception_line(text: str) -> str | None:
    r"""The last exception line (``module.Name: message``) of ``text``, stripped; ``None``
    when it has none.

    >>> last_exception_line("Traceback (most recent call last):\n  File \"x.py\"\n"
    ...                     "ValueError: bad\nstreamtable.errors.StreamsError: worse\ndone")
    'streamtable.errors.StreamsError: worse'
    >>> last_exception_line("all fine") is None
    True
    """
    found = [line.strip() for line in text.splitlines() if _EXCEPTION_LINE.match(line.strip())]
    return found[-1] if found else None
