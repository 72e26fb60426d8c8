"""The synthetic windowed count of ``bench/windows.py`` written with Quix Streams 3.x.

Runs in Quix's own virtual environment (``bench/quix.py``), started as
``python quix_windows.py '<json settings>'``; it imports nothing of streamtable. Each key's
records are counted in tumbling windows of ``size_ms`` with ``grace_ms`` of grace, in Quix's
RocksDB state, with windows closed by partition (``closing_strategy="partition"``: the largest
timestamp seen in the partition, as Kafka Streams' stream time). ``final`` false: every update
(``current()``); true: only closed windows (``final()``). Written as Kafka Streams'
``TimeWindowedSerializer`` key (the key bytes, then the 8-byte window start) → 8-byte
big-endian count (``Serdes.Long()``), like the other engines.

Prints ``READY <unix time>`` on stdout just before ``Application.run()``; runs until SIGTERM.
"""

from __future__ import annotations

import json
import struct
import sys
from typing import Any

from quix_app import application, run
from quixstreams.models.serializers import Serializer


class CountSerializer(Serializer):
    """The count of a ``(windowed key, count)`` pair as 8 big-endian bytes."""

    def __call__(self, value: tuple[bytes, int], ctx: object) -> bytes:
        return struct.pack(">q", value[1])


def windowed(window: dict[str, Any], key: bytes, timestamp: int, headers: Any) -> tuple:
    """``(key + 8-byte start, count)`` of one window result."""
    return key + struct.pack(">q", window["start"]), window["value"]


def main() -> None:
    cfg = json.loads(sys.argv[1])
    app = application(cfg)
    records = app.topic(cfg["input"], key_deserializer="bytes", value_deserializer="bytes")
    out = app.topic(cfg["output"], key_serializer="bytes", value_serializer=CountSerializer())
    windows = (
        app.dataframe(records)
        .tumbling_window(duration_ms=cfg["size_ms"], grace_ms=cfg["grace_ms"])
        .count()
    )
    closing = "partition"
    sdf = windows.final(closing) if cfg["final"] else windows.current(closing)
    sdf = sdf.apply(windowed, metadata=True)
    sdf.to_topic(out, key=lambda pair: pair[0])
    run(app)


if __name__ == "__main__":
    main()
