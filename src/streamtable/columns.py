"""Column expressions accepted in place of Python callables.

A :class:`ColumnExpression` records calls of ``pyspark.sql.functions`` and of ``Column``
methods and operators without a Spark session (PySpark builds real columns only once a
SparkContext exists, while a topology is defined before its application starts). The compiler
replays the record into a real ``pyspark.sql.Column`` when it lowers the topology
(:meth:`ColumnExpression.resolve`), so stateless steps written this way run as Spark SQL with
no Python worker.

This module imports no PySpark at import time, and the DSL only calls its PySpark-free parts
(:func:`is_column_expression`, :func:`negated_predicate`): the DSL layer stays Spark-free.
Writing an expression (:mod:`streamtable.functions`) imports PySpark to check the names used;
replaying it needs a Spark session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamtable.errors import TopologyError

__all__ = [
    "ColumnExpression",
    "function",
    "is_column_expression",
    "negated_predicate",
    "resolve_column",
]

_BINARY = {
    "__eq__": "==",
    "__ne__": "!=",
    "__lt__": "<",
    "__le__": "<=",
    "__gt__": ">",
    "__ge__": ">=",
    "__add__": "+",
    "__sub__": "-",
    "__mul__": "*",
    "__truediv__": "/",
    "__mod__": "%",
    "__pow__": "**",
    "__and__": "&",
    "__or__": "|",
}
_REFLECTED = {
    "__radd__": "+",
    "__rsub__": "-",
    "__rmul__": "*",
    "__rtruediv__": "/",
    "__rmod__": "%",
    "__rpow__": "**",
    "__rand__": "&",
    "__ror__": "|",
}


def _text(arg: Any) -> str:
    if isinstance(arg, ColumnExpression):
        return arg._text
    if isinstance(arg, list | tuple):
        inner = ", ".join(_text(a) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner})"
    if callable(arg):
        from streamtable.dsl._callables import describe_callable

        return describe_callable(arg)
    return repr(arg)


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return ", ".join([_text(a) for a in args] + [f"{k}={_text(v)}" for k, v in kwargs.items()])


def _resolved(arg: Any) -> Any:
    if isinstance(arg, ColumnExpression):
        return arg.resolve()
    if isinstance(arg, list):
        return [_resolved(a) for a in arg]
    if isinstance(arg, tuple):
        return tuple(_resolved(a) for a in arg)
    return arg


class ColumnExpression:
    r"""A Spark column expression recorded without a Spark session.

    Build one with :mod:`streamtable.functions` (``col``, ``lit``, ``expr`` and every other
    function of ``pyspark.sql.functions``) and combine it with ``Column``'s operators and
    methods (``>``, ``&``, ``~``, ``.cast("string")``, ``.isNull()``...). Inside a stateless
    operation the columns are ``key`` and ``value`` (decoded from their serdes, see
    :mod:`streamtable.functions`) and ``ts`` (the record timestamp, ms).

    Examples
    --------
    >>> from streamtable import functions as F
    >>> F.split(F.lower(F.col("value")), r"\W+")
    split(lower(col('value')), '\\W+')
    >>> (F.col("amount") > 100) & ~F.col("flagged")
    ((col('amount') > 100) & ~col('flagged'))
    >>> bool(F.col("amount") > 100)
    Traceback (most recent call last):
        ...
    TypeError: A column expression has no truth value (col('amount') > 100): use '&' for ...
    """

    __slots__ = ("_kind", "_name", "_target", "_args", "_kwargs", "_text")

    def __init__(
        self,
        kind: str,
        name: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        target: ColumnExpression | None = None,
        text: str,
    ) -> None:
        self._kind = kind  # "function" | "method" | "binary" | "reflected" | "unary"
        self._name = name
        self._target = target
        self._args = args
        self._kwargs = dict(kwargs or {})
        self._text = text

    # -- replay -------------------------------------------------------------------------

    def resolve(self) -> Any:
        """The ``pyspark.sql.Column`` this expression records (needs a Spark session).

        Raises
        ------
        TopologyError
            If PySpark refuses a recorded call (wrong arguments); the message names the
            expression.
        """
        from pyspark.sql import functions as F

        args = _resolved(self._args)
        kwargs = {k: _resolved(v) for k, v in self._kwargs.items()}
        try:
            if self._kind == "function":
                return getattr(F, self._name)(*args, **kwargs)
            target = self._target.resolve() if self._target is not None else None
            if self._kind == "method":
                return getattr(target, self._name)(*args, **kwargs)
            if self._kind == "unary":
                return getattr(target, self._name)()
            if self._kind == "binary":
                return getattr(target, self._name)(*args)
            # reflected: ``other <op> self`` with a plain Python ``other``
            return getattr(target, self._name)(*args)
        except TopologyError:
            raise
        except Exception as e:
            raise TopologyError(
                f"The column expression {self._text} could not be built with PySpark: {e}. "
                "Check the arguments against pyspark.sql.functions / Column."
            ) from e

    # -- recording ----------------------------------------------------------------------

    def _binary(self, name: str, other: Any) -> ColumnExpression:
        text = f"({self._text} {_BINARY[name]} {_text(other)})"
        return ColumnExpression("binary", name, (other,), target=self, text=text)

    def _reflected(self, name: str, other: Any) -> ColumnExpression:
        text = f"({_text(other)} {_REFLECTED[name]} {self._text})"
        return ColumnExpression("reflected", name, (other,), target=self, text=text)

    def __invert__(self) -> ColumnExpression:
        return ColumnExpression("unary", "__invert__", target=self, text=f"~{self._text}")

    def __neg__(self) -> ColumnExpression:
        return ColumnExpression("unary", "__neg__", target=self, text=f"-{self._text}")

    def __getitem__(self, item: Any) -> ColumnExpression:
        text = f"{self._text}[{_text(item)}]"
        return ColumnExpression("method", "__getitem__", (item,), target=self, text=text)

    def __getattr__(self, name: str) -> Callable[..., ColumnExpression]:
        if name.startswith("_"):
            raise AttributeError(name)
        from pyspark.sql import Column

        if not callable(getattr(Column, name, None)):
            raise AttributeError(
                f"A column expression has no method {name!r}: it offers the methods of "
                "pyspark.sql.Column (cast, isNull, isin, startswith, getField, otherwise, ...)."
            )

        def method(*args: Any, **kwargs: Any) -> ColumnExpression:
            shown = _arguments(args, kwargs)
            return ColumnExpression(
                "method", name, args, kwargs, target=self, text=f"{self._text}.{name}({shown})"
            )

        return method

    def __bool__(self) -> bool:
        raise TypeError(
            f"A column expression has no truth value {self._text}: use '&' for 'and', '|' for "
            "'or', '~' for 'not'."
        )

    def __iter__(self) -> Any:
        raise TypeError(f"A column expression is not iterable: {self._text}")

    def __repr__(self) -> str:
        return self._text

    __hash__ = object.__hash__


def _add_operators() -> None:
    def binary(name: str) -> Callable[[ColumnExpression, Any], ColumnExpression]:
        return lambda self, other: self._binary(name, other)

    def reflected(name: str) -> Callable[[ColumnExpression, Any], ColumnExpression]:
        return lambda self, other: self._reflected(name, other)

    for name in _BINARY:
        setattr(ColumnExpression, name, binary(name))
    for name in _REFLECTED:
        setattr(ColumnExpression, name, reflected(name))


_add_operators()


def function(name: str) -> Callable[..., ColumnExpression]:
    """A recorder of ``pyspark.sql.functions.<name>``.

    Raises
    ------
    AttributeError
        If ``pyspark.sql.functions`` has no public function ``name``.
    """
    from pyspark.sql import functions as F

    if name.startswith("_") or not callable(getattr(F, name, None)):
        raise AttributeError(
            f"streamtable.functions has no {name!r}: it offers the functions of "
            "pyspark.sql.functions (col, lit, expr, lower, split, when, ...)."
        )

    def call(*args: Any, **kwargs: Any) -> ColumnExpression:
        shown = _arguments(args, kwargs)
        return ColumnExpression("function", name, args, kwargs, text=f"{name}({shown})")

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``pyspark.sql.functions.{name}``, recorded (see :mod:`streamtable.functions`)."
    return call


def is_column_expression(obj: object) -> bool:
    """Whether ``obj`` is a column expression: a :class:`ColumnExpression` or a real
    ``pyspark.sql.Column`` (recognized by its class, without importing PySpark).
    """
    if isinstance(obj, ColumnExpression):
        return True
    return any(
        c.__name__ == "Column" and c.__module__.startswith("pyspark.sql") for c in type(obj).__mro__
    )


def resolve_column(obj: Any) -> Any:
    """The ``pyspark.sql.Column`` of a column expression (real columns as they are)."""
    return obj.resolve() if isinstance(obj, ColumnExpression) else obj


def negated_predicate(predicate: Any) -> ColumnExpression:
    """``filter_not``'s predicate as a ``filter`` one: true where ``predicate`` is false or
    ``NULL`` (as a Python predicate returning ``None`` keeps the record in ``filter_not``).
    Recorded, not built: ``predicate`` may be a real ``Column``, resolved as it is.
    """
    false = ColumnExpression("function", "lit", (False,), text="lit(False)")
    text = f"coalesce({_text(predicate)}, lit(False))"
    return ~ColumnExpression("function", "coalesce", (predicate, false), text=text)
