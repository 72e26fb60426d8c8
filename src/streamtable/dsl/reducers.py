"""Built-in reducers: ``sum``, ``min`` and ``max`` of a grouped stream's values.

A :class:`Reducer` is a ``reducer(aggregate, value)`` like any Python callable given to
``KGroupedStream.reduce``, and gives the same results wherever it runs. What it adds is that
the compiler knows what it computes: an unwindowed ``reduce`` with one, over values whose serde
Spark reads itself (``Serdes.long()`` or ``Serdes.integer()``, given to ``group_by_key`` or
``group_by``), runs as Spark's own aggregation and state — as ``count()`` does — with no Python
fold and no state round trip per record. Elsewhere (windows, other serdes, a table filtered
by ``KTable.filter``, which needs old aggregates) the reducer runs in Python, with the same
results.

Pure Python: the reducers are called in Spark's Python workers when they run in Python.
"""

from __future__ import annotations

import builtins
from typing import Any, ClassVar

__all__ = ["Reducer", "Reducers"]


class Reducer:
    """A built-in ``reducer(aggregate, value)`` that the compiler can run as Spark's aggregation.

    Instances come from :class:`Reducers`; they compare equal by what they compute and pickle
    by name, so a topology holding one can be shipped to Spark's workers.

    Parameters
    ----------
    name : {"sum", "min", "max"}
        The Spark aggregate function it lowers to.

    Raises
    ------
    ValueError
        If ``name`` is none of those.
    """

    _FOLDS: ClassVar[dict[str, Any]] = {
        "sum": lambda aggregate, value: aggregate + value,
        "min": builtins.min,
        "max": builtins.max,
    }

    def __init__(self, name: str) -> None:
        if name not in self._FOLDS:
            raise ValueError(f"no built-in reducer {name!r}: use one of {sorted(self._FOLDS)}")
        self.name = name
        self._fold = self._FOLDS[name]

    def __call__(self, aggregate: Any, value: Any) -> Any:
        """The new aggregate of ``aggregate`` and the next ``value``."""
        return self._fold(aggregate, value)

    def __repr__(self) -> str:
        return f"Reducers.{self.name}()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reducer) and other.name == self.name

    def __hash__(self) -> int:
        return hash((Reducer, self.name))

    def __reduce__(self) -> tuple[type[Reducer], tuple[str]]:
        return (Reducer, (self.name,))


class Reducers:
    """Built-in reducers for ``KGroupedStream.reduce`` (and its windowed forms).

    Kafka Streams has no built-in reducers (a ``Reducer`` is user code); these give what a
    ksqlDB ``SUM``/``MIN``/``MAX`` gives, with ``reduce``'s semantics: a key's first value is
    its initial aggregate, records with a null key or a null value are skipped, the output
    record's timestamp is the largest input timestamp of the key so far.

    Unwindowed, over values whose serde is ``Serdes.long()`` or ``Serdes.integer()`` (given to
    ``group_by_key``/``group_by``), the reduction runs as Spark's own aggregation: no Python
    fold, no per-record state round trip. Values that come from a column expression
    (:mod:`streamtable.functions`) reach it without any Python worker; values read from a Long
    or Integer topic still pass a Python stage that validates their bytes (the deserialization
    handler's), as for any operator. Otherwise (also when ``KTable.filter`` reads the result,
    which needs old aggregates) the reducer runs in Python with the same results.

    Sums out of range: natively, under Spark's ANSI mode (Spark 4's default), a Long sum whose
    running total leaves the 64-bit range stops the query with ``ARITHMETIC_OVERFLOW`` — even
    one that would come back into range, as partial sums depend on how Spark splits the
    micro-batch — and an Integer sum out of the 32-bit range with ``CAST_OVERFLOW``. Kafka
    Streams' Java ``+`` wraps around silently; a Python fold's result beyond the serde's range
    fails to serialize.

    Examples
    --------
    >>> from streamtable import Reducers, Serdes, StreamsBuilder
    >>> Reducers.sum()(3, 4), Reducers.min()(3, 4), Reducers.max()(3, 4)
    (7, 3, 4)
    >>> b = StreamsBuilder()
    >>> amounts = b.stream("amounts", value_serde=Serdes.long())
    >>> amounts.group_by_key(value_serde=Serdes.long()).reduce(Reducers.sum(), name="totals")
    KTable(KSTREAM-REDUCE-...)
    """

    @staticmethod
    def sum() -> Reducer:
        """The sum of a key's values (``aggregate + value``).

        Returns
        -------
        Reducer
            ``reducer(aggregate, value)``, for ``KGroupedStream.reduce``.
        """
        return Reducer("sum")

    @staticmethod
    def min() -> Reducer:
        """The smallest of a key's values (Python's ``min``; Spark's ``min`` natively).

        Returns
        -------
        Reducer
            ``reducer(aggregate, value)``, for ``KGroupedStream.reduce``.
        """
        return Reducer("min")

    @staticmethod
    def max() -> Reducer:
        """The largest of a key's values (Python's ``max``; Spark's ``max`` natively).

        Returns
        -------
        Reducer
            ``reducer(aggregate, value)``, for ``KGroupedStream.reduce``.
        """
        return Reducer("max")
