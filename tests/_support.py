"""Producing to and reading from topics in integration tests (confluent-kafka)."""

from __future__ import annotations

from typing import Any

from streamtable.demo._harness import ensure_topics, read_topic
from streamtable.demo.flights_data import produce_records

__all__ = ["ensure_topics", "read_topic", "produce_records", "produce_values"]


def produce_values(
    bootstrap: str, topic: str, pairs: list[tuple[Any, Any]], *, ts: int | None = None
) -> None:
    """Produce (key str|None, value bytes|str|None) pairs, in order."""
    records = []
    for i, (k, v) in enumerate(pairs):
        kb = None if k is None else k.encode()
        vb = v.encode() if isinstance(v, str) else v
        records.append((kb, vb, None if ts is None else ts + i))
    produce_records(bootstrap, topic, records)
