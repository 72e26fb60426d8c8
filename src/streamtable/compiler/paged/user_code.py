"""Calling user functions inside kernels, with Kafka Streams' fail-by-default handling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamtable.compiler.paged.records import Rec
from streamtable.errors import StreamsError


def call_user(fn: Callable[..., Any], args: tuple[Any, ...], node: str, role: str, rec: Rec) -> Any:
    """``fn(*args)``; an exception stops the application with a message naming the operator
    and the record (Kafka Streams' default processing exception handler, ``LogAndFail``).
    """
    try:
        return fn(*args)
    except Exception as e:
        raise StreamsError(
            f"User code raised {type(e).__name__}: {e} in operator {node!r} ({role}) on the "
            f"record at topic {rec.topic!r} partition {rec.partition} offset {rec.offset}. "
            "Kafka Streams' default processing exception handler (LogAndFail) stops the "
            "application."
        ) from e
