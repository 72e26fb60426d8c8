"""Assertions on test outputs, with readable diffs: :func:`assert_stream_equal`,
:func:`assert_table_equal`.

Both take what a :class:`~streamtable.testing.TestOutputTopic` gives (the topic itself, whose
remaining records are read, or a list of records, pairs or values) and need no JVM.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["assert_stream_equal", "assert_table_equal"]

_MISSING = object()


def _items(actual: Any) -> list[Any]:
    reader = getattr(actual, "read_records_to_list", None)
    return list(reader()) if callable(reader) else list(actual)


def _is_record(x: Any) -> bool:
    return hasattr(x, "key") and hasattr(x, "value") and hasattr(x, "timestamp")


def _as_pair(x: Any) -> tuple[Any, Any]:
    if _is_record(x):
        return x.key, x.value
    if isinstance(x, tuple) and len(x) == 2:
        return x
    raise TypeError(f"Expected a record or a (key, value) pair; got {x!r}.")


def _project(actual: Any, expected: Any) -> Any:
    """``actual`` reduced to what ``expected`` states: key, value and (if the expected one is
    set) timestamp of a record; key and value of a pair; a value. A pair in ``actual`` is a
    record without timestamp; compared with a plain value it is compared whole.
    """
    if _is_record(actual):
        key, value, ts = actual.key, actual.value, actual.timestamp
    elif isinstance(actual, tuple) and len(actual) == 2:
        (key, value), ts = actual, None
    else:
        return actual  # a plain value
    if _is_record(expected):
        return (key, value, ts if expected.timestamp is not None else None)
    if isinstance(expected, tuple) and len(expected) == 2:
        return (key, value)
    return value if _is_record(actual) else actual


def _shape(expected: Any) -> Any:
    if _is_record(expected):
        return (expected.key, expected.value, expected.timestamp)
    return expected


def assert_stream_equal(actual: Any, expected: Iterable[Any]) -> None:
    """Assert that a stream of records equals ``expected``, in order, one by one.

    Parameters
    ----------
    actual : TestOutputTopic or iterable
        A test output topic (its remaining records are read) or a list of records,
        ``(key, value)`` pairs or values.
    expected : iterable
        What each record must be. The shape of each expected item says what is compared: a
        plain value compares a record's value (a pair in ``actual`` is compared whole); a
        ``(key, value)`` pair compares key and value; a
        :class:`~streamtable.testing.TestRecord` its key, value and, unless the expected
        timestamp is ``None``, its timestamp. Tombstones are ``None`` values.

    Raises
    ------
    AssertionError
        With the index of the first difference and a unified diff of the two sequences.

    Examples
    --------
    >>> assert_stream_equal([("a", 1), ("b", 1), ("a", 2)], [("a", 1), ("b", 1), ("a", 2)])
    >>> assert_stream_equal([("a", 1), ("a", 2)], [("a", 1), ("a", 3)])
    Traceback (most recent call last):
    ...
    AssertionError: streams differ at index 1 (of 2 actual, 2 expected): got ..., expected ...
    --- actual
    +++ expected
    @@ -1,2 +1,2 @@
     ('a', 1)
    -('a', 2)
    +('a', 3)
    """
    exp = list(expected)
    got_all = _items(actual)
    got = [
        _project(g, exp[i]) if i < len(exp) else _shape(g) if _is_record(g) else g
        for i, g in enumerate(got_all)
    ]
    want = [_shape(e) for e in exp]
    if got == want:
        return
    first = next(
        (i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
        min(len(got), len(want)),
    )
    g = repr(got[first]) if first < len(got) else "nothing (stream ended)"
    w = repr(want[first]) if first < len(want) else "nothing (stream should end)"
    diff = "\n".join(
        difflib.unified_diff(
            [repr(x) for x in got], [repr(x) for x in want], "actual", "expected", lineterm=""
        )
    )
    raise AssertionError(
        f"streams differ at index {first} (of {len(got)} actual, {len(want)} expected): "
        f"got {g}, expected {w}\n{diff}"
    )


def _table(records: Any) -> dict[Any, Any]:
    if isinstance(records, Mapping):
        return dict(records)
    out: dict[Any, Any] = {}
    for r in _items(records):
        k, v = _as_pair(r)
        if v is None:
            out.pop(k, None)  # a tombstone deletes the key
        else:
            out[k] = v
    return out


def assert_table_equal(actual: Any, expected: Mapping[Any, Any] | Iterable[Any]) -> None:
    """Assert that a table (the latest value per key) equals ``expected``.

    Parameters
    ----------
    actual : TestOutputTopic, mapping or iterable
        A mapping, or a changelog (a test output topic, records or ``(key, value)`` pairs)
        folded into the latest value per key; a ``None`` value (tombstone) deletes the key,
        as a table does (unlike ``read_key_values_to_map``, which keeps such a key with the
        value ``None``, as Kafka's ``readKeyValuesToMap``).
    expected : mapping or iterable
        The same forms.

    Raises
    ------
    AssertionError
        Listing the keys missing, the keys not expected and the keys whose values differ.

    Examples
    --------
    >>> assert_table_equal([("a", 1), ("b", 1), ("a", 2), ("b", None)], {"a": 2})
    >>> assert_table_equal({"a": 2, "c": 1}, {"a": 3, "b": 1})
    Traceback (most recent call last):
    ...
    AssertionError: tables differ (2 actual keys, 2 expected)
      missing key 'b': expected 1
      unexpected key 'c': 1
      key 'a': got 2, expected 3
    """
    got, want = _table(actual), _table(expected)
    if got == want:
        return
    lines = [f"tables differ ({len(got)} actual keys, {len(want)} expected)"]
    for k in want:
        if k not in got:
            lines.append(f"  missing key {k!r}: expected {want[k]!r}")
    for k in got:
        if k not in want:
            lines.append(f"  unexpected key {k!r}: {got[k]!r}")
    for k in want:
        if k in got and got[k] != want[k]:
            lines.append(f"  key {k!r}: got {got[k]!r}, expected {want[k]!r}")
    raise AssertionError("\n".join(lines))
