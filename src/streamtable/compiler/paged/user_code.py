"""Calling user functions inside kernels, with Kafka Streams' fail-by-default handling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamtable.compiler.paged.records import Rec
from streamtable.errors import StreamsError


def user_code_error(
    e: Exception, node: str, role: str, topic: str | None, partition: int, offset: int
) -> StreamsError:
    """The error that stops the application when user code raises (Kafka Streams' default
    processing exception handler, ``LogAndFail``): names the operator, the role of the
    function and the record's topic, partition and offset. User code of stateful operators
    always fails: ``processing.exception.handler=log_and_continue`` covers the stateless
    operators only (see ``docs/error-handling.md``).
    """
    where = (
        f"the record at topic {topic!r} partition {partition} offset {offset}"
        if topic is not None
        else "an update of an upstream stateful operator (no source topic, partition, offset)"
    )
    return StreamsError(
        f"User code raised {type(e).__name__}: {e} in operator {node!r} ({role}) on {where}. "
        "Kafka Streams' default processing exception handler (LogAndFail) stops the "
        "application; in streamtable user code of stateful operators (aggregators, joiners, "
        "selectors of grouping and lookups) always does, whatever "
        "'processing.exception.handler' says: catch the error in the function to skip records."
    )


def call_user(fn: Callable[..., Any], args: tuple[Any, ...], node: str, role: str, rec: Rec) -> Any:
    """``fn(*args)``; an exception stops the application with a message naming the operator
    and the record (Kafka Streams' default processing exception handler, ``LogAndFail``).
    """
    try:
        return fn(*args)
    except Exception as e:
        raise user_code_error(e, node, role, rec.topic, rec.partition, rec.offset) from e
