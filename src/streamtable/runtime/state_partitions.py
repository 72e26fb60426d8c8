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
from pathlib import Path

from streamtable.runtime.checkpoint_adoption import checkpoint_folders
from streamtable.runtime.starting_offsets import batch_ids

__all__ = ["stored_shuffle_partitions", "fixed_partitions_notice"]

#: Spark's key for the state partitions, as its offset log metadata records it.
SHUFFLE_KEY = "spark.sql.shuffle.partitions"


def stored_shuffle_partitions(query_dir: Path) -> int | None:
    r"""The state partitions a query's checkpoint was started with.

    Parameters
    ----------
    query_dir : Path
        The query's ``checkpointLocation``.

    Returns
    -------
    int or None
        ``spark.sql.shuffle.partitions`` of the latest offset log entry; None when the query
        has no micro-batch yet, or the entry does not record it (a file Spark is writing, or
        another format).

    Examples
    --------
    >>> import json, tempfile
    >>> q = Path(tempfile.mkdtemp())
    >>> stored_shuffle_partitions(q) is None
    True
    >>> (q / "offsets").mkdir()
    >>> meta = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": "4"}}
    >>> _ = (q / "offsets" / "0").write_text("v1\n" + json.dumps(meta) + "\n-\n")
    >>> stored_shuffle_partitions(q)
    4
    """
    batches = batch_ids(query_dir / "offsets")
    if not batches:
        return None
    try:
        lines = (query_dir / "offsets" / str(max(batches))).read_text("utf-8").splitlines()
        return int(json.loads(lines[1])["conf"][SHUFFLE_KEY])
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None


def fixed_partitions_notice(
    checkpoint_dir: Path, configured: int, application_id: str, reset: str
) -> str | None:
    r"""What to tell a user whose ``streamtable.shuffle.partitions`` differs from the state
    partitions the application's checkpoints keep (None when they agree or nothing started).

    Parameters
    ----------
    checkpoint_dir : Path
        ``state.dir/application.id``, holding one checkpoint folder per query.
    configured : int
        ``streamtable.shuffle.partitions`` of this start.
    application_id : str
        Named in the notice.
    reset : str
        The ``streamtable reset`` command line that starts the application over.

    Returns
    -------
    str or None
        One sentence per differing value, naming the queries that keep it, then what to do.
        Queries that start for the first time (a new sink) take ``configured``.

    Examples
    --------
    >>> import tempfile
    >>> app = Path(tempfile.mkdtemp())
    >>> (app / "counts" / "offsets").mkdir(parents=True)
    >>> meta = '{"conf": {"spark.sql.shuffle.partitions": "4"}}'
    >>> _ = (app / "counts" / "offsets" / "3").write_text("v1\n" + meta + "\n-\n")
    >>> fixed_partitions_notice(app, 4, "wc", "streamtable reset ...") is None
    True
    >>> notice = fixed_partitions_notice(app, 8, "wc", "streamtable reset ...")
    >>> notice.startswith("[wc] streamtable.shuffle.partitions=8 does not apply")
    True
    >>> "(query counts: 4)" in notice, notice.endswith(": streamtable reset ...")
    (True, True)
    """
    kept: dict[int, list[str]] = {}
    for name, folder in sorted(checkpoint_folders(checkpoint_dir).items()):
        stored = stored_shuffle_partitions(folder)
        if stored is not None and stored != configured:
            kept.setdefault(stored, []).append(name)
    if not kept:
        return None
    which = "; ".join(
        f"{'query' if len(names) == 1 else 'queries'} {', '.join(names)}: {n}"
        for n, names in sorted(kept.items())
    )
    return (
        f"[{application_id}] streamtable.shuffle.partitions={configured} does not apply to "
        f"the queries already started: a checkpoint keeps the state partitions of its first "
        f"run ({which}). They run with them. To change them, reset the application and start "
        f"again (its state is recomputed from the input): {reset}"
    )
