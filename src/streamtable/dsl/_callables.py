"""Checks on user callables, done when the topology is defined (not inside a running query)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from streamtable.errors import TopologyError


def describe_callable(fn: Callable[..., Any]) -> str:
    """A short human name for ``fn`` (``<lambda> at file.py:12`` or ``module.func``)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    code = getattr(fn, "__code__", None)
    if code is not None and name.endswith("<lambda>"):
        return f"<lambda> at {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else name


def check_callable(fn: object, operation: str, params: str, nargs: int) -> Callable[..., Any]:
    """Return ``fn`` if it can be called with ``nargs`` positional arguments.

    Raises
    ------
    TopologyError
        If ``fn`` is not callable or its signature cannot take ``nargs`` arguments; the
        message names the operation, the callable and the expected parameters.
    """
    if not callable(fn):
        raise TopologyError(
            f"{operation} expects a callable taking ({params}); got {type(fn).__name__} {fn!r} "
            "(in Kafka Streams the Java compiler refuses it too)."
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without signatures: trust them
        return fn
    try:
        sig.bind(*range(nargs))
    except TypeError:
        raise TopologyError(
            f"{operation} expects a callable taking ({params}), i.e. {nargs} positional "
            f"argument(s); {describe_callable(fn)} has signature {sig} (in Kafka Streams the "
            "Java compiler refuses a function of another arity too)."
        ) from None
    return fn


def check_callable_or_column(
    fn: object, operation: str, params: str, nargs: int
) -> Callable[..., Any]:
    """Like :func:`check_callable`, but a column expression (:mod:`streamtable.functions`, or
    a ``pyspark.sql.Column``) is accepted as it is.
    """
    from streamtable.columns import is_column_expression

    if is_column_expression(fn):
        return fn  # type: ignore[return-value]
    if not callable(fn):
        raise TopologyError(
            f"{operation} expects a callable taking ({params}) or a column expression "
            f"(streamtable.functions, e.g. F.col('value')); got {type(fn).__name__} {fn!r}."
        )
    return check_callable(fn, operation, params, nargs)


def check_processor_supplier(supplier: object, operation: str) -> None:
    """Check that ``supplier()`` returns a new processor with ``process`` each call.

    Raises
    ------
    TopologyError
        If ``supplier`` is not callable with no arguments, returns the same object twice, or
        returns something without a callable ``process``.
    """
    check_callable(supplier, f"{operation} (processor supplier)", "", 0)
    assert callable(supplier)
    try:
        first, second = supplier(), supplier()
    except Exception as e:
        raise TopologyError(
            f"{operation}: calling the processor supplier {describe_callable(supplier)} "
            f"failed: {e!r}. The supplier must create a processor without arguments."
        ) from e
    if not callable(getattr(first, "process", None)):
        raise TopologyError(
            f"{operation}: the processor supplier {describe_callable(supplier)} returned "
            f"{type(first).__name__}, which has no process(record) method; subclass "
            "streamtable.Processor."
        )
    if first is second:
        raise TopologyError(
            f"{operation}: the processor supplier {describe_callable(supplier)} returned the "
            "same object twice; it must return a new processor each call (Kafka Streams: "
            "'ProcessorSupplier#get() must return a new object each time it is called'). "
            "Pass the processor class, or a function that creates one."
        )
