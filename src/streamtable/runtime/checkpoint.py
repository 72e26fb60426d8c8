"""The topology fingerprint stored beside an application's checkpoints.

Spark's operator state is positional: a restart whose stateful operators differ from the
checkpoint's would read the wrong state or fail deep inside Spark. streamtable stores the
topology's fingerprint (source topics, stateful operators with their names and windows) in
``state.dir/application.id/topology.json`` on first start and refuses a different one.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamtable.errors import TopologyError
from streamtable.topology.topology import Topology

FINGERPRINT_FILE = "topology.json"


def check_fingerprint(checkpoint_dir: Path, topology: Topology, application_id: str) -> None:
    """Record ``topology``'s fingerprint, or check it against the recorded one.

    Raises
    ------
    TopologyError
        If the checkpoint belongs to a topology with other sources or stateful operators; the
        message lists what changed and how to start over.
    """
    current = topology.fingerprint()
    path = checkpoint_dir / FINGERPRINT_FILE
    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("digest") == current["digest"]:
            return
        changes = []
        if stored.get("sources") != current["sources"]:
            changes.append(f"source topics {stored.get('sources')} -> {current['sources']}")
        if stored.get("stateful") != current["stateful"]:
            changes.append(f"stateful operators {stored.get('stateful')} -> {current['stateful']}")
        raise TopologyError(
            f"The topology of application {application_id!r} is not compatible with its "
            f"checkpoint in {checkpoint_dir}: {'; '.join(changes) or 'fingerprint differs'}. "
            f"To start over, run `streamtable reset --application-id {application_id}` (or "
            "KafkaStreams.cleanup() before start()), or use a new application.id."
        )
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2, sort_keys=True))
