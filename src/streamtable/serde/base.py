"""The :class:`Serde` base class: a named pair of serializer and deserializer.

A serde turns Python objects into the bytes of a Kafka record key or value and back, byte for
byte as the matching Kafka Java serializer does. ``None`` always maps to ``None`` (a tombstone).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from streamtable.errors import SerializationError

__all__ = ["Serde"]


class Serde:
    """Base class of every serde: ``serialize(obj) -> bytes | None`` and its inverse.

    Subclasses implement :meth:`_serialize` and :meth:`_deserialize` for non-``None`` input;
    the base class handles ``None`` (tombstones), the vectorised ``*_many`` helpers, equality,
    hashing and ``repr``.

    Attributes
    ----------
    name : str
        Short name as in Kafka (``"String"``, ``"Long"``, ...); used in error messages.
    kind : str
        One of ``"string"``, ``"long"``, ``"integer"``, ``"double"``, ``"bytes"``, ``"json"``,
        ``"windowed"``, ``"session_windowed"``, ``"custom"``. The compiler uses it to pick native
        Spark expressions instead of Python code.

    Notes
    -----
    Two serdes are equal when they have the same class, kind and parameters (for example the
    same JSON schema, or the same inner serde and window size).

    Examples
    --------
    >>> from streamtable.serde import Serdes
    >>> Serdes.string() == Serdes.string()
    True
    >>> Serdes.string().serialize(None) is None
    True
    """

    kind: ClassVar[str] = "custom"
    name: str = "Custom"

    # -- to be implemented by subclasses ---------------------------------------------------
    def _serialize(self, obj: Any) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def _deserialize(self, data: bytes) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _params(self) -> tuple[Any, ...]:
        """Parameters that, with the class and kind, define equality."""
        return ()

    def _repr_args(self) -> str:
        return ""

    # -- public API --------------------------------------------------------------------------
    def serialize(self, obj: Any) -> bytes | None:
        """Serialize one object; ``None`` gives ``None``.

        Raises
        ------
        SerializationError
            If ``obj`` has the wrong type or is out of range for this serde.
        """
        if obj is None:
            return None
        return self._serialize(obj)

    def deserialize(self, data: bytes | bytearray | memoryview | None) -> Any:
        """Deserialize one record key or value; ``None`` gives ``None``.

        Raises
        ------
        SerializationError
            If ``data`` is not in this serde's format.
        """
        if data is None:
            return None
        if not isinstance(data, bytes):
            if isinstance(data, bytearray | memoryview):
                data = bytes(data)
            else:
                raise SerializationError(
                    f"{self.name}Deserializer: expected bytes or None, got {type(data).__name__}"
                )
        return self._deserialize(data)

    def serialize_many(self, objs: Iterable[Any]) -> list[bytes | None]:
        """Serialize a batch of objects (used on Arrow batches); ``None`` entries stay ``None``."""
        ser = self._serialize
        return [None if o is None else ser(o) for o in objs]

    def deserialize_many(self, datas: Iterable[bytes | None]) -> list[Any]:
        """Deserialize a batch of byte strings; ``None`` entries stay ``None``."""
        de = self.deserialize
        return [de(d) for d in datas]

    # -- helpers for subclasses --------------------------------------------------------------
    def _ser_error(self, message: str) -> SerializationError:
        return SerializationError(f"{self.name}Serializer: {message}")

    def _de_error(self, message: str) -> SerializationError:
        return SerializationError(f"{self.name}Deserializer: {message}")

    # -- value semantics ---------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Serde):
            return NotImplemented
        return (
            type(self) is type(other)
            and self.kind == other.kind
            and self._params() == other._params()
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.kind, self._params()))

    def __repr__(self) -> str:
        return f"Serdes.{self._factory_name()}({self._repr_args()})"

    def _factory_name(self) -> str:
        return self.kind
