"""Kafka's murmur2 hash and default partitioner for keyed records: per key in pure Python, and
over a whole Arrow column with numpy (:func:`default_partitions`).

Identical to ``org.apache.kafka.common.utils.Utils.murmur2`` (a 32-bit MurmurHash2 with seed
``0x9747b28c``, returning a signed Java ``int``) and to the producer's
``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(keyBytes)) % numPartitions``.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

__all__ = ["murmur2", "murmur2_many", "to_positive", "default_partition", "default_partitions"]

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
    _check_partitions("default_partition", num_partitions)
    return to_positive(murmur2(key_bytes)) % num_partitions


def _check_partitions(function: str, num_partitions: object) -> None:
    if (
        isinstance(num_partitions, bool)
        or not isinstance(num_partitions, int)
        or num_partitions <= 0
    ):
        raise ValueError(
            f"{function}(): num_partitions must be a positive int, got {num_partitions!r}"
        )


def murmur2_many(keys: pa.Array, *, drop_last: int = 0) -> np.ndarray:
    r""":func:`murmur2` of every value of a binary column, less its last ``drop_last`` bytes.

    The same hash as :func:`murmur2`, computed with numpy over the column's buffers (one pass
    per 4-byte block of the longest key) instead of one Python call per key: for the inner key
    of a windowed key's bytes (``drop_last=8`` for a time window's start, ``16`` for a session's
    end and start), or a whole key (``0``).

    Parameters
    ----------
    keys : pyarrow.Array
        ``binary`` values (other binary-like types are cast). A null gives an unspecified hash
        (mask it with the column's validity).
    drop_last : int
        Bytes at the end of each value that are not hashed.

    Returns
    -------
    numpy.ndarray
        ``int32``, one signed hash per value, equal to Java's ``Utils.murmur2``.

    Raises
    ------
    ValueError
        If a non-null value is shorter than ``drop_last`` bytes.

    Examples
    --------
    >>> murmur2_many(pa.array([b"21", b"", b"kafka\x00\x00"]), drop_last=0).tolist()
    [-973932308, 275646681, -474073331]
    >>> murmur2_many(pa.array([b"21" + bytes(8)]), drop_last=8).tolist()
    [-973932308]
    """
    if keys.type != pa.binary():
        keys = keys.cast(pa.binary())
    n = len(keys)
    _, offsets_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, count=keys.offset + n + 1)[keys.offset :]
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64) - drop_last
    if n and keys.null_count:
        lengths[np.asarray(keys.is_null())] = 0
    if n and lengths.min() < 0:
        short = int(np.argmax(lengths < 0))
        raise ValueError(
            f"murmur2_many(): value {short} has {lengths[short] + drop_last} bytes, fewer than "
            f"the {drop_last} to drop"
        )
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    blocks = lengths >> 2
    for b in range(int(blocks.max(initial=0))):
        sel = blocks > b
        at = starts[sel] + 4 * b
        k = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << 8)
            | (data[at + 2].astype(np.uint32) << 16)
            | (data[at + 3].astype(np.uint32) << 24)
        )
        k *= m
        k ^= k >> 24
        k *= m
        h[sel] = (h[sel] * m) ^ k
    rest = lengths & 3
    tail = starts + (blocks << 2)
    for extra, shift in ((2, 16), (1, 8), (0, 0)):
        sel = rest > extra
        h[sel] ^= data[tail[sel] + extra].astype(np.uint32) << shift
    sel = rest > 0
    h[sel] *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h.view(np.int32)


def default_partitions(keys: pa.Array, num_partitions: int, *, drop_last: int = 0) -> pa.Array:
    """:func:`default_partition` of every key of a binary column (see :func:`murmur2_many` for
    ``drop_last``); a null key gets a null partition (the producer's sticky partitioning).

    Returns
    -------
    pyarrow.Array
        ``int32`` partitions in ``[0, num_partitions)``.

    Raises
    ------
    ValueError
        If ``num_partitions`` is not a positive int, or a key is shorter than ``drop_last``.

    Examples
    --------
    >>> default_partitions(pa.array([b"kafka", None]), 4).to_pylist()
    [0, None]
    """
    _check_partitions("default_partitions", num_partitions)
    hashes = murmur2_many(keys, drop_last=drop_last).view(np.uint32)
    parts = ((hashes & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    mask = np.asarray(keys.is_null()) if keys.null_count else None
    return pa.array(parts, pa.int32(), mask=mask)
