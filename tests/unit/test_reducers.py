"""Built-in reducers: their Python results, and when the DSL marks them for Spark's aggregation."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from streamtable import Reducers, Serdes, StreamsBuilder, TimeWindows
from streamtable.dsl.reducers import Reducer
from streamtable.topology.nodes import AggregateNode


@pytest.mark.parametrize(
    ("reducer", "values", "want"),
    [
        (Reducers.sum(), [5, -2, 9], 12),
        (Reducers.min(), [5, -2, 9], -2),
        (Reducers.max(), [5, -2, 9], 9),
        (Reducers.max(), ["b", "c", "a"], "c"),
    ],
)
def test_a_built_in_reducer_folds_like_the_python_function_it_names(reducer, values, want):
    aggregate = values[0]
    for value in values[1:]:
        aggregate = reducer(aggregate, value)
    assert aggregate == want


def test_a_built_in_reducer_pickles_by_name_and_compares_by_what_it_computes():
    for reducer in (Reducers.sum(), Reducers.min(), Reducers.max()):
        copy = pickle.loads(pickle.dumps(reducer))
        assert copy == reducer and hash(copy) == hash(reducer) and copy(2, 3) == reducer(2, 3)
    assert Reducers.sum() != Reducers.max()
    assert repr(Reducers.min()) == "Reducers.min()"
    with pytest.raises(ValueError, match=r"no built-in reducer 'avg': use one of \['max', "):
        Reducer("avg")


def _reduce_node(value_serde, reducer, windows=None):
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key(value_serde=value_serde)
    if windows is not None:
        grouped = grouped.windowed_by(windows)
    grouped.reduce(reducer).to_stream().to("out")
    (node,) = [n for n in b.build()._graph.nodes if isinstance(n, AggregateNode)]
    assert node.aggregation is not None
    return node.aggregation


@pytest.mark.parametrize("serde", [Serdes.long(), Serdes.integer()])
@pytest.mark.parametrize("reducer", [Reducers.sum(), Reducers.min(), Reducers.max()])
def test_an_unwindowed_built_in_reducer_over_long_or_integer_values_is_native(serde, reducer):
    assert _reduce_node(serde, reducer).native == reducer.name


@pytest.mark.parametrize(
    ("serde", "reducer", "windows"),
    [
        (Serdes.double(), Reducers.sum(), None),  # bytes Spark does not read: Python
        (Serdes.string(), Reducers.max(), None),
        (None, Reducers.max(), None),  # the configured default serde: unknown to the DSL
        (Serdes.long(), max, None),  # a Python callable, even a builtin, stays Python
        (Serdes.long(), Reducers.max(), TimeWindows.of_size_with_no_grace(timedelta(seconds=1))),
    ],
    ids=["double", "string", "default-serde", "python-max", "windowed"],
)
def test_a_reduce_spark_cannot_run_natively_keeps_the_python_fold(serde, reducer, windows):
    aggregation = _reduce_node(serde, reducer, windows)
    assert aggregation.native is None
    first = aggregation.aggregator("k", 7, aggregation.initializer())
    assert aggregation.aggregator("k", 4, first) == reducer(7, 4)


def test_switching_a_python_reduce_to_a_built_in_one_changes_the_checkpoint_fingerprint():
    """Spark's aggregation state and a Python fold's are not interchangeable, nor Spark's
    ``bigint`` and ``int`` states: a restart from the other one's checkpoint is refused as an
    incompatible topology change.
    """

    def topology(reducer, serde=Serdes.long()):  # noqa: B008 (a constant)
        b = StreamsBuilder()
        b.stream("in").group_by_key(value_serde=serde).reduce(
            reducer, name="latest"
        ).to_stream().to("out")
        return b.build()

    assert topology(max).fingerprint() != topology(Reducers.max()).fingerprint()
    assert topology(Reducers.max()).fingerprint() == topology(Reducers.max()).fingerprint()
    assert (
        topology(Reducers.max()).fingerprint()
        != topology(Reducers.max(), Serdes.integer()).fingerprint()
    )


@pytest.mark.parametrize(
    ("store_serde", "want"),
    [(Serdes.long(), [b"\xff" * 8, None]), (Serdes.integer(), [b"\xff" * 4, None])],
)
def test_a_native_bigint_goes_to_its_changelog_in_the_stores_value_serde(store_serde, want):
    """A count's or Long reduction's ``bigint`` is written as Kafka's Long only when the store's
    serde is Long; a store materialized with another serde gets that serde's bytes, as a
    Python fold's changelog does (and the sink then cannot write the changelog as it is).
    """
    from streamtable.compiler.changelog import ChangelogWriter, _bytes_as_they_are
    from streamtable.compiler.codecs import LongColumnCodec

    writer = ChangelogWriter("t-store-changelog", LongColumnCodec(), store_serde, spec=None)
    assert writer.encode([-1, None]) == want
    assert _bytes_as_they_are(LongColumnCodec(), store_serde) == (store_serde.kind == "long")


def test_the_fingerprint_names_each_aggregations_state_form_and_keeps_counts_and_folds_as_before():
    """Checkpoints of ``count()`` and Python folds written before built-in reducers existed
    keep their fingerprint: their kinds stay ``"count"`` and ``"python"``.
    """
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key(value_serde=Serdes.integer())
    grouped.count(name="c").to_stream().to("c-out")
    grouped.reduce(max, name="p").to_stream().to("p-out")
    grouped.reduce(Reducers.sum(), name="s").to_stream().to("s-out")
    kinds = {e["store"]: e["kind"] for e in b.build().fingerprint()["stateful"]}
    assert kinds == {"c": "count", "p": "python", "s": "sum/integer"}
