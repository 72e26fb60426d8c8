"""The topology fingerprint stored beside an application's checkpoints.

Spark's operator state is positional: a restart whose stateful operators differ from the
checkpoint's would read the wrong state or fail deep inside Spark. streamtable stores the
topology's fingerprint (source topics, stateful operators with their names and windows) in
``state.dir/application.id/topology.json`` on first start and refuses a different one.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from streamtable.errors import TopologyError
from streamtable.topology.topology import Topology

FINGERPRINT_FILE = "topology.json"


def check_fingerprint(
    checkpoint_dir: Path,
    topology: Topology,
    application_id: str,
    *,
    bootstrap_servers: str | None = None,
    state_dir: str | None = None,
) -> None:
    """Record ``topology``'s fingerprint, or check it against the recorded one.

    Parameters
    ----------
    checkpoint_dir : Path
        ``state.dir/application.id``.
    topology : Topology
        The topology about to start.
    application_id : str
        Its ``application.id``.
    bootstrap_servers : str, optional
        Put into the ``streamtable reset`` command the error message suggests.
    state_dir : str, optional
        ``state.dir``; put into the suggested command when it is not the default.

    Raises
    ------
    TopologyError
        If the checkpoint belongs to a topology with other sources or stateful operators; the
        message lists what changed and gives the full ``streamtable reset`` command that starts
        over.
    """
    current = topology.fingerprint()
    path = checkpoint_dir / FINGERPRINT_FILE
    if path.exists():
        stored = json.loads(path.read_text())
        changes = fingerprint_changes(stored, current)
        if not changes:
            _write(path, current, topology)  # the queries' outputs may have changed
            return
        command = reset_command(topology, application_id, bootstrap_servers, state_dir)
        raise TopologyError(
            f"The topology of application {application_id!r} is not compatible with its "
            f"checkpoint in {checkpoint_dir}: {'; '.join(changes)}. "
            f"To start over, stop every instance and run `{command}` "
            "(or KafkaStreams.cleanup() before start()), or use a new application.id. "
            "(Kafka Streams, too, needs an application reset and KafkaStreams.cleanUp() "
            "after a structural topology change, but with its classic rebalance protocol "
            "does not detect one.)"
        )
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    _write(path, current, topology)


def read_fingerprint(checkpoint_dir: Path) -> dict[str, object] | None:
    """The fingerprint stored in ``checkpoint_dir`` (None before the first start)."""
    path = checkpoint_dir / FINGERPRINT_FILE
    return json.loads(path.read_text()) if path.exists() else None


def fingerprint_changes(stored: dict[str, object], current: dict[str, object]) -> list[str]:
    """What differs between a stored fingerprint and ``current`` (empty: compatible).

    Only the digest decides; the list names the parts that changed for the error message.
    """
    if stored.get("digest") == current["digest"]:
        return []
    changes = []
    if stored.get("sources") != current["sources"]:
        changes.append(f"source topics {stored.get('sources')} -> {current['sources']}")
    if stored.get("stateful") != current["stateful"]:
        changes.append(f"stateful operators {stored.get('stateful')} -> {current['stateful']}")
        changes.extend(_state_form_hints(stored.get("stateful"), current["stateful"]))
    if stored.get("state_layout") != current.get("state_layout"):
        changes.append(
            f"state layout {stored.get('state_layout')} -> {current.get('state_layout')}"
        )
    return changes or ["fingerprint differs"]


def _state_form_hints(stored: object, current: list[dict[str, object]]) -> list[str]:
    """Why an aggregation's state form (``kind``) changed, for each store whose only change
    is between Spark's own aggregation and a Python fold.
    """
    if not isinstance(stored, list):
        return []
    was = {
        e["store"]: e.get("kind")
        for e in stored
        if isinstance(e, dict) and isinstance(e.get("store"), str)
    }
    hints = []
    for entry in current:
        store, kind = entry.get("store"), entry.get("kind")
        if not isinstance(store, str) or store not in was or was[store] == kind:
            continue
        if "python" in (kind, was[store]):
            hints.append(
                f"aggregation {store!r} now runs as {_state_form(kind)} (was "
                f"{_state_form(was[store])}): an unwindowed count or built-in reducer runs as "
                "Spark's aggregation unless a KTable.filter reads its table (directly or after "
                "suppress(until_time_limit); the filter needs old aggregates), so adding or "
                "removing such a filter, or switching between a Python and a built-in reducer, "
                "changes its state (so does upgrading a topology that filters after "
                "suppress(until_time_limit) from a streamtable version that ran it as Spark's "
                "aggregation)"
            )
    return hints


def _state_form(kind: object) -> str:
    return "a Python fold" if kind == "python" else f"Spark's aggregation ({kind})"


def query_outputs(topology: Topology) -> dict[str, str]:
    """``{query name: what it writes}`` for the queries named after the topology's terminal
    nodes: ``"topic <name>"``, ``"files <path>"`` or ``"foreach"``.
    """
    from streamtable.compiler.plan import terminal_nodes
    from streamtable.topology.nodes import FileSinkNode, SinkNode

    out = {}
    for node in terminal_nodes(topology.graph.nodes):
        if isinstance(node, SinkNode):
            out[node.name] = f"topic {node.topic}"
        elif isinstance(node, FileSinkNode):
            out[node.name] = f"files {node.path}"
        else:
            out[node.name] = "foreach"
    return out


def _write(path: Path, fingerprint: dict[str, object], topology: Topology) -> None:
    # "queries" is informative (``streamtable upgrade --dry-run``), not part of the digest
    body = {**fingerprint, "queries": query_outputs(topology)}
    path.write_text(json.dumps(body, indent=2, sort_keys=True))


def reset_command(
    topology: Topology,
    application_id: str,
    bootstrap_servers: str | None = None,
    state_dir: str | None = None,
) -> str:
    """The ``streamtable reset`` command line that starts ``topology``'s application over.

    Parameters
    ----------
    topology : Topology
        Its source topics become ``--input-topics``.
    application_id : str
        ``--application-id``.
    bootstrap_servers : str, optional
        ``--bootstrap-servers`` (a placeholder ``HOST:PORT`` when None).
    state_dir : str, optional
        ``--state-dir``, given only when it is not the default state directory.

    Returns
    -------
    str
        E.g. ``streamtable reset --application-id wc --bootstrap-servers localhost:9092
        --input-topics lines``.

    Examples
    --------
    >>> from streamtable import StreamsBuilder, Serdes
    >>> b = StreamsBuilder()
    >>> _ = b.stream(["a", "b"], key_serde=Serdes.string(), value_serde=Serdes.string()).to("c")
    >>> reset_command(b.build(), "app", "localhost:9092")
    'streamtable reset --application-id app --bootstrap-servers localhost:9092 --input-topics a,b'
    """
    from streamtable.config import _default_state_dir

    parts = [
        "streamtable reset",
        f"--application-id {shlex.quote(application_id)}",
        f"--bootstrap-servers {shlex.quote(bootstrap_servers or 'HOST:PORT')}",
        f"--input-topics {shlex.quote(','.join(topology.source_topics))}",
    ]
    if state_dir is not None and os.path.abspath(state_dir) != os.path.abspath(
        _default_state_dir()
    ):
        parts.append(f"--state-dir {shlex.quote(state_dir)}")
    return " ".join(parts)
