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
        if stored.get("digest") == current["digest"]:
            return
        changes = []
        if stored.get("sources") != current["sources"]:
            changes.append(f"source topics {stored.get('sources')} -> {current['sources']}")
        if stored.get("stateful") != current["stateful"]:
            changes.append(f"stateful operators {stored.get('stateful')} -> {current['stateful']}")
        command = reset_command(topology, application_id, bootstrap_servers, state_dir)
        raise TopologyError(
            f"The topology of application {application_id!r} is not compatible with its "
            f"checkpoint in {checkpoint_dir}: {'; '.join(changes) or 'fingerprint differs'}. "
            f"To start over, stop every instance and run `{command}` "
            "(or KafkaStreams.cleanup() before start()), or use a new application.id. "
            "(Kafka Streams, too, needs an application reset and KafkaStreams.cleanUp() "
            "after a structural topology change, but with its classic rebalance protocol "
            "does not detect one.)"
        )
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2, sort_keys=True))


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
