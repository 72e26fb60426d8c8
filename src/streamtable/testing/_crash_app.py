"""The application :mod:`streamtable.testing.crash` kills and restarts (run as a module).

``python -m streamtable.testing._crash_app CONFIG_JSON`` runs the crash topology: every input
record ``(key, seq)`` (String key, Long value) is echoed once to the echo topic, and a per-key
running sum is written to the sums topic. With ``"groups"`` and ``"group_sums"`` topics in the
JSON it also runs the two-sub-topology chain of :func:`chain_topology`. With a ``"files"``
directory in it, the echo stream and the sums are also written there as Parquet. With
``"exit_when_caught_up": true`` it exits 0 once all input present at start is processed and
committed; otherwise it runs until killed.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import timedelta
from typing import Any

from streamtable import KafkaStreams, KStream, Serdes, StreamsBuilder
from streamtable.topology.topology import Topology


def _add(total: int, value: int) -> int:
    return total + value


def crash_topology(source: str, echo: str, sums: str, files: str | None = None) -> Topology:
    """Echo each record; keep a running sum per key (``Sums``).

    Parameters
    ----------
    source, echo, sums : str
        The input topic and the two output topics.
    files : str, optional
        A directory: the echo stream and the sums are also written to Parquet there
        (``echo/``, ``sums/``) with ``to_files``.
    """
    builder = StreamsBuilder()
    _echo_and_sums(builder, source, echo, sums, files)
    return builder.build()


def _echo_and_sums(
    builder: StreamsBuilder, source: str, echo: str, sums: str, files: str | None
) -> KStream:
    """Add :func:`crash_topology`'s source, echo and sums to ``builder``; return the source."""
    s, long_ = Serdes.string(), Serdes.long()
    stream = builder.stream(source, key_serde=s, value_serde=long_)
    echoed = stream.map_values(lambda v: v, name="echo")
    echoed.to(echo, value_serde=long_)
    summed = stream.group_by_key().reduce(_add, name="Sums").to_stream()
    summed.to(sums, key_serde=s, value_serde=long_)
    if files:
        echoed.to_files(f"{files}/echo", value_serde=long_)
        summed.to_files(f"{files}/sums", key_serde=s, value_serde=long_)
    return stream


def _group_of(value: int, group: str | None) -> tuple[str, int]:
    return group or "none", value + 1


def _value_of(key: str, group_value: tuple[str, int]) -> tuple[str, int]:
    return group_value


def chain_topology(
    source: str, echo: str, sums: str, groups: str, group_sums: str, files: str | None = None
) -> Topology:
    """:func:`crash_topology` (with its optional ``files``) plus a chain Kafka Streams runs as
    two sub-topologies.

    Each input record is left-joined with the table ``groups`` (key -> group name), re-keyed
    by its group (``"none"`` when the table has no row for the key yet) and summed per group
    (``GroupSums``, values ``seq + 1`` so every update raises the sum) into ``group_sums``:
    join, re-key, aggregate, through the repartition topic ``<application.id>-GroupSums-
    repartition``.
    """
    builder = StreamsBuilder()
    s, long_ = Serdes.string(), Serdes.long()
    stream = _echo_and_sums(builder, source, echo, sums, files)
    table = builder.table(groups, key_serde=s, value_serde=s)
    (
        stream.left_join(table, _group_of)
        .map(_value_of)
        .group_by_key(key_serde=s, value_serde=long_)
        .reduce(_add, name="GroupSums")
        .to_stream()
        .to(group_sums, key_serde=s, value_serde=long_)
    )
    return builder.build()


def main(argv: list[str]) -> int:
    """Run the app described by the JSON in ``argv[0]``; see the module docstring."""
    spec: dict[str, Any] = json.loads(argv[0])
    if spec.get("groups"):
        topology = chain_topology(
            spec["source"],
            spec["echo"],
            spec["sums"],
            spec["groups"],
            spec["group_sums"],
            spec.get("files"),
        )
    else:
        topology = crash_topology(spec["source"], spec["echo"], spec["sums"], spec.get("files"))
    app = KafkaStreams(topology, spec["config"])
    app.start()
    print("STARTED", flush=True)
    try:
        if spec.get("exit_when_caught_up"):
            app.await_caught_up(timeout=timedelta(seconds=spec.get("timeout_s", 600)))
            print("CAUGHT-UP", json.dumps(app.metrics()), flush=True)
            return 0
        threading.Event().wait()  # until killed
        return 0
    finally:
        app.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
