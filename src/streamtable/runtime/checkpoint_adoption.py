"""A query whose generated name changed keeps its checkpoint.

Queries are named after their terminal node, and their checkpoint folders after the query. A
generated name (``KSTREAM-SINK-0000000005``) shifts when a version adds a node before it — a
stateless step after an aggregation, say — and the query would then start without a checkpoint:
its state rebuilt and its output written again from ``auto.offset.reset``. Kafka Streams has no
such problem there (its state stores and changelogs keep their names), so streamtable follows
it: on start, a query without a checkpoint **takes over** the checkpoint of the last version's
query that wrote the same output (``topology.json`` records what each query wrote), when that
is unambiguous:

- the output is a topic or a file path (not a ``foreach``), written by exactly one query of each
  version;
- the old query's name is not a query of the new version;
- the old checkpoint has no interrupted micro-batch. Under ``exactly_once_v2`` a re-run batch
  finds its committed output by markers named after the query, so a checkpoint with a pending
  batch is left alone (logged): restart the previous version once to finish it first.

The fingerprint check (:mod:`streamtable.runtime.checkpoint`) has passed by then: the stateful
operators are those of the checkpoint. ``streamtable upgrade --dry-run`` reports the same
decisions (:func:`renamed_queries`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from streamtable.runtime.checkpoint import query_outputs
from streamtable.runtime.starting_offsets import pending_batch_records
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


def adopt_renamed_checkpoints(
    checkpoint_dir: Path, stored: Mapping[str, object], topology: Topology, names: Sequence[str]
) -> dict[str, str]:
    """Move each taken-over checkpoint folder to its new query's name (see the module).

    Parameters
    ----------
    checkpoint_dir : pathlib.Path
        ``state.dir/application.id``.
    stored : mapping
        The fingerprint the last version recorded (read before this start rewrote it).
    topology : Topology
        The new version.
    names : sequence of str
        Its queries (the compiled plans' names).

    Returns
    -------
    dict
        ``{new query: old query}`` of the folders moved.
    """
    old_outputs = stored.get("queries")
    if not isinstance(old_outputs, dict) or not checkpoint_dir.is_dir():
        return {}
    existing = {p.name for p in checkpoint_dir.iterdir() if (p / "offsets").is_dir()}
    moved = {}
    for new, old in renamed_queries(existing, names, old_outputs, query_outputs(topology)).items():
        pending = pending_batch_records(checkpoint_dir / old)
        if pending:
            log.warning(
                "query %s writes %s, as query %s of the last version did, but does not take "
                "over its checkpoint: it holds an interrupted micro-batch (%d records). Restart "
                "the previous version once so that it finishes, then this one; or name the sink "
                "(to(topic, name=...)) in both.",
                new,
                old_outputs[old],
                old,
                pending,
            )
            continue
        os.rename(checkpoint_dir / old, checkpoint_dir / new)
        log.info(
            "query %s takes over the checkpoint of query %s (both write %s; the generated name "
            "changed)",
            new,
            old,
            old_outputs[old],
        )
        moved[new] = old
    return moved
