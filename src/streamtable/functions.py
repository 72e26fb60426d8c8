r"""Spark column expressions for stateless steps: ``pyspark.sql.functions``, usable before
Spark starts.

Where a stateless operation takes a Python callable (``KStream.filter``, ``filter_not``,
``map_values``, ``flat_map_values``, ``select_key``, ``group_by``), it also takes a column
expression built with this module. Such steps run as Spark SQL, with no Python worker and no
(de)serialization in Python: the fast path for what Spark's built-in functions can say.

Every public function of ``pyspark.sql.functions`` is here under the same name and with the
same arguments; each call is recorded and replayed when the topology is compiled (PySpark
itself builds columns only once a Spark session exists). The columns are ``key`` and
``value`` — the record's key and value decoded from their serdes: ``Serdes.string()`` as
``string``, ``Serdes.long()`` as ``bigint``, ``Serdes.integer()`` as ``int``,
``Serdes.bytes()`` as ``binary`` — and ``ts``, the record timestamp (ms, ``bigint``).
Null keys and values (tombstones) are SQL ``NULL``.

Examples
--------
>>> from streamtable import StreamsBuilder, Serdes
>>> from streamtable import functions as F
>>> b = StreamsBuilder()
>>> lines = b.stream("lines", key_serde=Serdes.string(), value_serde=Serdes.string())
>>> words = lines.flat_map_values(F.split(F.lower(F.col("value")), r"\s+"))
>>> words.filter(F.length("value") > 3).group_by(F.col("value")).count()  # doctest: +ELLIPSIS
KTable(KSTREAM-AGGREGATE-...)
>>> F.no_such_function
Traceback (most recent call last):
    ...
AttributeError: streamtable.functions has no 'no_such_function': it offers the functions of ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamtable.columns import ColumnExpression, function

__all__ = ["ColumnExpression", "col", "expr", "lit"]


def col(name: str) -> ColumnExpression:
    """The column ``name``: ``"key"``, ``"value"``, ``"ts"`` (ms), or a nested field
    (``"value.amount"`` when the value is a struct).

    Examples
    --------
    >>> col("value").cast("string")
    col('value').cast('string')
    """
    return function("col")(name)


def lit(value: Any) -> ColumnExpression:
    """A literal column (``pyspark.sql.functions.lit``).

    Examples
    --------
    >>> col("value") + lit(1)
    (col('value') + lit(1))
    """
    return function("lit")(value)


def expr(sql: str) -> ColumnExpression:
    """A Spark SQL expression over ``key``, ``value`` and ``ts`` (``pyspark.sql.functions.expr``).

    Examples
    --------
    >>> expr("upper(value)")
    expr('upper(value)')
    """
    return function("expr")(sql)


def __getattr__(name: str) -> Callable[..., ColumnExpression]:
    return function(name)
