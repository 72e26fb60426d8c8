"""``filter``/``map_values`` on a table's changes (:class:`TableOpStage`) without Spark."""

import pytest

from _support import change_batch
from streamtable.compiler.codecs import PickleCodec
from streamtable.compiler.paged.stages import TableOpStage
from streamtable.compiler.paged.user_code import user_code_error
from streamtable.errors import StreamsError
from streamtable.topology.nodes import TableOpKind

P = PickleCodec()


def apply(ops, changes, continue_on_error=False):
    """``[(key, new, old)]`` forwarded by the chain ``ops`` for ``changes`` (with ``skipped``
    last under ``continue_on_error``).
    """
    batch = change_batch(changes, topic="t")
    named = tuple((kind, fn, f"op-{i}") for i, (kind, fn) in enumerate(ops))
    out = next(iter(TableOpStage(named, P, P, continue_on_error)([batch]))).to_pydict()
    columns = [P.decode_many(out["key"]), P.decode_many(out["value"]), P.decode_many(out["old"])]
    if continue_on_error:
        columns.append(out["skipped"])
    return list(zip(*columns, strict=True))


def test_a_filter_forwards_nothing_for_a_row_that_neither_passes_nor_passed():
    # Kafka Streams' KTableFilter with old values: (null, null) after the predicate is dropped
    at_least_2 = (TableOpKind.FILTER, lambda k, n: n >= 2)
    changes = [("a", 1, None), ("b", 2, 1), ("c", 1, 2), ("d", 1, 0), ("e", None, 1)]
    assert apply([at_least_2], changes) == [("b", 2, None), ("c", None, 2)]


def test_map_values_forwards_every_change_even_when_it_maps_to_none():
    # KTableMapValues forwards each change it gets, whatever the mapper returns; a filter
    # after it drops a change that is (None, None) by then
    to_none = (TableOpKind.MAP_VALUES, lambda n: None)
    assert apply([to_none], [("a", 1, None), ("b", 2, 1)]) == [("a", None, None), ("b", None, None)]
    keep_all = (TableOpKind.FILTER, lambda k, n: True)
    assert apply([to_none, keep_all], [("a", 1, None)]) == []


def test_user_code_errors_stop_or_mark_the_change_skipped_under_log_and_continue():
    inverse = (TableOpKind.MAP_VALUES, lambda n: 10 // n)
    changes = [("a", 0, None), ("b", 5, 0), ("c", 2, None)]
    with pytest.raises(StreamsError, match=r"ZeroDivisionError.*'op-0' \(map_values\).*offset 0"):
        apply([inverse], changes)
    # under log_and_continue the failing changes are marked (then counted and removed)
    assert apply([inverse], changes, continue_on_error=True) == [
        ("a", None, None, True),
        ("b", None, None, True),
        ("c", 5, None, False),
    ]


def test_a_handled_error_under_log_and_fail_says_how_to_skip_such_changes():
    # read as upserts, the chain is covered by processing.exception.handler (LogAndFail)
    stage = TableOpStage(((TableOpKind.FILTER, lambda k, n: 1 // n, "ratio"),), P, P, handled=True)
    with pytest.raises(
        StreamsError,
        match=r"ZeroDivisionError.*'ratio' \(filter\) on the update made by the record at topic "
        r"'t' partition 0 offset 0\. .*'processing.exception.handler'='log_and_continue' to "
        r"skip such changes",
    ):
        next(iter(stage([change_batch([("a", 0, None)], topic="t")])))


def test_an_error_on_an_aggregations_update_says_it_has_no_source_coordinates():
    error = user_code_error(ZeroDivisionError("x"), "f", "filter", None, None, None)
    assert "operator 'f' (filter) on an update of an upstream stateful operator (no source " in (
        str(error)
    )


def test_an_operator_another_query_reports_drops_its_failing_changes_silently():
    # one table op chain lowered in two queries (two sinks at different points of it): only
    # the query that reports an operator counts and dead-letters its failures
    inverse = (TableOpKind.MAP_VALUES, lambda n: 10 // n, "op-0")
    stage = TableOpStage(
        (inverse,), P, P, continue_on_error=True, handled=True, unreported=frozenset({"op-0"})
    )
    batch = change_batch([("a", 0, None), ("c", 2, None)], topic="t")
    out = next(iter(stage([batch]))).to_pydict()
    assert P.decode_many(out["key"]) == ["c"]
    assert out["skipped"] == [False]
