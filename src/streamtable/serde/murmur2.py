"""Kafka's murmur2 hash and default partitioner for keyed records, in pure Python.

Identical to ``org.apache.kafka.common.utils.Utils.murmur2`` (a 32-bit MurmurHash2 with seed
``0x9747b28c``, returning a signed Java ``int``) and to the producer's
``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(keyBytes)) % numPartitions``.
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "to_positive", "default_partition"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit murmur2 hash of ``data`` as a signed int.

    Parameters
    ----------
    data : bytes
        The serialized key.

    Returns
    -------
    int
        A value in ``[-2**31, 2**31 - 1]``, equal to what the Java client returns.

    Examples
    --------
    >>> murmur2(b"21")
    -973932308
    >>> murmur2(b"")
    275646681
    """
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    m = _M
    for (k,) in struct.iter_unpack("<I", data[:n4]):
        k = (k * m) & _MASK
        k ^= k >> 24
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    rem = length & 3
    if rem:
        if rem == 3:
            h ^= data[n4 + 2] << 16
        if rem >= 2:
            h ^= data[n4 + 1] << 8
        h ^= data[n4]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff`` (not ``abs``).

    Examples
    --------
    >>> to_positive(-1)
    2147483647
    >>> to_positive(-2147483648)
    0
    """
    return n & 0x7FFFFFFF


def default_partition(key_bytes: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """Partition of a keyed record under Kafka's default partitioner (Java client).

    ``toPositive(murmur2(key_bytes)) % num_partitions``, as ``BuiltInPartitioner`` (and the
    older ``DefaultPartitioner``) compute for records with a non-null key.

    Raises
    ------
    ValueError
        If ``key_bytes`` is ``None`` (null keys use sticky partitioning, not a hash) or
        ``num_partitions`` is not a positive int.

    Examples
    --------
    >>> default_partition(b"kafka", 4)
    0
    """
    if key_bytes is None:
        raise ValueError(
            "default_partition(): key_bytes is None; records with a null key are not "
            "hash-partitioned (the Java producer uses sticky partitioning for them)"
        )
    if (
        isinstance(num_partitions, bool)
        or not isinstance(num_partitions, int)
        or num_partitions <= 0
    ):
        raise ValueError(
            f"default_partition(): num_partitions must be a positive int, got {num_partitions!r}"
        )
    return to_positive(murmur2(key_bytes)) % num_partitions
