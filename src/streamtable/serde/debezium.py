"""Serdes for Debezium's change events in JSON (Kafka Connect's ``JsonConverter``, no schemas).

A Debezium source connector writes one record per row change: the key is the row's primary key
as a JSON object (``{"id": 7}``), the value an envelope ``{"before": ..., "after": ...,
"source": ..., "op": ..., "ts_ms": ...}``, and a delete is followed by a tombstone (a null value)
for log compaction. Read as a table, a change is an upsert: ``c`` (insert), ``u`` (update) and
``r`` (a snapshot read) give the new row, ``d`` a delete — which is how Kafka Streams users
read Debezium topics into a ``KTable`` (Debezium's ``ExtractNewRecordState`` transformation does
the same inside Connect).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from streamtable.serde.base import Serde
from streamtable.serde.builtin import JSON_SCHEMA_TYPES

__all__ = ["DebeziumJsonSerde", "DebeziumKeySerde"]

#: Debezium's ``op`` codes that carry a new row state in ``after``.
UPSERT_OPS = frozenset({"c", "u", "r"})

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "long": (int,),
    "integer": (int,),
    "double": (float, int),
    "boolean": (bool,),
}


class DebeziumJsonSerde(Serde):
    """The value of a Debezium change event, read as the row's new state.

    Deserialization: ``op`` ``c``/``u``/``r`` → the ``after`` row (a dict); ``d`` → ``None`` (a
    delete: a table removes the key, as it does for the tombstone Debezium sends next); a null
    value (the tombstone) → ``None``. Any other ``op`` (``t``, a truncate; ``m``, a message), a
    value that is not an envelope, or — when ``schema`` is given — a row whose columns differ
    from it (a schema change in the database) raises :class:`~streamtable.errors.
    SerializationError`, which the ``deserialization.exception.handler`` handles (fail, or log
    and skip and count the record).

    Serialization writes a minimal envelope ``{"before": null, "after": row, "op": "c"}`` (for
    tests and the TopologyTestDriver; Debezium writes the real events).

    Parameters
    ----------
    schema : dict, optional
        ``{column: type}`` of the rows (types as in ``Serdes.json``: ``"string"``, ``"long"``,
        ``"integer"``, ``"double"``, ``"boolean"``). When given, a row must have exactly these
        columns, each null or of its type.

    Examples
    --------
    >>> serde = DebeziumJsonSerde({"id": "long", "status": "string"})
    >>> serde.deserialize(b'{"before":null,"after":{"id":1,"status":"active"},"op":"c"}')
    {'id': 1, 'status': 'active'}
    >>> serde.deserialize(b'{"before":{"id":1,"status":"active"},"after":null,"op":"d"}') is None
    True
    >>> serde.deserialize(b'{"before":null,"after":{"id":1,"status":"x","rank":2},"op":"u"}')
    Traceback (most recent call last):
        ...
    streamtable.errors.SerializationError: DebeziumJsonDeserializer: the row has columns ...
    """

    kind: ClassVar[str] = "debezium_json"
    name = "DebeziumJson"

    def __init__(self, schema: Mapping[str, str] | None = None) -> None:
        if schema is not None:
            bad = {c: t for c, t in schema.items() if t not in _PY_TYPES}
            if bad or not schema:
                from streamtable.errors import ConfigError

                raise ConfigError(
                    f"Serdes.debezium_json(schema=...): expected a non-empty dict of column -> "
                    f"one of {', '.join(_PY_TYPES)}; got {dict(schema)!r}"
                )
        self._schema = None if schema is None else tuple(schema.items())

    @property
    def schema(self) -> dict[str, str] | None:
        """The row schema given at construction, or ``None``."""
        return None if self._schema is None else dict(self._schema)

    def spark_ddl(self) -> str | None:
        """The rows' schema as Spark SQL DDL, or ``None``."""
        if self._schema is None:
            return None
        return ", ".join(f"`{c}` {JSON_SCHEMA_TYPES[t]}" for c, t in self._schema)

    def _params(self) -> tuple[Any, ...]:
        return (self._schema,)

    def _repr_args(self) -> str:
        return "" if self._schema is None else f"{self.schema!r}"

    def _factory_name(self) -> str:
        return "debezium_json"

    def _serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, Mapping):
            raise self._ser_error(f"expected a row (dict), got {type(obj).__name__}")
        envelope = {"before": None, "after": dict(obj), "op": "c"}
        return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def _deserialize(self, data: bytes) -> Any:
        try:
            event = json.loads(data)
        except ValueError as e:
            raise self._de_error(f"not JSON: {e}") from e
        if not isinstance(event, dict) or "op" not in event:
            raise self._de_error(
                "not a Debezium change event (a JSON object with 'op', 'before' and 'after'); "
                "is the connector's value converter JsonConverter with schemas.enable=false?"
            )
        op = event["op"]
        if op == "d":
            return None
        if op not in UPSERT_OPS:
            raise self._de_error(
                f"change event with op {op!r}: a table reads only c (insert), u (update), "
                "r (snapshot read) and d (delete)"
            )
        row = event.get("after")
        if not isinstance(row, dict):
            raise self._de_error(f"op {op!r} event without an 'after' row")
        if self._schema is not None:
            self._check(row)
        return row

    def _check(self, row: dict[str, Any]) -> None:
        want = [c for c, _ in self._schema or ()]
        if sorted(row) != sorted(want):
            raise self._de_error(
                f"the row has columns {sorted(row)}, the schema {sorted(want)}: the table's "
                "schema changed in the database; update Serdes.debezium_json(schema=...) and "
                "the code that reads the rows"
            )
        for column, type_name in self._schema or ():
            value = row[column]
            ok = isinstance(value, _PY_TYPES[type_name]) and not (
                type_name != "boolean" and isinstance(value, bool)
            )
            if value is not None and not ok:
                raise self._de_error(
                    f"column {column!r} holds {value!r}, not a {type_name}: the table's "
                    "schema changed in the database; update Serdes.debezium_json(schema=...)"
                )


class DebeziumKeySerde(Serde):
    """The key of a Debezium change event: the row's primary key, ``{"column": value, ...}``.

    A one-column key deserializes to its value (``{"id": 7}`` → ``7``), a composite key to a
    tuple in ``columns`` order; serialization writes the JSON object back, compact and in
    ``columns`` order, byte for byte as Kafka Connect's ``JsonConverter`` writes it. So a stream
    keyed by player id joins the table directly: the join serializes the stream's keys with the
    table's key serde.

    Parameters
    ----------
    columns : str
        The primary key's columns, in the table's key order.

    Raises
    ------
    ConfigError
        If no column is given.

    Examples
    --------
    >>> DebeziumKeySerde("id").deserialize(b'{"id":"p0000007"}')
    'p0000007'
    >>> DebeziumKeySerde("id").serialize("p0000007")
    b'{"id":"p0000007"}'
    >>> DebeziumKeySerde("region", "id").deserialize(b'{"region":"eu","id":3}')
    ('eu', 3)
    """

    kind: ClassVar[str] = "debezium_key"
    name = "DebeziumKey"

    def __init__(self, *columns: str) -> None:
        if not columns or not all(isinstance(c, str) and c for c in columns):
            from streamtable.errors import ConfigError

            raise ConfigError(
                "Serdes.debezium_key(*columns): name the primary key's columns, e.g. "
                f"Serdes.debezium_key('id'); got {columns!r}"
            )
        self.columns = tuple(columns)

    def _params(self) -> tuple[Any, ...]:
        return self.columns

    def _repr_args(self) -> str:
        return ", ".join(repr(c) for c in self.columns)

    def _factory_name(self) -> str:
        return "debezium_key"

    def _serialize(self, obj: Any) -> bytes:
        values: Sequence[Any]
        if len(self.columns) == 1:
            values = (obj,)
        elif isinstance(obj, tuple | list) and len(obj) == len(self.columns):
            values = obj
        else:
            raise self._ser_error(
                f"expected a tuple of {len(self.columns)} values for {self.columns}, got {obj!r}"
            )
        key = dict(zip(self.columns, values, strict=True))
        return json.dumps(key, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def _deserialize(self, data: bytes) -> Any:
        try:
            key = json.loads(data)
        except ValueError as e:
            raise self._de_error(f"not JSON: {e}") from e
        if not isinstance(key, dict) or sorted(key) != sorted(self.columns):
            raise self._de_error(
                f"expected a key object with columns {list(self.columns)}, got {key!r}: is the "
                "connector's key converter JsonConverter with schemas.enable=false, and is "
                "the table's primary key these columns?"
            )
        if list(key) != list(self.columns):
            # the table keeps the connector's key bytes, and lookups serialize the key in the
            # columns' order: another order would never match (a join missing every row)
            raise self._de_error(
                f"the key's columns come in the order {list(key)}, not {list(self.columns)}: "
                f"list them in the table's primary-key order, "
                f"Serdes.debezium_key({', '.join(repr(c) for c in key)})"
            )
        if len(self.columns) == 1:
            return key[self.columns[0]]
        return tuple(key[c] for c in self.columns)
