"""The state partitions a checkpoint keeps, and the notice when the configuration asks for
others.

``streamtable.shuffle.partitions`` becomes ``spark.sql.shuffle.partitions``, the number of
state partitions of every stateful operator. Spark records it in each micro-batch's offset log
entry (``offsets/<batch>``: a version line, then a metadata JSON line whose ``conf`` holds it)
and, on a restart, runs the query with the recorded value whatever the session says: a
checkpoint's key-to-partition layout cannot change without a reset. Spark only says so in its
own log, so a user who changed the key would not learn that the change did nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from streamtable.runtime.starting_offsets import batch_ids

__all__ = ["stored_shuffle_partitions", "kept_partitions", "fixed_partitions_notice"]

#: Spark's key for the state partitions, as its offset log metadata records it.
SHUFFLE_KEY = "spark.sql.shuffle.partitions"


def stored_shuffle_partitions(query_dir: Path) -> int | None:
    r"""The state partitions a stateful query's checkpoint keeps.

    Parameters
    ----------
    query_dir : Path
        The query's ``checkpointLocation``.

    Returns
    -------
    int or None
        ``spark.sql.shuffle.partitions`` of the latest offset log entry; None for a query
        without state (no ``state`` folder: Spark records the setting for every query, but a
        stateless one has no partitions to keep), without a micro-batch yet, or whose entry is
        unreadable or of another format.

    Examples
    --------
    >>> import json, tempfile
    >>> q = Path(tempfile.mkdtemp())
    >>> (q / "offsets").mkdir()
    >>> meta = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": "4"}}
    >>> _ = (q / "offsets" / "0").write_text("v1\n" + json.dumps(meta) + "\n-\n")
    >>> stored_shuffle_partitions(q) is None  # stateless
    True
    >>> (q / "state").mkdir()
    >>> stored_shuffle_partitions(q)
    4
    """
    batches = batch_ids(query_dir / "offsets")
    if not batches or not (query_dir / "state").is_dir():
        return None
    try:
        lines = (query_dir / "offsets" / str(max(batches))).read_text("utf-8").splitlines()
        return int(json.loads(lines[1])["conf"][SHUFFLE_KEY])
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None


def kept_partitions(query_dirs: Mapping[str, Path]) -> dict[str, int]:
    """``{query: state partitions}`` of the queries whose checkpoint keeps some (see
    :func:`stored_shuffle_partitions`), in query name order.

    Parameters
    ----------
    query_dirs : Mapping[str, Path]
        ``{query: its checkpoint folder}``.
    """
    kept = {}
    for name, folder in sorted(query_dirs.items()):
        stored = stored_shuffle_partitions(folder)
        if stored is not None:
            kept[name] = stored
    return kept


def fixed_partitions_notice(
    kept: Mapping[str, int], configured: int, application_id: str, reset: str
) -> str | None:
    r"""What to tell a user whose ``streamtable.shuffle.partitions`` differs from the state
    partitions the application's stateful queries keep (None when they agree or none has
    state yet).

    Parameters
    ----------
    kept : Mapping[str, int]
        :func:`kept_partitions` of the queries about to start (a query that took over a
        renamed one's checkpoint under its new name; not the unused checkpoints).
    configured : int
        ``streamtable.shuffle.partitions`` of this start.
    application_id : str
        Named in the notice.
    reset : str
        The ``streamtable reset`` command line that starts the application over.

    Returns
    -------
    str or None
        The queries that keep other partitions and how many, then what to do: set the key
        to match (when they all keep the same number), or reset to change them. Queries that
        start for the first time (a new sink) take ``configured``.

    Examples
    --------
    >>> import tempfile
    >>> app = Path(tempfile.mkdtemp())
    >>> (app / "counts" / "state").mkdir(parents=True)
    >>> (app / "counts" / "offsets").mkdir()
    >>> meta = '{"conf": {"spark.sql.shuffle.partitions": "4"}}'
    >>> _ = (app / "counts" / "offsets" / "3").write_text("v1\n" + meta + "\n-\n")
    >>> kept = kept_partitions({"counts": app / "counts", "new-sink": app / "new-sink"})
    >>> kept
    {'counts': 4}
    >>> fixed_partitions_notice(kept, 4, "wc", "streamtable reset ...") is None
    True
    >>> print(fixed_partitions_notice(kept, 8, "wc", "streamtable reset ..."))
    [wc] streamtable.shuffle.partitions=8 does not apply to the stateful queries already
    started: a checkpoint keeps the state partitions of its first run (query counts: 4), and
    they run with those. Set streamtable.shuffle.partitions=4 to match, or, to change them,
    reset the application and start again (its state is recomputed from the input):
    streamtable reset ...
    """
    differing: dict[int, list[str]] = {}
    for name, stored in sorted(kept.items()):
        if stored != configured:
            differing.setdefault(stored, []).append(name)
    if not differing:
        return None
    which = "; ".join(
        f"{'query' if len(names) == 1 else 'queries'} {', '.join(names)}: {n}"
        for n, names in sorted(differing.items())
    )
    match = (
        f"Set streamtable.shuffle.partitions={next(iter(differing))} to match, or, to change them, "
        if len(differing) == 1
        else "To change them, "
    )
    return (
        f"[{application_id}] streamtable.shuffle.partitions={configured} does not apply to "
        f"the stateful queries already started: a checkpoint keeps the state partitions of "
        f"its first run ({which}), and they run with those. {match}reset the application "
        f"and start again (its state is recomputed from the input): {reset}"
    )
