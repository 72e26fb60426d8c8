"""Serdes.debezium_json / Serdes.debezium_key (no JVM)."""

from __future__ import annotations

import pytest

from streamtable import Serdes
from streamtable.errors import ConfigError, SerializationError


def test_values_are_the_rows_new_state_and_deletes_are_none():
    serde = Serdes.debezium_json()
    row = {"id": 1, "status": "active", "registered": 19724}
    for op in ("c", "u", "r"):
        event = (
            f'{{"before":null,"after":{{"id":1,"status":"active","registered":19724}},"op":"{op}"}}'
        )
        assert serde.deserialize(event.encode()) == row
    assert serde.deserialize(b'{"before":{"id":1},"after":null,"op":"d"}') is None
    assert serde.deserialize(None) is None
    assert serde.deserialize(serde.serialize(row)) == row


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "DebeziumJsonDeserializer: not JSON"),
        (b'{"id": 1}', "not a Debezium change event .*schemas.enable=false"),
        (b'{"before":null,"after":null,"op":"t"}', "change event with op 't'"),
        (b'{"before":null,"after":null,"op":"u"}', "op 'u' event without an 'after' row"),
    ],
)
def test_bad_events_are_named(data, message):
    with pytest.raises(SerializationError, match=message):
        Serdes.debezium_json().deserialize(data)


def test_a_schema_catches_changed_columns_and_types():
    serde = Serdes.debezium_json({"id": "long", "banned": "boolean", "score": "double"})
    ok = b'{"op":"u","after":{"id":1,"banned":null,"score":2}}'
    assert serde.deserialize(ok) == {"id": 1, "banned": None, "score": 2}
    with pytest.raises(SerializationError, match=r"columns \['banned', 'id'\], the schema"):
        serde.deserialize(b'{"op":"u","after":{"id":1,"banned":true}}')
    with pytest.raises(SerializationError, match="column 'id' holds '1', not a long"):
        serde.deserialize(b'{"op":"u","after":{"id":"1","banned":true,"score":1.5}}')
    with pytest.raises(SerializationError, match="column 'id' holds True, not a long"):
        serde.deserialize(b'{"op":"u","after":{"id":true,"banned":true,"score":1.5}}')
    with pytest.raises(ConfigError, match="expected a non-empty dict of column"):
        Serdes.debezium_json({"id": "uuid"})


def test_keys_are_the_primary_key_written_back_as_connect_writes_them():
    one, two = Serdes.debezium_key("id"), Serdes.debezium_key("region", "id")
    assert one.deserialize(b'{"id":7}') == 7
    assert one.serialize("p7") == b'{"id":"p7"}'
    assert two.serialize(("eu", 3)) == b'{"region":"eu","id":3}'
    assert two.deserialize(b'{"region":"eu","id":3}') == ("eu", 3)
    assert one == Serdes.debezium_key("id") and one != two
    with pytest.raises(SerializationError, match=r"expected a key object with columns \['id'\]"):
        one.deserialize(b'{"player":7}')
    with pytest.raises(SerializationError, match="expected a tuple of 2 values"):
        two.serialize(3)
    with pytest.raises(ConfigError, match="name the primary key's columns"):
        Serdes.debezium_key()


def test_a_composite_key_in_another_column_order_is_refused_naming_the_order():
    # the table keeps the connector's key bytes and lookups serialize in the columns' order:
    # a key listed in another order would silently miss every row of a join
    from streamtable.errors import SerializationError

    serde = Serdes.debezium_key("id", "region")
    assert serde.deserialize(b'{"id":3,"region":"eu"}') == (3, "eu")
    with pytest.raises(
        SerializationError,
        match=r"the key's columns come in the order \['region', 'id'\], not \['id', 'region'\]"
        r".*Serdes.debezium_key\('region', 'id'\)",
    ):
        serde.deserialize(b'{"region":"eu","id":3}')
