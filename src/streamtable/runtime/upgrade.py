"""Whether a new version of an application can restart from its checkpoints.

What ``streamtable upgrade --dry-run`` answers.

A restart with a new version of the topology either resumes from the checkpoints or is refused
by the fingerprint check (:mod:`streamtable.runtime.checkpoint`: source topics, stateful
operators and their names and windows, the state layout). This module answers the question
before the restart, from the files in ``state.dir/application.id`` alone — no broker, no Spark:

- **incompatible**: what changed in the fingerprint, and the ``streamtable reset`` command that
  starts over (Kafka Streams, too, needs an application reset after such a change);
- **compatible**: for each query (one per sink, ``foreach`` and internal repartition topic),
  whether it resumes from its checkpoint, or is new and so reads its input from
  ``auto.offset.reset`` (a new sink gets the full history of its input; the other outputs are
  not written again), and which checkpoints no query of the new version uses any more.

Compatible changes (Spark's own rules for a restart from a checkpoint, which streamtable's
fingerprint follows): a changed user function (``map_values``, a predicate, an aggregator's
body) with the same state schema, a stateless step after a stateful one (but a
``KTable.filter`` added after an unwindowed ``count`` or built-in reducer, or removed,
changes its state form: see :mod:`streamtable.topology.old_values`), a new sink, a removed
sink. Queries are named after their terminal node: a generated name
(``KSTREAM-SINK-0000000007``) changes when a node is added before it; the query with the new
name then takes over the checkpoint of the one that wrote the same output
(:mod:`streamtable.runtime.checkpoint_adoption`). Naming the sinks (``to(topic, name=...)``)
keeps the names stable outright, as Kafka Streams advises for its own generated names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from streamtable.config import StreamsConfig
from streamtable.runtime.checkpoint import (
    fingerprint_changes,
    query_outputs,
    read_fingerprint,
    reset_command,
)
from streamtable.runtime.checkpoint_adoption import (
    checkpoint_folders,
    cut_graph,
    interrupted,
    query_names,
    renamed_queries,
)
from streamtable.runtime.starting_offsets import batch_ids
from streamtable.runtime.state_partitions import stored_shuffle_partitions
from streamtable.topology.topology import Topology

__all__ = ["QueryUpgrade", "UpgradeReport", "check_upgrade"]


@dataclass(frozen=True)
class QueryUpgrade:
    """What a restart with the new version does with one query.

    Attributes
    ----------
    name : str
        The query's name (its checkpoint folder).
    action : {"resumes", "new", "unused"}
        ``resumes``: continues after the last committed micro-batch of its checkpoint;
        ``new``: has no checkpoint, reads its input from ``auto.offset.reset``;
        ``unused``: a checkpoint no query of the new version has.
    detail : str
        One sentence for the user.
    """

    name: str
    action: Literal["resumes", "new", "unused"]
    detail: str


@dataclass(frozen=True)
class UpgradeReport:
    """The answer of :func:`check_upgrade`.

    Attributes
    ----------
    application_id : str
    checkpoint_dir : str
    first_run : bool
        No checkpoint yet: the version starts from scratch, nothing to be compatible with.
    compatible : bool
        A restart resumes from the checkpoints (always True on a first run).
    changes : tuple of str
        Fingerprint differences that make the version incompatible.
    queries : tuple of QueryUpgrade
        Per query, when compatible.
    reset : str or None
        The ``streamtable reset`` command that starts over, when incompatible.
    """

    application_id: str
    checkpoint_dir: str
    first_run: bool
    compatible: bool
    changes: tuple[str, ...]
    queries: tuple[QueryUpgrade, ...]
    reset: str | None

    def text(self) -> str:
        """The report as lines for the console."""
        head = f"application {self.application_id!r} ({self.checkpoint_dir})"
        if self.first_run:
            return f"{head}: no checkpoint yet; this version starts from scratch."
        if not self.compatible:
            lines = [f"{head}: INCOMPATIBLE with its checkpoints; a restart is refused."]
            lines += [f"  changed: {c}" for c in self.changes]
            if self.reset is not None:
                lines.append(f"  to start over: stop every instance, then `{self.reset}`")
            return "\n".join(lines)
        lines = [f"{head}: compatible; a restart resumes from the checkpoints."]
        lines += [f"  {q.action:<8} {q.name}: {q.detail}" for q in self.queries]
        return "\n".join(lines)


def _after(query_dir: Path) -> str:
    commits = batch_ids(query_dir / "commits")
    after = f"after batch {max(commits)}" if commits else "no committed batch yet"
    partitions = stored_shuffle_partitions(query_dir)
    return after if partitions is None else f"{after}, on its {partitions} state partitions"


def _resumes(name: str, query_dir: Path) -> QueryUpgrade:
    return QueryUpgrade(name, "resumes", f"from its checkpoint, {_after(query_dir)}")


def check_upgrade(
    topology: Topology,
    config: StreamsConfig,
    *,
    bootstrap_servers: str | None = None,
) -> UpgradeReport:
    """Say whether ``topology`` can restart from the checkpoints of ``config``'s application.

    Parameters
    ----------
    topology : Topology
        The new version.
    config : StreamsConfig
        The application's configuration (``application.id``, ``state.dir``,
        ``auto.offset.reset``).
    bootstrap_servers : str, optional
        Put into the suggested reset command.

    Returns
    -------
    UpgradeReport
        Reads only ``state.dir/application.id``; starts nothing.

    Raises
    ------
    TopologyError
        If the new version cannot be cut into sub-topologies (the error ``start()`` would
        raise).
    """
    checkpoint_dir = Path(config.checkpoint_dir)
    stored = read_fingerprint(checkpoint_dir)
    common = {"application_id": config.application_id, "checkpoint_dir": str(checkpoint_dir)}
    if stored is None:
        return UpgradeReport(
            **common, first_run=True, compatible=True, changes=(), queries=(), reset=None
        )
    changes = fingerprint_changes(stored, topology.fingerprint())
    if changes:
        command = reset_command(
            topology, config.application_id, bootstrap_servers, config.state_dir
        )
        return UpgradeReport(
            **common,
            first_run=False,
            compatible=False,
            changes=tuple(changes),
            queries=(),
            reset=command,
        )
    graph = cut_graph(topology, config)
    names = query_names(graph)
    all_nodes = {n.name for n in graph.nodes}
    existing = checkpoint_folders(checkpoint_dir)
    # a query that took over an old checkpoint is a link to it: the old name is in use
    linked = {os.path.basename(os.path.realpath(p)) for n, p in existing.items() if n in names}
    old_outputs = stored.get("queries")
    old_outputs = old_outputs if isinstance(old_outputs, dict) else {}
    new_outputs = query_outputs(topology)
    renamed = renamed_queries(existing, names, old_outputs, new_outputs)
    if config.processing_guarantee == "exactly_once_v2":
        blocked = [(n, o) for n, o in renamed.items() if interrupted(existing[o])]
        if blocked:
            new, old = blocked[0]
            return UpgradeReport(
                **common,
                first_run=False,
                compatible=False,
                changes=(
                    f"query {new} would take over the checkpoint of query {old} (same "
                    f"{old_outputs[old]}; its generated name changed), whose last micro-batch "
                    "was interrupted: start the previous version once and stop it after its "
                    "first micro-batch, or name the sink in both versions",
                ),
                queries=(),
                reset=None,
            )
    taken = set(renamed.values())
    queries = []
    for name in names:
        if name in existing:
            queries.append(_resumes(name, existing[name]))
            continue
        old = renamed.get(name)
        if old in taken:
            queries.append(
                QueryUpgrade(
                    name,
                    "resumes",
                    f"from the checkpoint of query {old!r} (it wrote the same "
                    f"{old_outputs[old]}; its generated name changed), {_after(existing[old])}",
                )
            )
            continue
        writes = new_outputs.get(name)
        detail = (
            f"no checkpoint: reads its input from auto.offset.reset="
            f"{config.auto_offset_reset!r}" + (f" and writes {writes} from there" if writes else "")
        )
        queries.append(QueryUpgrade(name, "new", detail))
    for name in sorted(set(existing) - set(names) - taken - linked):
        if name in all_nodes:  # a store-only query of a queryable store
            queries.append(_resumes(name, existing[name]))
            continue
        was = old_outputs.get(name) if isinstance(old_outputs, dict) else None
        queries.append(
            QueryUpgrade(
                name,
                "unused",
                "no query of this version has it"
                + (f" (it wrote {was})" if was else "")
                + "; it stays on disk until the next reset",
            )
        )
    return UpgradeReport(
        **common, first_run=False, compatible=True, changes=(), queries=tuple(queries), reset=None
    )
