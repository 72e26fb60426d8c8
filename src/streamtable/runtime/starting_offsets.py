"""Starting positions written by ``streamtable reset`` and read when the queries start.

``state.dir/application.id/starting-offsets.json`` holds ``{topic: {partition: offset}}``. A
source whose topics appear there starts from those offsets (Spark's ``startingOffsets`` as
JSON) instead of ``auto.offset.reset``. Spark uses ``startingOffsets`` only for a query without
a checkpoint, so the file matters exactly once: on the first start after a reset.

Also here: reading the positions a Spark checkpoint has committed (its ``offsets/<batch>``
file of the latest batch that also has a ``commits/<batch>``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from streamtable.errors import StreamtableError

__all__ = [
    "STARTING_OFFSETS_FILE",
    "read_starting_offsets",
    "write_starting_offsets",
    "spark_starting_offsets",
    "checkpoint_positions",
    "query_checkpoint_positions",
]

#: File name of the starting positions inside ``state.dir/application.id``.
STARTING_OFFSETS_FILE = "starting-offsets.json"

#: Spark's sentinels in a ``startingOffsets`` JSON.
_SPARK_SENTINEL = {"earliest": -2, "latest": -1}

Positions = dict[str, dict[int, int]]


def read_starting_offsets(checkpoint_dir: str | os.PathLike[str]) -> Positions:
    """The positions in ``checkpoint_dir/starting-offsets.json`` (empty when there is none).

    Parameters
    ----------
    checkpoint_dir : str or os.PathLike
        ``state.dir/application.id``.

    Returns
    -------
    dict
        ``{topic: {partition: offset}}``.

    Raises
    ------
    StreamtableError
        If the file exists but is not ``{topic: {partition: offset}}`` JSON; the message names
        the file and says to run ``streamtable reset`` again or delete it.
    """
    path = Path(checkpoint_dir) / STARTING_OFFSETS_FILE
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {
            str(topic): {int(p): int(off) for p, off in parts.items()}
            for topic, parts in raw.items()
        }
    except (ValueError, AttributeError, TypeError) as e:
        raise StreamtableError(
            f"Starting positions file {str(path)!r} is not {{topic: {{partition: offset}}}} "
            f"JSON ({e}). Run `streamtable reset` again, or delete the file to start from "
            "'auto.offset.reset'."
        ) from None


def write_starting_offsets(checkpoint_dir: str | os.PathLike[str], positions: Positions) -> Path:
    """Write ``positions`` to ``checkpoint_dir/starting-offsets.json`` (replacing it).

    Parameters
    ----------
    checkpoint_dir : str or os.PathLike
        ``state.dir/application.id``; created if missing.
    positions : dict
        ``{topic: {partition: offset}}`` with offsets >= 0.

    Returns
    -------
    Path
        The file written.
    """
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / STARTING_OFFSETS_FILE
    body = {
        t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(positions.items())
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def spark_starting_offsets(
    checkpoint_dir: str | os.PathLike[str],
    topics: Iterable[str],
    partitions: Mapping[str, int],
    default: str,
) -> str:
    """The value of Spark's ``startingOffsets`` option for a source reading ``topics``.

    Parameters
    ----------
    checkpoint_dir : str or os.PathLike
        ``state.dir/application.id`` (where ``starting-offsets.json`` may be).
    topics : iterable of str
        The source's topics.
    partitions : Mapping[str, int]
        Partition counts of the topics (Spark needs an offset for every partition).
    default : {"earliest", "latest"}
        The source's ``auto.offset.reset``.

    Returns
    -------
    str
        ``default`` when the file has no position for any of ``topics``; otherwise a JSON
        ``{topic: {partition: offset}}`` with the file's offsets, and ``default``'s Spark
        sentinel (-2 earliest, -1 latest) for partitions the file does not list (a topic not
        reset, or partitions added since).
    """
    stored = read_starting_offsets(checkpoint_dir)
    topics = list(dict.fromkeys(topics))
    if not any(stored.get(t) for t in topics):
        return default
    sentinel = _SPARK_SENTINEL[default]
    out: dict[str, dict[str, int]] = {}
    for t in topics:
        known = stored.get(t, {})
        count = partitions.get(t, max(known, default=-1) + 1)
        out[t] = {str(p): known.get(p, sentinel) for p in range(count)}
    return json.dumps(out, sort_keys=True)


def query_checkpoint_positions(query_dir: str | os.PathLike[str]) -> Positions:
    """The input positions a Spark query checkpoint has committed.

    Parameters
    ----------
    query_dir : str or os.PathLike
        A query's ``checkpointLocation``.

    Returns
    -------
    dict
        ``{topic: {partition: offset}}``: the end offsets of the latest micro-batch that has
        both ``offsets/<N>`` and ``commits/<N>`` (offsets the next batch starts from); empty when
        no batch was committed.

    Notes
    -----
    Spark's offset log file holds a version line (``v1``), a metadata JSON line, then one line
    per source of the query: the Kafka source writes ``{"topic": {"0": 123, ...}}``; a source
    without offsets is ``-``.
    """
    query_dir = Path(query_dir)
    commits = batch_ids(query_dir / "commits")
    for batch in sorted(batch_ids(query_dir / "offsets") & commits, reverse=True):
        return batch_positions(query_dir, batch)
    return {}


def batch_positions(query_dir: str | os.PathLike[str], batch: int) -> Positions:
    """The end offsets of micro-batch ``batch`` in a query's offset log (``{}`` if absent).

    Parameters
    ----------
    query_dir : str or os.PathLike
        A query's ``checkpointLocation``.
    batch : int
        The micro-batch id.
    """
    path = Path(query_dir) / "offsets" / str(batch)
    if not path.is_file():
        return {}
    out: Positions = {}
    for line in path.read_text(encoding="utf-8").splitlines()[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue  # "-" or a source that is not Kafka's
        if not isinstance(source, dict):
            continue
        for topic, parts in source.items():
            if isinstance(parts, dict):
                for p, off in parts.items():
                    # several sources of one topic (a stream merged with a branch of itself):
                    # the smallest offset, up to which every one of them has read
                    known = out.setdefault(topic, {})
                    known[int(p)] = min(int(off), known.get(int(p), int(off)))
    return out


def pending_batch_records(query_dir: str | os.PathLike[str]) -> int:
    """Records of the micro-batch a restart will run again (0 when none is pending).

    Spark writes a batch's offsets before it runs it and its commit after; a batch with offsets
    but no commit was interrupted, and the restart re-runs it over the same offsets. Under
    ``at_least_once`` its results may then be written twice.

    Parameters
    ----------
    query_dir : str or os.PathLike
        A query's ``checkpointLocation``.

    Returns
    -------
    int
        The batch's record count (end minus start offsets; for a first batch, its end offsets,
        an upper bound when the input does not start at offset 0).
    """
    query_dir = Path(query_dir)
    offsets = batch_ids(query_dir / "offsets")
    if not offsets:
        return 0
    last = max(offsets)
    if last in batch_ids(query_dir / "commits"):
        return 0
    end = batch_positions(query_dir, last)
    start = batch_positions(query_dir, last - 1) if last > 0 else {}
    return sum(
        max(0, off - start.get(topic, {}).get(p, 0))
        for topic, parts in end.items()
        for p, off in parts.items()
    )


def checkpoint_positions(checkpoint_dir: str | os.PathLike[str]) -> Positions:
    """The committed input positions of every query under ``checkpoint_dir``, merged.

    Parameters
    ----------
    checkpoint_dir : str or os.PathLike
        ``state.dir/application.id`` (one sub-folder per query).

    Returns
    -------
    dict
        ``{topic: {partition: offset}}``; where several queries read a partition, the smallest
        offset (none of them skips a record).
    """
    root = Path(checkpoint_dir)
    out: Positions = {}
    if not root.is_dir():
        return out
    for query_dir in sorted(p for p in root.iterdir() if (p / "offsets").is_dir()):
        for topic, parts in query_checkpoint_positions(query_dir).items():
            merged = out.setdefault(topic, {})
            for p, off in parts.items():
                merged[p] = min(off, merged.get(p, off))
    return out


def batch_ids(directory: Path) -> set[int]:
    """The micro-batch ids with a file in a checkpoint's ``offsets`` or ``commits`` folder."""
    if not directory.is_dir():
        return set()
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}
