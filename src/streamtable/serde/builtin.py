"""Built-in serdes, byte-compatible with ``org.apache.kafka.common.serialization.Serdes``."""

from __future__ import annotations

import codecs
import difflib
import json
import struct
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from streamtable.errors import ConfigError, SerializationError
from streamtable.serde.base import Serde

__all__ = [
    "StringSerde",
    "LongSerde",
    "IntegerSerde",
    "DoubleSerde",
    "BytesSerde",
    "JsonSerde",
    "CustomSerde",
    "Serdes",
    "JSON_SCHEMA_TYPES",
]


def _java_utf8_replace(e: UnicodeError) -> tuple[str, int]:
    """Decode error handler giving the U+FFFD sequence of Java's ``new String(bytes, UTF_8)``.

    Python's ``"replace"`` already follows the same "maximal subpart" rule, except for
    surrogate code points encoded in UTF-8 (``ED A0..BF ..``), which Java replaces as one unit.
    Checked against JDK 17 on 20,000 random invalid byte strings.
    """
    if not isinstance(e, UnicodeDecodeError):
        raise e
    obj, s = e.object, e.start
    if obj[s] == 0xED and s + 1 < len(obj) and 0xA0 <= obj[s + 1] <= 0xBF:
        if s + 2 < len(obj) and 0x80 <= obj[s + 2] <= 0xBF:
            return ("\ufffd", s + 3)
        return ("\ufffd", s + 2)
    return ("\ufffd", e.end)


_JAVA_REPLACE = "streamtable.java_utf8_replace"
codecs.register_error(_JAVA_REPLACE, _java_utf8_replace)


class StringSerde(Serde):
    r"""UTF-8 strings, as Kafka's ``StringSerializer``/``StringDeserializer``.

    Invalid UTF-8 input is decoded with U+FFFD replacement characters exactly as Java's
    ``new String(bytes, UTF_8)`` does; it is not an error (as in Kafka).

    Examples
    --------
    >>> s = StringSerde()
    >>> s.serialize("héllo")
    b'h\xc3\xa9llo'
    >>> s.deserialize(b'h\xc3\xa9llo')
    'héllo'
    >>> s.serialize("x\ud800y"), s.serialize("\ud83d\ude00")  # as Java's getBytes(UTF_8)
    (b'x?y', b'\xf0\x9f\x98\x80')
    """

    kind: ClassVar[str] = "string"
    name = "String"

    def _serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise self._ser_error(f"expected str, got {type(obj).__name__}")
        try:
            return obj.encode("utf-8")
        except UnicodeEncodeError:
            # surrogate code points (from a JSON "\ud83d" escape, say): as Java's
            # String.getBytes(UTF_8), a high-low pair is one character, a lone one '?'
            joined = obj.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
            return joined.encode("utf-8", "replace")

    def _deserialize(self, data: bytes) -> str:
        return data.decode("utf-8", errors=_JAVA_REPLACE)

    def serialize_many(self, objs: Iterable[Any]) -> list[bytes | None]:  # noqa: D102
        out: list[bytes | None] = []
        append = out.append
        for o in objs:
            if o is None:
                append(None)
            elif type(o) is str:
                try:
                    append(o.encode("utf-8"))
                except UnicodeEncodeError:
                    append(self._serialize(o))
            else:
                append(self._serialize(o))
        return out

    def deserialize_many(self, datas: Iterable[bytes | None]) -> list[Any]:  # noqa: D102
        return [
            None if d is None else bytes(d).decode("utf-8", errors=_JAVA_REPLACE) for d in datas
        ]


class _FixedWidthSerde(Serde):
    """Shared code of the fixed-width big-endian numeric serdes."""

    _struct: ClassVar[struct.Struct]
    _width: ClassVar[int]
    _format_desc: ClassVar[str]

    def _deserialize(self, data: bytes) -> Any:
        if len(data) != self._width:
            raise self._de_error(
                f"expected {self._width} bytes ({self._format_desc}), got {len(data)} "
                f"(Size of data received by {self.name}Deserializer is not {self._width})"
            )
        return self._struct.unpack(data)[0]

    def deserialize_many(self, datas: Iterable[bytes | None]) -> list[Any]:  # noqa: D102
        datas = list(datas)
        width = self._width
        if datas and all(d is not None and len(d) == width for d in datas):
            joined = b"".join(datas)  # type: ignore[arg-type]
            return [t[0] for t in self._struct.iter_unpack(joined)]
        return [self.deserialize(d) for d in datas]


class _IntegralSerde(_FixedWidthSerde):
    _min: ClassVar[int]
    _max: ClassVar[int]

    def _serialize(self, obj: Any) -> bytes:
        if isinstance(obj, bool) or not hasattr(obj, "__index__"):
            raise self._ser_error(f"expected int, got {type(obj).__name__}")
        value = obj.__index__()
        if not self._min <= value <= self._max:
            raise self._ser_error(
                f"{value} is out of range for {self._format_desc} [{self._min}, {self._max}]"
            )
        return self._struct.pack(value)


class LongSerde(_IntegralSerde):
    r"""64-bit signed integers, 8 bytes big-endian, as Kafka's ``LongSerializer``.

    Examples
    --------
    >>> LongSerde().serialize(1)
    b'\x00\x00\x00\x00\x00\x00\x00\x01'
    >>> LongSerde().deserialize(b'\xff' * 8)
    -1
    >>> LongSerde().deserialize(b'abc')
    Traceback (most recent call last):
    ...
    streamtable.errors.SerializationError: LongDeserializer: expected 8 bytes (a big-endian signed 64-bit integer), got 3 (Size of data received by LongDeserializer is not 8)
    """  # noqa: E501

    kind: ClassVar[str] = "long"
    name = "Long"
    _struct = struct.Struct(">q")
    _width = 8
    _format_desc = "a big-endian signed 64-bit integer"
    _min = -(2**63)
    _max = 2**63 - 1


class IntegerSerde(_IntegralSerde):
    r"""32-bit signed integers, 4 bytes big-endian, as Kafka's ``IntegerSerializer``.

    Examples
    --------
    >>> IntegerSerde().serialize(-2)
    b'\xff\xff\xff\xfe'
    """

    kind: ClassVar[str] = "integer"
    name = "Integer"
    _struct = struct.Struct(">i")
    _width = 4
    _format_desc = "a big-endian signed 32-bit integer"
    _min = -(2**31)
    _max = 2**31 - 1


#: Java's ``Double.doubleToLongBits`` of every NaN
_CANONICAL_NAN = bytes.fromhex("7ff8000000000000")


class DoubleSerde(_FixedWidthSerde):
    r"""IEEE-754 doubles, 8 bytes big-endian, as Kafka's ``DoubleSerializer``.

    ``int`` values are converted to ``float``; NaN and infinities are allowed, as in Java.
    Every NaN is written as the canonical ``7ff8000000000000``, as Java's
    ``Double.doubleToLongBits`` does (a NaN key then hashes and compacts as a Java client's).

    Examples
    --------
    >>> DoubleSerde().serialize(1.5)
    b'?\xf8\x00\x00\x00\x00\x00\x00'
    >>> DoubleSerde().deserialize(b'?\xf8\x00\x00\x00\x00\x00\x00')
    1.5
    >>> DoubleSerde().serialize(float("inf") - float("inf")).hex()
    '7ff8000000000000'
    """

    kind: ClassVar[str] = "double"
    name = "Double"
    _struct = struct.Struct(">d")
    _width = 8
    _format_desc = "a big-endian IEEE-754 double"

    def _serialize(self, obj: Any) -> bytes:
        if (
            isinstance(obj, bool)
            or not isinstance(obj, int | float)
            and not hasattr(obj, "__float__")
        ):
            raise self._ser_error(f"expected float, got {type(obj).__name__}")
        try:
            value = float(obj)
        except (OverflowError, TypeError, ValueError) as e:
            raise self._ser_error(f"cannot convert {obj!r} to a double: {e}") from e
        if value != value:  # NaN, whatever its sign and payload bits
            return _CANONICAL_NAN
        return self._struct.pack(value)


class BytesSerde(Serde):
    """Raw bytes passed through unchanged, as Kafka's ``ByteArraySerde``.

    ``serialize`` accepts ``bytes``, ``bytearray`` and ``memoryview``; ``deserialize`` returns
    ``bytes``.

    Examples
    --------
    >>> BytesSerde().serialize(bytearray(b'ab'))
    b'ab'
    """

    kind: ClassVar[str] = "bytes"
    name = "ByteArray"

    def _serialize(self, obj: Any) -> bytes:
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, bytearray | memoryview):
            return bytes(obj)
        raise self._ser_error(f"expected bytes, bytearray or memoryview, got {type(obj).__name__}")

    def _deserialize(self, data: bytes) -> bytes:
        return data


#: Type names allowed in a :class:`JsonSerde` schema, with their Spark SQL types.
JSON_SCHEMA_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "string": "STRING",
        "long": "BIGINT",
        "integer": "INT",
        "double": "DOUBLE",
        "boolean": "BOOLEAN",
    }
)


def _freeze_schema(schema: Mapping[str, Any], path: str = "") -> tuple[tuple[str, Any], ...]:
    if not isinstance(schema, Mapping):
        raise ConfigError(
            f"Serdes.json(schema=...): expected a dict of field name -> type name, "
            f"got {type(schema).__name__}"
        )
    if not schema:
        raise ConfigError(f"Serdes.json(schema=...): the schema{path and ' of ' + path} is empty")
    items = []
    for field, type_name in schema.items():
        where = f"{path}.{field}" if path else str(field)
        if not isinstance(field, str) or not field:
            raise ConfigError(
                f"Serdes.json(schema=...): field names must be non-empty str, got {field!r}"
            )
        if isinstance(type_name, Mapping):
            items.append((field, _freeze_schema(type_name, where)))
        elif isinstance(type_name, str) and type_name in JSON_SCHEMA_TYPES:
            items.append((field, type_name))
        else:
            allowed = ", ".join(JSON_SCHEMA_TYPES)
            raise ConfigError(
                f"Serdes.json(schema=...): field {where!r} has type {type_name!r}; "
                f"expected one of {allowed} or a nested dict"
            )
    return tuple(items)


def _thaw_schema(frozen: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {k: (_thaw_schema(v) if isinstance(v, tuple) else v) for k, v in frozen}


def _ddl(frozen: tuple[tuple[str, Any], ...], nested: bool = False) -> str:
    parts = []
    for field, t in frozen:
        quoted = "`" + field.replace("`", "``") + "`"
        sql = f"STRUCT<{_ddl(t, nested=True)}>" if isinstance(t, tuple) else JSON_SCHEMA_TYPES[t]
        parts.append(f"{quoted}{':' if nested else ''} {sql}")
    return ", ".join(parts)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class JsonSerde(Serde):
    r"""UTF-8 JSON, compact like Jackson's default ``ObjectMapper`` output.

    Serialization uses separators ``(",", ":")``, keeps non-ASCII characters as UTF-8
    (``ensure_ascii=False``) and rejects NaN and infinities, which are not JSON.

    Parameters
    ----------
    schema : dict, optional
        ``{field: type}`` describing a JSON object value, where ``type`` is one of
        ``"string"``, ``"long"``, ``"integer"``, ``"double"``, ``"boolean"`` or a nested dict.
        Only stored (the compiler uses it to parse values on the JVM side with ``from_json``);
        values are not checked against it in Python.

    Raises
    ------
    ConfigError
        If the schema names an unknown type.

    Examples
    --------
    >>> j = JsonSerde()
    >>> j.serialize({"a": 1, "b": [True, None], "c": "é"})
    b'{"a":1,"b":[true,null],"c":"\xc3\xa9"}'
    >>> j.deserialize(b'{"a": 1}')
    {'a': 1}
    >>> JsonSerde(schema={"origin": "string", "delay": "double"}).spark_ddl()
    '`origin` STRING, `delay` DOUBLE'
    """

    kind: ClassVar[str] = "json"
    name = "Json"

    def __init__(self, schema: Mapping[str, Any] | None = None) -> None:
        self._schema = None if schema is None else _freeze_schema(schema)
        self._encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        self._decoder = json.JSONDecoder(parse_constant=_reject_constant)

    @property
    def schema(self) -> dict[str, Any] | None:
        """The value schema given at construction (a fresh dict), or ``None``."""
        return None if self._schema is None else _thaw_schema(self._schema)

    def spark_ddl(self) -> str | None:
        """Return the schema as Spark SQL DDL (``"`a` BIGINT, `b` STRING"``), or ``None``."""
        return None if self._schema is None else _ddl(self._schema)

    def _params(self) -> tuple[Any, ...]:
        return (self._schema,)

    def __reduce__(self) -> tuple[Any, ...]:
        # the json encoder/decoder objects do not pickle; Spark ships serdes to its workers
        return (JsonSerde, (self.schema,))

    def _repr_args(self) -> str:
        return "" if self._schema is None else f"schema={self.schema!r}"

    def _serialize(self, obj: Any) -> bytes:
        try:
            return self._encoder.encode(obj).encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError) as e:
            raise self._ser_error(f"cannot encode {type(obj).__name__} as JSON: {e}") from e

    def _deserialize(self, data: bytes) -> Any:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._de_error(f"expected UTF-8 JSON, got invalid UTF-8: {e}") from e
        try:
            return self._decoder.decode(text)
        except ValueError as e:
            raise self._de_error(f"expected UTF-8 JSON, got invalid JSON: {e}") from e

    def deserialize_many(self, datas: Iterable[bytes | None]) -> list[Any]:
        """Deserialize a batch; the same results and errors as :meth:`deserialize` per item.

        A document without surrounding whitespace goes straight to the decoder's C scanner;
        anything else (whitespace, invalid UTF-8 or JSON) takes :meth:`deserialize`'s path.
        """
        de = self.deserialize
        if type(self)._deserialize is not JsonSerde._deserialize:  # a subclass decodes its way
            return [de(d) for d in datas]
        scan = self._decoder.scan_once
        out: list[Any] = []
        append = out.append
        for d in datas:
            if type(d) is bytes:
                try:
                    text = d.decode("utf-8")
                    obj, end = scan(text, 0)
                    if end == len(text):
                        append(obj)
                        continue
                except (UnicodeDecodeError, StopIteration, ValueError):
                    pass
            append(de(d))
        return out


class CustomSerde(Serde):
    """A serde built from two callables (see :meth:`Serdes.custom`).

    ``None`` never reaches the callables: it maps to ``None``. Exceptions from the callables
    other than :class:`~streamtable.errors.SerializationError` are wrapped in one.
    """

    kind: ClassVar[str] = "custom"

    def __init__(
        self,
        serializer: Callable[[Any], bytes],
        deserializer: Callable[[bytes], Any],
        *,
        name: str = "Custom",
    ) -> None:
        if not callable(serializer) or not callable(deserializer):
            raise TypeError("Serdes.custom(): serializer and deserializer must be callable")
        if not isinstance(name, str) or not name:
            raise TypeError("Serdes.custom(): name must be a non-empty str")
        self._serializer = serializer
        self._deserializer = deserializer
        self.name = name

    def _params(self) -> tuple[Any, ...]:
        return (self.name, self._serializer, self._deserializer)

    def _repr_args(self) -> str:
        return f"{self._serializer!r}, {self._deserializer!r}, name={self.name!r}"

    def _serialize(self, obj: Any) -> bytes:
        try:
            out = self._serializer(obj)
        except SerializationError:
            raise
        except Exception as e:
            raise self._ser_error(f"serializer raised {type(e).__name__}: {e}") from e
        if isinstance(out, bytearray | memoryview):
            out = bytes(out)
        if out is not None and not isinstance(out, bytes):
            raise self._ser_error(f"serializer must return bytes, returned {type(out).__name__}")
        return out  # type: ignore[return-value]

    def _deserialize(self, data: bytes) -> Any:
        try:
            return self._deserializer(data)
        except SerializationError:
            raise
        except Exception as e:
            raise self._de_error(f"deserializer raised {type(e).__name__}: {e}") from e


_STRING = StringSerde()
_LONG = LongSerde()
_INTEGER = IntegerSerde()
_DOUBLE = DoubleSerde()
_BYTES = BytesSerde()
_JSON = JsonSerde()

_NAMES: dict[str, Serde] = {
    "string": _STRING,
    "long": _LONG,
    "integer": _INTEGER,
    "double": _DOUBLE,
    "bytearray": _BYTES,
    "bytes": _BYTES,
    "bytebuffer": _BYTES,
    "json": _JSON,
}


class Serdes:
    r"""Factory of serdes, named as Kafka's ``org.apache.kafka.common.serialization.Serdes``.

    Examples
    --------
    >>> Serdes.long().serialize(1)
    b'\x00\x00\x00\x00\x00\x00\x00\x01'
    >>> Serdes.from_name("org.apache.kafka.common.serialization.Serdes$StringSerde")
    Serdes.string()
    """

    @staticmethod
    def string() -> StringSerde:
        """UTF-8 strings (:class:`StringSerde`)."""
        return _STRING

    @staticmethod
    def long() -> LongSerde:
        """64-bit signed integers, 8 bytes big-endian (:class:`LongSerde`)."""
        return _LONG

    @staticmethod
    def integer() -> IntegerSerde:
        """32-bit signed integers, 4 bytes big-endian (:class:`IntegerSerde`)."""
        return _INTEGER

    @staticmethod
    def double() -> DoubleSerde:
        """IEEE-754 doubles, 8 bytes big-endian (:class:`DoubleSerde`)."""
        return _DOUBLE

    @staticmethod
    def bytes() -> BytesSerde:
        """Raw bytes, unchanged (:class:`BytesSerde`)."""
        return _BYTES

    @staticmethod
    def json(schema: Mapping[str, Any] | None = None) -> JsonSerde:
        """UTF-8 JSON (:class:`JsonSerde`), optionally with a value schema for the compiler."""
        return _JSON if schema is None else JsonSerde(schema)

    @staticmethod
    def debezium_json(schema: Mapping[str, str] | None = None) -> Serde:
        """Debezium change events (JSON, no schemas) read as the row's new state: ``c``/``u``/
        ``r`` → the ``after`` row, ``d`` → ``None`` (a delete in a table).

        See :class:`~streamtable.serde.debezium.DebeziumJsonSerde`.
        """
        from streamtable.serde.debezium import DebeziumJsonSerde

        return DebeziumJsonSerde(schema)

    @staticmethod
    def debezium_key(*columns: str) -> Serde:
        """Debezium change-event keys (``{"id": 7}``) as the primary key's value (``7``), or a
        tuple for a composite key.

        See :class:`~streamtable.serde.debezium.DebeziumKeySerde`.
        """
        from streamtable.serde.debezium import DebeziumKeySerde

        return DebeziumKeySerde(*columns)

    @staticmethod
    def custom(
        serializer: Callable[[Any], bytes],
        deserializer: Callable[[bytes], Any],
        *,
        name: str = "Custom",
    ) -> CustomSerde:
        """Build a serde from two Python callables; the compiler runs them in Python UDFs.

        Examples
        --------
        >>> up = Serdes.custom(lambda s: s.upper().encode(), bytes.decode, name="Upper")
        >>> up.serialize("a"), up.deserialize(b"B")
        (b'A', 'B')
        """
        return CustomSerde(serializer, deserializer, name=name)

    @staticmethod
    def time_windowed(inner: Serde, window_size_ms: int) -> Serde:
        """Keys of time windows: inner key bytes + 8-byte big-endian window start.

        See :class:`~streamtable.serde.windowed.TimeWindowedSerde`.
        """
        from streamtable.serde.windowed import TimeWindowedSerde

        return TimeWindowedSerde(inner, window_size_ms)

    @staticmethod
    def session_windowed(inner: Serde) -> Serde:
        """Keys of session windows: inner key bytes + 8-byte end + 8-byte start.

        See :class:`~streamtable.serde.windowed.SessionWindowedSerde`.
        """
        from streamtable.serde.windowed import SessionWindowedSerde

        return SessionWindowedSerde(inner)

    @staticmethod
    def from_name(name: str) -> Serde:
        """Resolve a serde from a config value.

        Accepts short names (``"String"``, ``"Long"``, ``"Integer"``, ``"Double"``,
        ``"ByteArray"``, ``"Bytes"``, ``"Json"``, case-insensitive), Kafka class names such as
        ``"org.apache.kafka.common.serialization.Serdes$StringSerde"`` or ``"StringSerde"``.

        Raises
        ------
        ConfigError
            If the name is not known; the message suggests the closest name.

        Examples
        --------
        >>> Serdes.from_name("Long")
        Serdes.long()
        >>> Serdes.from_name("Serdes$ByteArraySerde")
        Serdes.bytes()
        >>> Serdes.from_name("com.acme.StringSerde")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        streamtable.errors.ConfigError: Serde class 'com.acme.StringSerde' is not one of ...
        """
        if not isinstance(name, str):
            raise ConfigError(f"Serde name must be a str, got {type(name).__name__}")
        key = name.strip()
        package, _, _ = key.rpartition(".")
        if package and package != "org.apache.kafka.common.serialization":
            # a class of another package (a custom serde named like a built-in one) is not
            # Kafka's: resolving it by its last segment would silently use the built-in
            raise ConfigError(
                f"Serde class {name!r} is not one of Kafka's built-in serdes "
                "(org.apache.kafka.common.serialization.Serdes$...); custom serdes must be "
                "passed as Serde objects."
            )
        short = key.rsplit(".", 1)[-1].rsplit("$", 1)[-1].lower()
        if short.endswith("serde") and short != "serde":
            short = short[: -len("serde")]
        if short in _NAMES:
            return _NAMES[short]
        known = ["String", "Long", "Integer", "Double", "ByteArray", "Bytes", "Json"]
        close = difflib.get_close_matches(short, [k.lower() for k in known], n=1)
        hint = ""
        if close:
            hint = f" Did you mean {known[[k.lower() for k in known].index(close[0])]!r}?"
        raise ConfigError(
            f"Unknown serde name {name!r}.{hint} Known names: {', '.join(known)} "
            f"(or Kafka class names such as "
            f"'org.apache.kafka.common.serialization.Serdes$StringSerde'); "
            f"windowed and custom serdes must be passed as Serde objects."
        )
