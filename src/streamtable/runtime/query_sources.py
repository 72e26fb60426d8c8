"""Whether each query's checkpoint was written by a query reading the same Kafka sources.

Spark's offset log (``offsets/<batch>``) holds one line per source of the query, in the order
of the query's plan, and a restart needs the same sources: with another number of them Spark
stops the query deep inside its start ("There are [1] sources in the checkpoint offsets and
now there are [2] sources requested by the query. Cannot continue."); with other topics, the
Kafka source finds partitions gone and others new. The topology fingerprint
(:mod:`streamtable.runtime.checkpoint`) does not see such a change: a ``merge`` added before a
sink, or a sink rewired to another stream, keeps the same source topics and stateful
operators overall. :func:`check_query_sources` refuses it before any query starts, naming the
query, as Kafka Streams needs an application reset when a sub-topology's sources change.

Limit: sources are compared as a multiset of topic sets, not in order, since the order of a
query's sources in Spark's plan is not known before it starts; a change that only swaps two
sources of one query (``a.merge(b)`` becoming ``b.merge(a)``) is not refused here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from streamtable.errors import TopologyError
from streamtable.runtime.starting_offsets import batch_ids

__all__ = ["check_query_sources", "checkpoint_sources"]


def checkpoint_sources(query_dir: str | os.PathLike[str]) -> list[frozenset[str]] | None:
    r"""The topics of each source in a query's latest offset log entry.

    Parameters
    ----------
    query_dir : str or os.PathLike
        A query's ``checkpointLocation``.

    Returns
    -------
    list of frozenset or None
        One set of topics per source, in the log's order (empty when the line names none:
        a source without offsets yet, ``-``); ``None`` when the query has no offset log.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "offsets").mkdir()
    >>> _ = (d / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"a":{"0":5}}\n-\n')
    >>> [sorted(s) for s in checkpoint_sources(d)]
    [['a'], []]
    """
    ids = batch_ids(Path(query_dir) / "offsets")
    if not ids:
        return None
    path = Path(query_dir) / "offsets" / str(max(ids))
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[2:]
    except OSError:
        return None
    sources: list[frozenset[str]] = []
    for line in lines:
        try:
            parsed = json.loads(line)
        except ValueError:  # "-": no offsets yet
            parsed = None
        sources.append(frozenset(parsed) if isinstance(parsed, dict) else frozenset())
    return sources


def check_query_sources(
    checkpoint_dir: str | os.PathLike[str],
    query_sources: Mapping[str, Sequence[Sequence[str]]],
    reset_command: str,
) -> None:
    """Refuse a restart whose queries read other Kafka sources than their checkpoints.

    Parameters
    ----------
    checkpoint_dir : str or os.PathLike
        ``state.dir/application.id``; each query's checkpoint is the folder of its name.
    query_sources : mapping
        ``{query: [topics of each source]}`` of the compiled topology.
    reset_command : str
        The ``streamtable reset`` command line of the application, for the message.

    Raises
    ------
    TopologyError
        Naming the first query whose checkpoint has another number of sources, or sources
        of other topics; says what to do.
    """
    for name, sources in query_sources.items():
        folder = Path(checkpoint_dir) / name
        found = checkpoint_sources(folder)
        if found is None:
            continue
        # a source subscribing to a topic twice is one subscription to it
        new = sorted(sorted(set(s)) for s in sources)
        old = sorted(sorted(s) for s in found)
        if len(found) == len(sources) and (not all(found) or old == new):
            continue
        raise TopologyError(
            f"Query {name!r} cannot resume from its checkpoint: the checkpoint's micro-batches "
            f"read {len(found)} Kafka source(s) ({_describe(old)}), this version of the "
            f"topology reads {len(sources)} in that query ({_describe(new)}). Spark cannot "
            "continue a query whose sources changed (a merge added or removed, an output "
            "rewired to another stream), and Kafka Streams needs an application reset when a "
            f"sub-topology's sources change. Reset the application ({reset_command}), or, "
            f"while the application is stopped, delete this query's checkpoint folder "
            f"{str(folder)!r}: the query then starts afresh from auto.offset.reset (its output "
            "is written again from there; the other queries resume)."
        )


def _describe(sources: list[list[str]]) -> str:
    return ", ".join("+".join(s) if s else "(no offsets yet)" for s in sources) or "none"
