"""Kafka's WordCountDemo written with Quix Streams 3.x, for ``bench/wordcount.py``.

Runs in its own virtual environment (Quix Streams pins its own confluent-kafka), started by
the benchmark as ``python quix_wordcount.py '<json settings>'``; it imports nothing of
streamtable. Lines are lower-cased and split on non-word characters as Java's
``String.split("\\W+")`` does, re-keyed by word (``group_by``: Quix's repartition topic, plain
string keys and values), counted in Quix's RocksDB state, and written as ``word`` →
8-byte big-endian count (Kafka's ``Serdes.Long()``), like the other engines.

Prints ``READY <unix time>`` on stdout just before ``Application.run()``; runs until SIGTERM.
"""

from __future__ import annotations

import json
import re
import struct
import sys

from quix_app import application, run
from quixstreams.models.serializers import Serializer

_NON_WORD = re.compile(r"[^a-zA-Z0-9_]+")


def java_split_words(line: str) -> list[str]:
    """``line.toLowerCase().split("\\W+")`` in Java: leading "" kept, trailing "" dropped."""
    if line == "":
        return [""]
    parts = _NON_WORD.split(line.lower())
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class LongSerializer(Serializer):
    """8-byte big-endian signed integers (Kafka's ``LongSerializer``)."""

    def __call__(self, value: int, ctx: object) -> bytes:
        return struct.pack(">q", value)


def count(word: str, state) -> int:  # type: ignore[no-untyped-def]
    n = state.get("n", 0) + 1
    state.set("n", n)
    return n


def main() -> None:
    cfg = json.loads(sys.argv[1])
    app = application(cfg)
    lines = app.topic(cfg["input"], key_deserializer="bytes", value_deserializer="str")
    out = app.topic(cfg["output"], key_serializer="str", value_serializer=LongSerializer())
    sdf = app.dataframe(lines)
    sdf = sdf.apply(java_split_words, expand=True)
    sdf = sdf.group_by(
        lambda word: word,
        name="word",
        key_serializer="str",
        key_deserializer="str",
        value_serializer="str",
        value_deserializer="str",
    )
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(out)
    run(app)


if __name__ == "__main__":
    main()
