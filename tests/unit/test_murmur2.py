"""murmur2 and the default partitioner against the Java client (kafka-clients 3.9.1).

Vectors printed by tests/vectors/KafkaVectors.java (Utils.murmur2, Utils.toPositive, and
toPositive % n); the first rows include Kafka's own UtilsTest.testMurmur2 cases.
"""

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtable.serde.murmur2 import (
    default_partition,
    default_partitions,
    murmur2,
    murmur2_many,
    to_positive,
)

pytestmark = pytest.mark.unit

ALL_BYTES = bytes(range(256)).hex()

# (key hex, murmur2, toPositive, p%3, p%4, p%7, p%12) — printed by the Java client.
JAVA_VECTORS = [
    ("", 275646681, 275646681, 0, 1, 2, 9),
    ("61", -1563381124, 584102524, 1, 0, 5, 4),
    ("6162", 316155434, 316155434, 2, 2, 0, 2),
    ("616263", 479470107, 479470107, 0, 3, 4, 3),
    ("61626364", -1323649548, 823834100, 2, 0, 5, 8),
    ("6162636465", 461995741, 461995741, 1, 1, 4, 1),
    ("3231", -973932308, 1173551340, 0, 0, 3, 0),
    ("666f6f626172", -790332482, 1357151166, 0, 2, 0, 6),
    ("612d6c6974746c652d6269742d6c6f6e672d737472696e67", -985981536, 1161502112, 2, 0, 1, 8),
    ("554131353435", -2001577626, 145906022, 2, 2, 3, 2),
    ("6b61666b61", -798503068, 1348980580, 1, 0, 3, 4),
    ("68c3a96c6c6f2077c3b6726c6420f09f9880", -160247046, 1987236602, 2, 2, 1, 2),
    ("00", 375494588, 375494588, 2, 0, 0, 8),
    ("ff", -311467685, 1836015963, 0, 3, 5, 3),
    ("ffffffff", 644171429, 644171429, 2, 1, 6, 5),
    ("80808080ff", 1449438087, 1449438087, 0, 3, 6, 3),
    ("00000000000000000001", 624127835, 624127835, 2, 3, 2, 11),
    ("fffefdfcfbfaf9", -166236347, 1981247301, 0, 1, 5, 9),
    (ALL_BYTES, -1948347274, 199136374, 1, 2, 3, 10),
]

# Kafka's UtilsTest.testMurmur2 (clients module), verbatim.
KAFKA_UTILS_TEST = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize(("key_hex", "hash_", "positive", "p3", "p4", "p7", "p12"), JAVA_VECTORS)
def test_matches_java_client(key_hex, hash_, positive, p3, p4, p7, p12):
    key = bytes.fromhex(key_hex)
    assert murmur2(key) == hash_
    assert to_positive(hash_) == positive
    assert [default_partition(key, n) for n in (3, 4, 7, 12)] == [p3, p4, p7, p12]


@pytest.mark.parametrize(("data", "expected"), KAFKA_UTILS_TEST)
def test_kafka_utils_test_cases(data, expected):
    assert murmur2(data) == expected


def test_accepts_bytearray_and_memoryview():
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


@pytest.mark.parametrize(
    ("n", "expected"), [(0, 0), (-1, 2147483647), (-(2**31), 0), (2**31 - 1, 2**31 - 1)]
)
def test_to_positive(n, expected):
    assert to_positive(n) == expected


@pytest.mark.parametrize(
    ("key", "n", "match"),
    [
        (None, 3, "null key"),
        (b"a", 0, "positive int"),
        (b"a", -2, "positive int"),
        (b"a", True, "positive int"),
    ],
)
def test_default_partition_errors(key, n, match):
    with pytest.raises(ValueError, match=match):
        default_partition(key, n)


def test_a_column_hashes_as_the_java_client_does():
    keys = [bytes.fromhex(row[0]) for row in JAVA_VECTORS] + [k for k, _ in KAFKA_UTILS_TEST]
    column = pa.array(keys, pa.binary())
    expected = [row[1] for row in JAVA_VECTORS] + [h for _, h in KAFKA_UTILS_TEST]
    assert murmur2_many(column).tolist() == expected
    for i, n in enumerate((3, 4, 7, 12)):
        got = default_partitions(column, n).to_pylist()[: len(JAVA_VECTORS)]
        assert got == [row[3 + i] for row in JAVA_VECTORS]


@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30),
    st.sampled_from([0, 8, 16]),
    st.integers(1, 50),
    st.integers(0, 3),
)
def test_a_column_equals_one_key_at_a_time(keys, drop_last, num_partitions, skip):
    """Windowed keys (inner key + suffix), nulls and a sliced column (an Arrow offset)."""
    suffixed = [None if k is None else k + bytes(range(drop_last)) for k in keys]
    column = pa.array([b"x" * 9] * skip + suffixed, pa.binary()).slice(skip)
    assert default_partitions(column, num_partitions, drop_last=drop_last).to_pylist() == [
        None if k is None else default_partition(k, num_partitions) for k in keys
    ]
    assert [
        h
        for h, k in zip(murmur2_many(column, drop_last=drop_last), keys, strict=True)
        if k is not None
    ] == [murmur2(k) for k in keys if k is not None]


def test_a_column_errors():
    with pytest.raises(ValueError, match="positive int"):
        default_partitions(pa.array([b"a"]), 0)
    with pytest.raises(ValueError, match="value 1 has 3 bytes, fewer than the 8 to drop"):
        murmur2_many(pa.array([bytes(8), b"abc"]), drop_last=8)
