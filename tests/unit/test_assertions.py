"""assert_stream_equal / assert_table_equal: what they compare and how they report."""

import pytest

from streamtable.testing import TestRecord, assert_stream_equal, assert_table_equal


def test_stream_compares_values_pairs_or_records_by_the_expected_shape():
    records = [TestRecord("a", 1, 10), TestRecord("b", None, 11)]
    assert_stream_equal(records, [1, None])
    assert_stream_equal(records, [("a", 1), ("b", None)])
    assert_stream_equal(records, [TestRecord("a", 1, 10), TestRecord("b", None)])  # ts ignored
    with pytest.raises(
        AssertionError, match=r"at index 0 .*got \('a', 1, 10\), expected \('a', 1, 99\)"
    ):
        assert_stream_equal(records, [TestRecord("a", 1, 99), TestRecord("b", None)])


def test_stream_pairs_match_records_without_timestamp():
    assert_stream_equal([("a", 1)], [TestRecord("a", 1)])
    with pytest.raises(AssertionError, match=r"got \('a', 1, None\), expected \('a', 1, 5\)"):
        assert_stream_equal([("a", 1)], [TestRecord("a", 1, 5)])


def test_stream_length_differences_are_named():
    with pytest.raises(
        AssertionError,
        match=r"at index 1 \(of 1 actual, 2 expected\): got nothing \(stream ended\)",
    ):
        assert_stream_equal([("a", 1)], [("a", 1), ("a", 2)])
    with pytest.raises(
        AssertionError, match=r"got \('a', 2\), expected nothing \(stream should end\)"
    ):
        assert_stream_equal([("a", 1), ("a", 2)], [("a", 1)])


def test_stream_reads_a_topic_like_object():
    class Topic:
        def read_records_to_list(self):
            return [TestRecord("k", "v", 1)]

    assert_stream_equal(Topic(), [("k", "v")])


def test_table_folds_changelogs_and_applies_tombstones():
    assert_table_equal([TestRecord("a", 1), TestRecord("a", None), TestRecord("b", 2)], {"b": 2})
    assert_table_equal({"a": 1}, [("a", 0), ("a", 1)])
    with pytest.raises(AssertionError, match=r"missing key 'a': expected 1"):
        assert_table_equal([("a", 1), ("a", None)], {"a": 1})
