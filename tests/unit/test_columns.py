"""Column expressions recorded without Spark (streamtable.functions, streamtable.columns)."""

import pickle

import pytest

from streamtable import StreamsBuilder
from streamtable import functions as F
from streamtable.columns import ColumnExpression, is_column_expression, negated_predicate
from streamtable.errors import TopologyError


def test_calls_operators_and_methods_are_recorded_in_order():
    e = F.when(F.col("value").isNull(), F.lit(0)).otherwise(F.length("value") * 2 + 1)
    assert repr(e) == ("when(col('value').isNull(), lit(0)).otherwise(((length('value') * 2) + 1))")
    assert repr(1 - F.col("value")) == "(1 - col('value'))"
    assert repr(F.col("value")[0]) == "col('value')[0]"
    assert repr(-F.col("value") <= 3) == "(-col('value') <= 3)"


def test_filter_not_keeps_false_and_null():
    assert repr(negated_predicate(F.col("value") > 1)) == (
        "~coalesce((col('value') > 1), lit(False))"
    )


def test_unknown_function_and_method_are_refused_when_written():
    with pytest.raises(AttributeError, match="streamtable.functions has no 'lowercase'"):
        F.lowercase("value")  # noqa: B018
    with pytest.raises(AttributeError, match="has no method 'lower'"):
        F.col("value").lower()


def test_expression_is_neither_truthy_nor_iterable():
    e = F.col("a") > 1
    with pytest.raises(TypeError, match="use '&' for 'and'"):
        _ = e and True
    with pytest.raises(TypeError, match="not iterable"):
        list(e)


def test_expressions_pickle_and_are_recognized():
    e = F.split(F.col("value"), " ")
    back = pickle.loads(pickle.dumps(e))
    assert isinstance(back, ColumnExpression) and repr(back) == repr(e)
    assert is_column_expression(e)
    assert not is_column_expression(lambda k, v: True)
    assert not is_column_expression("value")


def test_dsl_accepts_expressions_where_documented_and_names_them_otherwise():
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter(F.col("value") > 1).filter_not(F.col("key").isNull()).map_values(
        F.upper("value")
    ).flat_map_values(F.split("value", " ")).select_key(F.col("value")).group_by(
        F.col("key")
    ).count()
    with pytest.raises(TopologyError, match=r"KStream.filter expects a callable taking "
                       r"\(key, value\) or a column expression"):  # fmt: skip
        s.filter("value > 1")
    with pytest.raises(TopologyError, match="KStream.map expects a callable"):
        s.map(F.col("value"))


def test_branch_refuses_a_column_expression_and_says_what_to_do():
    b = StreamsBuilder()
    with pytest.raises(TopologyError, match="filter the stream once per branch"):
        b.stream("in").split().branch(F.col("value") > 1)


def test_the_dsl_layer_imports_no_pyspark():
    """DESIGN.md's layers: the DSL builds a graph and stays Spark-free (column expressions are
    recorded in streamtable.columns, outside it)."""
    import ast
    from pathlib import Path

    import streamtable.dsl

    found = []
    for path in Path(streamtable.dsl.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "pyspark"]
    assert found == []
