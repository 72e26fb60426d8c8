"""A query whose generated name changed keeps its checkpoint.

Queries are named after their terminal node, and their checkpoint folders after the query. A
generated name (``KSTREAM-SINK-0000000005``) shifts when a version adds a node before it — a
stateless step after an aggregation, say — and the query would then start without a checkpoint:
its state rebuilt and its output written again from ``auto.offset.reset``. Kafka Streams has no
such problem there (its state stores and changelogs keep their names), so streamtable follows
it: on start, before anything else reads the checkpoint, a query without a checkpoint **takes
over** the checkpoint of the last version's query that wrote the same output (``topology.json``
records what each query wrote), when that is unambiguous:

- the fingerprint is compatible (the stateful operators are those of the checkpoint);
- the output is a topic or a file path (not a ``foreach``), written by exactly one query of each
  version, and the old query's name is not a query of the new version.

The new name becomes a symbolic link to the old folder: Spark's operator metadata holds absolute
paths into it (the state schema files of ``transformWithState``), which stay valid.

Under ``exactly_once_v2`` a checkpoint whose last micro-batch was interrupted is not taken over:
the re-run batch finds the output it already committed by markers named after the query, and
under a new name it would write it again. ``start()`` then refuses with what to do (restart the
previous version once so that it finishes the batch). ``streamtable upgrade --dry-run`` reports
the same decisions (:func:`renamed_queries`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from streamtable.config import StreamsConfig
from streamtable.errors import TopologyError
from streamtable.runtime.checkpoint import fingerprint_changes, query_outputs, read_fingerprint
from streamtable.runtime.starting_offsets import batch_ids
from streamtable.topology.nodes import GraphSnapshot
from streamtable.topology.topology import Topology

log = logging.getLogger("streamtable")


def renamed_queries(
    existing: Collection[str],
    names: Sequence[str],
    old_outputs: Mapping[str, str],
    new_outputs: Mapping[str, str],
) -> dict[str, str]:
    """``{new query: old query}`` for each new query that takes over an old checkpoint.

    Parameters
    ----------
    existing : collection of str
        The query checkpoint folders on disk.
    names : sequence of str
        The queries of the new version.
    old_outputs, new_outputs : mapping of str to str
        ``{query: what it writes}`` of the last version (``topology.json``) and the new one
        (:func:`~streamtable.runtime.checkpoint.query_outputs`).

    Examples
    --------
    >>> renamed_queries(
    ...     ["KSTREAM-SINK-0000000005"],
    ...     ["KSTREAM-SINK-0000000006"],
    ...     {"KSTREAM-SINK-0000000005": "topic counts"},
    ...     {"KSTREAM-SINK-0000000006": "topic counts"},
    ... )
    {'KSTREAM-SINK-0000000006': 'KSTREAM-SINK-0000000005'}
    """
    out: dict[str, str] = {}
    for name in names:
        writes = new_outputs.get(name)
        if name in existing or writes is None or writes == "foreach":
            continue
        if list(new_outputs.values()).count(writes) != 1:
            continue
        olds = [old for old, w in old_outputs.items() if w == writes]
        if len(olds) == 1 and olds[0] in existing and olds[0] not in names:
            out[name] = olds[0]
    return out


def cut_graph(topology: Topology, config: StreamsConfig) -> GraphSnapshot:
    """``topology``'s graph cut into sub-topologies as ``start()`` cuts it, without Spark.

    Raises
    ------
    TopologyError
        If the topology cannot be cut into sub-topologies.
    """
    from streamtable.compiler.subtopologies import cut_topology

    graph, _ = cut_topology(
        topology.graph,
        config.application_id,
        default_key_serde=config.default_key_serde,
        default_value_serde=config.default_value_serde,
    )
    return graph


def query_names(graph: GraphSnapshot) -> list[str]:
    """The queries a cut graph (:func:`cut_graph`) runs as, named as ``start()`` names them:
    one per terminal node.
    """
    from streamtable.compiler.plan import terminal_nodes

    return [n.name for n in terminal_nodes(graph.nodes)]


def interrupted(query_dir: Path) -> bool:
    """Whether the checkpoint's last micro-batch started (offsets written) but did not commit;
    a batch without new records counts (timers and window closes run in those).
    """
    offsets = batch_ids(query_dir / "offsets")
    return bool(offsets) and max(offsets) not in batch_ids(query_dir / "commits")


def checkpoint_folders(checkpoint_dir: Path) -> dict[str, Path]:
    """``{query: its checkpoint folder}`` (a taken-over one is a link to the old folder)."""
    if not checkpoint_dir.is_dir():
        return {}
    return {p.name: p for p in checkpoint_dir.iterdir() if (p / "offsets").is_dir()}


def adopt_renamed_checkpoints(topology: Topology, config: StreamsConfig) -> dict[str, str]:
    """Let each renamed query take over its old checkpoint (see the module).

    Call before the fingerprint of this version is recorded (it reads the last version's).

    Returns
    -------
    dict
        ``{new query: old query}`` of the checkpoints taken over.

    Raises
    ------
    TopologyError
        Under ``exactly_once_v2``, if a checkpoint to take over holds an interrupted
        micro-batch.
    """
    checkpoint_dir = Path(config.checkpoint_dir)
    stored = read_fingerprint(checkpoint_dir)
    if stored is None or fingerprint_changes(stored, topology.fingerprint()):
        return {}
    old_outputs = stored.get("queries")
    if not isinstance(old_outputs, dict):
        return {}
    existing = checkpoint_folders(checkpoint_dir)
    names = query_names(cut_graph(topology, config))
    renamed = renamed_queries(existing, names, old_outputs, query_outputs(topology))
    for new, old in renamed.items():
        if config.processing_guarantee == "exactly_once_v2" and interrupted(existing[old]):
            raise TopologyError(
                f"Query {new} writes {old_outputs[old]}, as query {old} of the last version "
                "did, and would take over its checkpoint (its generated name changed), but that "
                "checkpoint's last micro-batch was interrupted: under exactly_once_v2 its re-run "
                "must keep the query's name. Start the previous version once and stop it after "
                "its first micro-batch, then start this one; or name the sink in both versions "
                "(to(topic, name=...))."
            )
    for new, old in renamed.items():
        target = os.path.basename(os.path.realpath(existing[old]))
        os.symlink(target, checkpoint_dir / new, target_is_directory=True)
        log.info(
            "query %s takes over the checkpoint of query %s (both write %s; the generated name "
            "changed)",
            new,
            old,
            old_outputs[old],
        )
    return renamed
