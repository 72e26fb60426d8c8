"""How the binary ``key``/``value`` columns of a compiled frame map to Python objects.

Between operators a record's key and value travel through Spark as bytes. A :class:`Codec`
says which bytes: those of a user serde (as read from or written to a topic), an internal
pickle for intermediate Python objects (never used for topic data, which is never unpickled),
a native ``bigint`` column (results of Spark's own ``count``), or a windowed key (the inner
key's bytes followed by the 8-byte big-endian window start, Kafka Streams' format).

Pure Python: this module runs inside Spark's Python workers and imports no PySpark.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamtable.errors import SerializationError
from streamtable.serde import Serde, Windowed


class Codec:
    """Decode and encode lists of column values (``None`` is a null column value)."""

    #: True when equal objects always give equal bytes (needed to group by the bytes).
    canonical: bool = True
    #: True when the column is ``bigint`` rather than ``binary``.
    native_long: bool = False

    def decode_many(self, datas: Sequence[Any]) -> list[Any]:
        """Python objects for column values."""
        raise NotImplementedError

    def encode_many(self, objs: Sequence[Any]) -> list[Any]:
        """Column values for Python objects."""
        raise NotImplementedError

    def serde(self) -> Serde | None:
        """The user serde whose bytes this codec holds, if any."""
        return None


@dataclass(frozen=True)
class SerdeCodec(Codec):
    """Bytes of a user serde, byte-identical to Kafka's Java serializers."""

    the_serde: Serde

    def decode_many(self, datas: Sequence[Any]) -> list[Any]:  # noqa: D102
        return self.the_serde.deserialize_many(datas)

    def encode_many(self, objs: Sequence[Any]) -> list[Any]:  # noqa: D102
        return self.the_serde.serialize_many(objs)

    def serde(self) -> Serde | None:  # noqa: D102
        return self.the_serde


@dataclass(frozen=True)
class PickleCodec(Codec):
    """Internal encoding of intermediate Python objects; ``None`` stays a null column value.

    Only bytes that streamtable itself wrote in the same application (shuffles, state) are
    unpickled; topic data never is.
    """

    def decode_many(self, datas: Sequence[Any]) -> list[Any]:  # noqa: D102
        loads = pickle.loads
        return [None if d is None else loads(d) for d in datas]

    def encode_many(self, objs: Sequence[Any]) -> list[Any]:  # noqa: D102
        dumps = pickle.dumps
        return [None if o is None else dumps(o, protocol=5) for o in objs]


def result_codec(want: Codec | None) -> Codec:
    """How an operator encodes the Python results it emits: in the serde ``want`` names (a
    sink's wish: the sink then needs no Python stage to encode them), else pickled.
    """
    return want if isinstance(want, SerdeCodec) else PickleCodec()


@dataclass(frozen=True)
class LongColumnCodec(Codec):
    """A native ``bigint`` column holding Python ints (Spark's ``count``; a Long reduction's
    ``sum``, ``min`` or ``max``).
    """

    native_long = True

    def decode_many(self, datas: Sequence[Any]) -> list[Any]:  # noqa: D102
        return list(datas)

    def encode_many(self, objs: Sequence[Any]) -> list[Any]:  # noqa: D102
        return list(objs)


@dataclass(frozen=True)
class PresenceCodec(Codec):
    """Only whether a value is null: ``b""`` for any value, null for ``None``.

    What Spark's own ``count`` needs of a value (Kafka Streams skips null values), so records
    going to it are not pickled for nothing. Decoding gives ``True`` for present values.
    """

    def decode_many(self, datas: Sequence[Any]) -> list[Any]:  # noqa: D102
        return [None if d is None else True for d in datas]

    def encode_many(self, objs: Sequence[Any]) -> list[Any]:  # noqa: D102
        return [None if o is None else b"" for o in objs]


_START = struct.Struct(">q")


@dataclass(frozen=True)
class WindowedCodec(Codec):
    """``Windowed(key, start, end)``: inner key bytes + 8-byte big-endian start (ms).

    Matches Kafka Streams' ``TimeWindowedSerializer``; ``end = start + size_ms``.
    """

    inner: Codec
    size_ms: int

    def decode_many(self, datas: Sequence[Any]) -> list[Any]:  # noqa: D102
        inner_bytes = [None if d is None else d[:-8] for d in datas]
        keys = self.inner.decode_many(inner_bytes)
        out: list[Any] = []
        for d, k in zip(datas, keys, strict=True):
            if d is None:
                out.append(None)
            else:
                start = _START.unpack_from(d, len(d) - 8)[0]
                out.append(Windowed(k, start, start + self.size_ms))
        return out

    def encode_many(self, objs: Sequence[Any]) -> list[Any]:  # noqa: D102
        inner = self.inner.encode_many([None if o is None else o.key for o in objs])
        return [
            None if o is None else bytes(b or b"") + _START.pack(o.start)
            for o, b in zip(objs, inner, strict=True)
        ]

    def serde(self) -> Serde | None:  # noqa: D102
        inner = self.inner.serde()
        if inner is None:
            return None
        from streamtable.serde import Serdes

        return Serdes.time_windowed(inner, self.size_ms)


_END_START = struct.Struct(">qq")


@dataclass(frozen=True)
class SessionWindowedCodec(Codec):
    """``Windowed(key, start, end)`` of a session: inner key bytes + 8-byte big-endian end +
    8-byte big-endian start (Kafka Streams' ``SessionWindowedSerializer``).
    """

    inner: Codec

    def decode_many(self, datas: Sequence[Any]) -> list[Any]:  # noqa: D102
        keys = self.inner.decode_many([None if d is None else d[:-16] for d in datas])
        out: list[Any] = []
        for d, k in zip(datas, keys, strict=True):
            if d is None:
                out.append(None)
            else:
                end, start = _END_START.unpack_from(d, len(d) - 16)
                out.append(Windowed(k, start, end))
        return out

    def encode_many(self, objs: Sequence[Any]) -> list[Any]:  # noqa: D102
        inner = self.inner.encode_many([None if o is None else o.key for o in objs])
        return [
            None if o is None else bytes(b or b"") + _END_START.pack(o.end, o.start)
            for o, b in zip(objs, inner, strict=True)
        ]

    def serde(self) -> Serde | None:  # noqa: D102
        inner = self.inner.serde()
        if inner is None:
            return None
        from streamtable.serde import Serdes

        return Serdes.session_windowed(inner)


def encode_for_sink(
    codec: Codec, value: Any, result_of: str, node_name: str, fits: str
) -> bytes | None:
    """An operator's result ``value`` in ``codec``: pickled for a Python consumer, or already
    in the serde of the sink the results go to (which then needs no Python stage).

    Raises
    ------
    SerializationError
        If that serde cannot serialize ``value``, naming the result (``result_of``, e.g.
        ``"an aggregate of"``, and the operator ``node_name``) and the value serde to give the
        sink (``fits``: what it must fit); Kafka Streams fails likewise when its sink's
        serializer rejects the record. The message is built only then (this runs per record).
    """
    if type(codec) is PickleCodec:
        return pickle.dumps(value, protocol=5)
    try:
        if type(codec) is SerdeCodec:
            return codec.the_serde.serialize(value)  # one value: no list around it
        return codec.encode_many([value])[0]
    except SerializationError as e:
        raise SerializationError(
            f"Failed to serialize {result_of} {node_name!r} for the sink it is written to: {e}. "
            f"Give that sink a value serde that fits {fits}"
        ) from e


def same_bytes(a: Codec, b: Codec) -> bool:
    """Whether a column in codec ``a`` already holds what codec ``b`` would encode: equal
    codecs, or two codecs of one user serde (a windowed aggregation's internal keys are the
    bytes of its sink's ``time_windowed`` serde of the same inner serde and size).

    Examples
    --------
    >>> from streamtable.serde import Serdes
    >>> internal = WindowedCodec(SerdeCodec(Serdes.string()), 60_000)
    >>> same_bytes(internal, SerdeCodec(Serdes.time_windowed(Serdes.string(), 60_000)))
    True
    >>> same_bytes(internal, SerdeCodec(Serdes.time_windowed(Serdes.string(), 1_000)))
    False
    >>> long = SerdeCodec(Serdes.long())
    >>> same_bytes(PickleCodec(), long), same_bytes(LongColumnCodec(), long)
    (False, False)
    """
    if a == b:
        return True
    if a.native_long or b.native_long:
        return False
    serde = a.serde()
    return serde is not None and serde == b.serde()


def codec_for(serde: Serde | None) -> Codec:
    """The codec holding ``serde``'s bytes, or the internal pickle codec when ``serde`` is None."""
    return PickleCodec() if serde is None else SerdeCodec(serde)
