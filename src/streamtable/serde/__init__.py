"""Serdes byte-compatible with Kafka's Java serializers.

Public API: :class:`Serdes` (factory), :class:`Serde` (base class), :class:`Windowed`.
"""

from streamtable.serde.base import Serde
from streamtable.serde.builtin import (
    BytesSerde,
    CustomSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    Serdes,
    StringSerde,
)
from streamtable.serde.windowed import SessionWindowedSerde, TimeWindowedSerde, Windowed

__all__ = [
    "Serde",
    "Serdes",
    "Windowed",
    "StringSerde",
    "LongSerde",
    "IntegerSerde",
    "DoubleSerde",
    "BytesSerde",
    "JsonSerde",
    "CustomSerde",
    "TimeWindowedSerde",
    "SessionWindowedSerde",
]
