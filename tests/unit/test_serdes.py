# ruff: noqa: E501 — tables of (input, expected message) read best on one line
"""Serdes against bytes printed by Kafka's Java serializers (kafka-clients/streams 3.9.1).

Vectors printed by tests/vectors/KafkaVectors.java.
"""

import json
import math
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtable.errors import ConfigError, SerializationError
from streamtable.serde import Serde, Serdes, Windowed
from streamtable.serde.builtin import JsonSerde

pytestmark = pytest.mark.unit

LONG_VECTORS = [
    (0, "0000000000000000"),
    (1, "0000000000000001"),
    (-1, "ffffffffffffffff"),
    (255, "00000000000000ff"),
    (256, "0000000000000100"),
    (1357000000000, "0000013bf380c200"),
    (9223372036854775807, "7fffffffffffffff"),
    (-9223372036854775808, "8000000000000000"),
]
INTEGER_VECTORS = [
    (0, "00000000"),
    (1, "00000001"),
    (-1, "ffffffff"),
    (65536, "00010000"),
    (2147483647, "7fffffff"),
    (-2147483648, "80000000"),
]
DOUBLE_VECTORS = [
    (0.0, "0000000000000000"),
    (-0.0, "8000000000000000"),
    (1.5, "3ff8000000000000"),
    (-2.25, "c002000000000000"),
    (3.141592653589793, "400921fb54442d18"),
    (1.0e300, "7e37e43c8800759c"),
    (4.9e-324, "0000000000000001"),
    (math.inf, "7ff0000000000000"),
    (-math.inf, "fff0000000000000"),
    (math.nan, "7ff8000000000000"),
]
STRING_VECTORS = [
    ("", ""),
    ("kafka", "6b61666b61"),
    ("h\u00e9llo", "68c3a96c6c6f"),
    ("\u65e5\u672c", "e697a5e69cac"),
    ("\U0001f600", "f09f9880"),
    ("a\u0000b", "610062"),
]
# Java's StringDeserializer (new String(bytes, UTF_8)) on invalid UTF-8.
JAVA_INVALID_UTF8 = [
    ("ff", "\ufffd"),
    ("61c3", "a\ufffd"),
    ("e282", "\ufffd"),
    ("eda080", "\ufffd"),
    ("f09f98", "\ufffd"),
    ("c0af", "\ufffd\ufffd"),
    ("61ff62", "a\ufffdb"),
    ("f4908080", "\ufffd\ufffd\ufffd\ufffd"),
    ("00eda0f8e1ec", "\u0000\ufffd\ufffd\ufffd\ufffd"),
    ("00edbf80", "\u0000\ufffd"),
    ("edbf7ff4f1", "\ufffd\u007f\ufffd\ufffd"),
]


@pytest.mark.parametrize(("value", "hex_"), LONG_VECTORS)
def test_long_matches_java(value, hex_):
    s = Serdes.long()
    assert s.serialize(value).hex() == hex_
    assert s.deserialize(bytes.fromhex(hex_)) == value


@pytest.mark.parametrize(("value", "hex_"), INTEGER_VECTORS)
def test_integer_matches_java(value, hex_):
    s = Serdes.integer()
    assert s.serialize(value).hex() == hex_
    assert s.deserialize(bytes.fromhex(hex_)) == value


@pytest.mark.parametrize(("value", "hex_"), DOUBLE_VECTORS)
def test_double_matches_java(value, hex_):
    s = Serdes.double()
    assert s.serialize(value).hex() == hex_
    back = s.deserialize(bytes.fromhex(hex_))
    assert (math.isnan(back) and math.isnan(value)) or back == value


@pytest.mark.parametrize(("value", "hex_"), STRING_VECTORS)
def test_string_matches_java(value, hex_):
    s = Serdes.string()
    assert s.serialize(value).hex() == hex_
    assert s.deserialize(bytes.fromhex(hex_)) == value


@pytest.mark.parametrize(("hex_", "expected"), JAVA_INVALID_UTF8)
def test_string_invalid_utf8_like_java(hex_, expected):
    assert Serdes.string().deserialize(bytes.fromhex(hex_)) == expected
    assert Serdes.string().deserialize_many([bytes.fromhex(hex_)]) == [expected]


ALL_SERDES = [
    Serdes.string(),
    Serdes.long(),
    Serdes.integer(),
    Serdes.double(),
    Serdes.bytes(),
    Serdes.json(),
    Serdes.json({"a": "long"}),
    Serdes.custom(lambda o: o, lambda b: b, name="Id"),
    Serdes.time_windowed(Serdes.string(), 1000),
    Serdes.session_windowed(Serdes.long()),
]


def _serde_id(serde):
    """The serde's repr without memory addresses (the same test ids in every process)."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(serde))


@pytest.mark.parametrize("serde", ALL_SERDES, ids=_serde_id)
def test_none_is_tombstone(serde):
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None
    assert serde.serialize_many([None]) == [None]
    assert serde.deserialize_many([None]) == [None]


@pytest.mark.parametrize(
    ("serde", "kind", "name"),
    [
        (Serdes.string(), "string", "String"),
        (Serdes.long(), "long", "Long"),
        (Serdes.integer(), "integer", "Integer"),
        (Serdes.double(), "double", "Double"),
        (Serdes.bytes(), "bytes", "ByteArray"),
        (Serdes.json(), "json", "Json"),
        (Serdes.custom(bytes, bytes, name="Mine"), "custom", "Mine"),
        (Serdes.time_windowed(Serdes.string(), 5), "windowed", "TimeWindowedString"),
        (Serdes.session_windowed(Serdes.string()), "session_windowed", "SessionWindowedString"),
    ],
)
def test_kind_and_name(serde, kind, name):
    assert isinstance(serde, Serde)
    assert serde.kind == kind
    assert serde.name == name


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (Serdes.string(), Serdes.string(), True),
        (Serdes.string(), Serdes.long(), False),
        (Serdes.json(), Serdes.json(None), True),
        (Serdes.json({"a": "long"}), Serdes.json({"a": "long"}), True),
        (Serdes.json({"a": "long"}), Serdes.json({"a": "double"}), False),
        (Serdes.json({"a": "long"}), Serdes.json(), False),
        (Serdes.time_windowed(Serdes.string(), 5), Serdes.time_windowed(Serdes.string(), 5), True),
        (Serdes.time_windowed(Serdes.string(), 5), Serdes.time_windowed(Serdes.string(), 6), False),
        (Serdes.time_windowed(Serdes.string(), 5), Serdes.time_windowed(Serdes.long(), 5), False),
        (Serdes.session_windowed(Serdes.string()), Serdes.session_windowed(Serdes.string()), True),
    ],
)
def test_equality_and_hash(a, b, equal):
    assert (a == b) is equal
    if equal:
        assert hash(a) == hash(b)


@pytest.mark.parametrize(
    ("serde", "text"),
    [
        (Serdes.string(), "Serdes.string()"),
        (Serdes.bytes(), "Serdes.bytes()"),
        (Serdes.json({"a": "long"}), "Serdes.json(schema={'a': 'long'})"),
        (Serdes.time_windowed(Serdes.long(), 60000), "Serdes.time_windowed(Serdes.long(), 60000)"),
        (Serdes.session_windowed(Serdes.string()), "Serdes.session_windowed(Serdes.string())"),
    ],
)
def test_repr(serde, text):
    assert repr(serde) == text


@pytest.mark.parametrize(
    ("serde", "obj", "match"),
    [
        (Serdes.long(), 2**63, r"LongSerializer: 9223372036854775808 is out of range"),
        (Serdes.long(), -(2**63) - 1, r"LongSerializer: .* is out of range"),
        (Serdes.long(), 1.5, r"LongSerializer: expected int, got float"),
        (Serdes.long(), True, r"LongSerializer: expected int, got bool"),
        (Serdes.long(), "1", r"LongSerializer: expected int, got str"),
        (Serdes.integer(), 2**31, r"IntegerSerializer: 2147483648 is out of range .*32-bit"),
        (Serdes.double(), "1.0", r"DoubleSerializer: expected float, got str"),
        (Serdes.double(), 10**400, r"DoubleSerializer: cannot convert"),
        (Serdes.string(), b"x", r"StringSerializer: expected str, got bytes"),
        (Serdes.bytes(), "x", r"ByteArraySerializer: expected bytes, bytearray or memoryview"),
        (
            Serdes.json(),
            {"a": math.nan},
            r"JsonSerializer: cannot encode dict as JSON: Out of range",
        ),
        (Serdes.json(), {"a": {1, 2}}, r"JsonSerializer: cannot encode dict as JSON: .*set"),
        (
            Serdes.time_windowed(Serdes.string(), 5),
            "a",
            r"TimeWindowedStringSerializer: expected Windowed",
        ),
        (Serdes.time_windowed(Serdes.string(), 5), Windowed(None, 0, 5), r"must not be None"),
        (
            Serdes.time_windowed(Serdes.string(), 5),
            Windowed("a", 2**63, 5),
            r"window start must be a 64-bit int",
        ),
        (
            Serdes.session_windowed(Serdes.string()),
            Windowed("a", 0, "x"),
            r"window end must be a 64-bit int",
        ),
    ],
)
def test_serialize_errors(serde, obj, match):
    with pytest.raises(SerializationError, match=match):
        serde.serialize(obj)
    with pytest.raises(SerializationError, match=match):
        serde.serialize_many(["ok" if serde.kind == "string" else None, obj])


@pytest.mark.parametrize(
    ("serde", "data", "match"),
    [
        (
            Serdes.long(),
            b"abc",
            r"LongDeserializer: expected 8 bytes \(a big-endian signed 64-bit integer\), got 3 \(Size of data received by LongDeserializer is not 8\)",
        ),
        (Serdes.long(), b"", r"LongDeserializer: expected 8 bytes .* got 0"),
        (
            Serdes.integer(),
            b"abc",
            r"IntegerDeserializer: expected 4 bytes .*Size of data received by IntegerDeserializer is not 4",
        ),
        (
            Serdes.double(),
            b"123456789",
            r"DoubleDeserializer: expected 8 bytes \(a big-endian IEEE-754 double\), got 9",
        ),
        (Serdes.json(), b"{", r"JsonDeserializer: expected UTF-8 JSON, got invalid JSON"),
        (
            Serdes.json(),
            b"NaN",
            r"JsonDeserializer: expected UTF-8 JSON, got invalid JSON: NaN is not valid JSON",
        ),
        (Serdes.json(), b"\xff", r"JsonDeserializer: expected UTF-8 JSON, got invalid UTF-8"),
        (Serdes.long(), "text", r"LongDeserializer: expected bytes or None, got str"),
        (
            Serdes.time_windowed(Serdes.string(), 5),
            b"abc",
            r"TimeWindowedStringDeserializer: expected inner key bytes \+ 8-byte big-endian window start, got 3 bytes",
        ),
        (
            Serdes.session_windowed(Serdes.string()),
            b"a" * 15,
            r"SessionWindowedStringDeserializer: expected inner key bytes \+ 8-byte big-endian end \+ 8-byte big-endian start, got 15 bytes",
        ),
        (
            Serdes.time_windowed(Serdes.long(), 5),
            b"abc" + bytes(8),
            r"LongDeserializer: expected 8 bytes",
        ),
        (  # Kafka's Window constructor refuses both
            Serdes.time_windowed(Serdes.string(), 5),
            b"a" + struct.pack(">q", -10),
            r"window start -10 is negative \(Kafka: 'Window startMs time cannot be negative",
        ),
        (
            Serdes.session_windowed(Serdes.string()),
            b"a" + struct.pack(">qq", 1, 5),
            r"window end 1 is before its start 5 \(Kafka: 'Window endMs time cannot be smaller",
        ),
    ],
)
def test_deserialize_errors(serde, data, match):
    with pytest.raises(SerializationError, match=match):
        serde.deserialize(data)
    if isinstance(data, bytes):
        with pytest.raises(SerializationError, match=match):
            serde.deserialize_many([None, data])


@pytest.mark.parametrize(
    ("serde", "objs"),
    [
        (Serdes.long(), [1, None, -5, 2**62]),
        (Serdes.long(), [1, 2, 3]),
        (Serdes.integer(), [1, 2, None]),
        (Serdes.double(), [1.0, 2.5, None, -0.0]),
        (Serdes.string(), ["a", None, "é"]),
        (Serdes.bytes(), [b"a", None, bytearray(b"b")]),
        (Serdes.json(), [{"a": 1}, None, [1, "x"], "s", 3.5]),
        (Serdes.time_windowed(Serdes.string(), 10), [Windowed("k", 0, 10), None]),
    ],
)
def test_many_roundtrip(serde, objs):
    datas = serde.serialize_many(objs)
    assert datas == [serde.serialize(o) for o in objs]
    expected = [bytes(o) if isinstance(o, bytearray) else o for o in objs]
    assert serde.deserialize_many(datas) == expected


def test_bytes_accepts_buffers_and_deserialize_accepts_bytearray():
    assert Serdes.bytes().serialize(memoryview(b"xy")) == b"xy"
    assert Serdes.long().deserialize(bytearray(8)) == 0


JSON_BATCH = [
    b'{"a":1,"b":[1,2.5,"x"]}',
    b' {"a":1} ',  # surrounding whitespace: valid JSON
    b'{"a":1}\n',
    b"7",
    b'"text"',
    b"null",  # JSON null (not a tombstone): deserializes to None
    None,  # a tombstone
    bytearray(b'{"k":"v"}'),
    memoryview(b"[true,false]"),
    b'{"a":NaN}',  # not JSON
    b"Infinity",
    b'{"a":1}{"b":2}',  # extra data
    b'{"a":1',  # truncated
    b"",
    b"\xff\xfe",  # invalid UTF-8
    '{"é":"ü"}'.encode(),
    # numbers beyond 64 bits or a double's range, surrogates
    b"123456789012345678901234567890",  # beyond 64 bits: an exact int, not a float
    b'{"n":-9223372036854775809}',
    b"18446744073709551616",
    b"1e400",  # beyond a double: inf
    b'"\\ud800"',  # an unpaired surrogate escape
    b'"\xed\xa0\x80"',  # a surrogate encoded in UTF-8: invalid UTF-8
    b"-0.0",
]


def _outcome(f):
    try:
        return ("ok", f())
    except SerializationError as e:
        return ("error", str(e))


def test_json_deserialize_many_equals_deserialize_item_by_item():
    serde = Serdes.json()
    for data in JSON_BATCH:  # each alone: the same value or the very same error
        alone = _outcome(lambda d=data: [serde.deserialize(d)])
        assert _outcome(lambda d=data: serde.deserialize_many([d])) == alone, data
    good = [d for d in JSON_BATCH if _outcome(lambda d=d: serde.deserialize(d))[0] == "ok"]
    assert len(good) == 16
    # repr: an int is not a float, and -0.0 is not 0.0
    assert repr(serde.deserialize_many(good)) == repr([serde.deserialize(d) for d in good])


def test_json_deserialize_many_keeps_integers_beyond_64_bits_and_out_of_range_numbers():
    got = Serdes.json().deserialize_many(
        [b"123456789012345678901234567890", b'{"n":-9223372036854775809}', b"1e400", b"[-1e400]"]
    )
    assert got == [
        123456789012345678901234567890,
        {"n": -9223372036854775809},
        math.inf,
        [-math.inf],
    ]
    assert type(got[0]) is int and type(got[1]["n"]) is int


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # any size
    | st.floats(allow_nan=False)  # infinities serialize as Infinity: not JSON, an error
    | st.text()
    | st.text(st.characters(categories=("Cs",)), min_size=1),  # lone surrogates
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_JSON_VALUES, st.booleans())
def test_json_deserialize_many_equals_deserialize_on_any_document(value, ascii_only):
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    serde = Serdes.json()
    expected = _outcome(lambda: [serde.deserialize(data)])
    got = _outcome(lambda: serde.deserialize_many([data]))
    assert repr(got) == repr(expected)


def test_json_is_compact_like_jackson():
    assert Serdes.json().serialize({"k": [1, 2.5, None, True], "é": "ü"}) == (
        '{"k":[1,2.5,null,true],"é":"ü"}'.encode()
    )


def test_json_schema_is_stored_and_validated():
    s = Serdes.json(
        {"origin": "string", "dep": {"delay": "double", "n": "integer"}, "ok": "boolean"}
    )
    assert s.schema == {
        "origin": "string",
        "dep": {"delay": "double", "n": "integer"},
        "ok": "boolean",
    }
    assert s.spark_ddl() == "`origin` STRING, `dep` STRUCT<`delay`: DOUBLE, `n`: INT>, `ok` BOOLEAN"
    assert Serdes.json().schema is None and Serdes.json().spark_ddl() is None
    # the schema is not enforced in Python
    assert s.deserialize(b'{"x":1}') == {"x": 1}


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        (
            {"a": "int64"},
            r"field 'a' has type 'int64'; expected one of string, long, integer, double, boolean",
        ),
        ({"a": {"b": "float"}}, r"field 'a.b' has type 'float'"),
        ({}, r"schema is empty"),
        (["a"], r"expected a dict of field name -> type name, got list"),
        ({"": "long"}, r"field names must be non-empty str"),
    ],
)
def test_json_schema_errors(schema, match):
    with pytest.raises(ConfigError, match=match):
        JsonSerde(schema)


def test_custom_serde_wraps_errors_and_skips_none():
    calls = []

    def ser(o):
        calls.append(o)
        return str(o).encode()

    def de(b):
        raise KeyError("boom")

    s = Serdes.custom(ser, de, name="Thing")
    assert s.serialize(None) is None and calls == []
    assert s.serialize(5) == b"5"
    with pytest.raises(
        SerializationError, match=r"ThingDeserializer: deserializer raised KeyError: 'boom'"
    ):
        s.deserialize(b"x")
    bad = Serdes.custom(lambda o: 5, bytes, name="Bad")
    with pytest.raises(
        SerializationError, match=r"BadSerializer: serializer must return bytes, returned int"
    ):
        bad.serialize(1)
    with pytest.raises(TypeError, match="must be callable"):
        Serdes.custom(1, bytes)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("String", Serdes.string()),
        ("string", Serdes.string()),
        ("Long", Serdes.long()),
        ("Integer", Serdes.integer()),
        ("Double", Serdes.double()),
        ("ByteArray", Serdes.bytes()),
        ("Bytes", Serdes.bytes()),
        ("Json", Serdes.json()),
        ("org.apache.kafka.common.serialization.Serdes$StringSerde", Serdes.string()),
        ("org.apache.kafka.common.serialization.Serdes$LongSerde", Serdes.long()),
        ("org.apache.kafka.common.serialization.Serdes$ByteArraySerde", Serdes.bytes()),
        ("Serdes$IntegerSerde", Serdes.integer()),
        ("DoubleSerde", Serdes.double()),
    ],
)
def test_from_name(name, expected):
    assert Serdes.from_name(name) == expected


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("Strng", r"Unknown serde name 'Strng'. Did you mean 'String'\?"),
        (
            "org.apache.kafka.common.serialization.Serdes$UUIDSerde",
            r"Unknown serde name .*UUIDSerde",
        ),
        (5, r"Serde name must be a str, got int"),
    ],
)
def test_from_name_errors(name, match):
    with pytest.raises(ConfigError, match=match):
        Serdes.from_name(name)


# --- windowed keys, vectors from TimeWindowedSerializer / SessionWindowedSerializer -------------


@pytest.mark.parametrize(
    ("serde", "windowed", "hex_", "text"),
    [
        (
            Serdes.time_windowed(Serdes.string(), 5000),
            Windowed("a", 10000, 15000),
            "610000000000002710",
            "[a@10000/15000]",
        ),
        (
            Serdes.time_windowed(Serdes.long(), 60000),
            Windowed(7, 0, 60000),
            "00000000000000070000000000000000",
            "[7@0/60000]",
        ),
        (
            Serdes.session_windowed(Serdes.string()),
            Windowed("key", 1000, 2500),
            "6b657900000000000009c400000000000003e8",
            "[key@1000/2500]",
        ),
    ],
)
def test_windowed_matches_java(serde, windowed, hex_, text):
    assert serde.serialize(windowed).hex() == hex_
    assert serde.deserialize(bytes.fromhex(hex_)) == windowed
    assert str(windowed) == text


def test_time_windowed_end_capped_at_long_max_like_java():
    s = Serdes.time_windowed(Serdes.string(), 2**63 - 1 - 5)
    w = s.deserialize(bytes.fromhex("62000000000000000a"))
    assert (w.key, w.start, w.end) == ("b", 10, 2**63 - 1)


@pytest.mark.parametrize(
    "serde", [Serdes.time_windowed(Serdes.string(), 5), Serdes.session_windowed(Serdes.string())]
)
def test_windowed_empty_bytes_is_none_like_java(serde):
    assert serde.deserialize(b"") is None


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((Serdes.string(), 0), ValueError, "window_size_ms must be > 0, got 0"),
        ((Serdes.string(), 1.5), TypeError, "window_size_ms must be an int, got float"),
        (("x", 5), TypeError, "inner must be a Serde, got str"),
    ],
)
def test_time_windowed_constructor_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        Serdes.time_windowed(*args)


def test_windowed_is_frozen_and_hashable():
    w = Windowed("a", 1, 2)
    assert hash(w) == hash(Windowed("a", 1, 2))
    with pytest.raises(AttributeError):
        w.start = 3  # type: ignore[misc]


@pytest.mark.parametrize("bits", ["7ff8000000000000", "fff8000000000000", "7ff0000000000001"])
def test_double_serde_writes_every_nan_as_javas_canonical_nan(bits):
    # DoubleSerializer: Double.doubleToLongBits collapses every NaN to 0x7ff8000000000000
    import struct

    nan = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert Serdes.double().serialize(nan).hex() == "7ff8000000000000"


def test_string_serializer_writes_surrogates_as_javas_get_bytes_does():
    # a JSON "\ud800" escape gives Python a lone surrogate: Java's String.getBytes(UTF_8)
    # writes '?' for it, and one 4-byte character for a high-low pair (it used to raise)
    s = Serdes.string()
    lone = Serdes.json().deserialize(b'{"name":"x\\ud800y"}')["name"]
    assert s.serialize(lone) == b"x?y"
    assert s.serialize_many([lone, "\ud83d\ude00", "ok"]) == [b"x?y", "\U0001f600".encode(), b"ok"]
