"""Reading what :meth:`KStream.to_files` wrote, exactly once, without Spark.

Spark's file sink logs every micro-batch's files in ``<path>/_spark_metadata``: one file per
batch id (``0``, ``1``, ...), and every ``spark.sql.streaming.fileSink.log.compactInterval``
batches (10 by default) a ``<id>.compact`` file holding all files logged so far. Each log file
is the line ``v1`` followed by one JSON object per output file (``{"path": ..., "action":
"add"}``). A file in the directory but not in the log belongs to a batch that crashed before it
was logged (its records are in the file the batch's rerun wrote): readers that list the
directory would count them twice; :func:`committed_files` and :func:`read_files` do not.

Only local paths (and ``file://`` URIs) are read here; Spark reads any path with the log
(``spark.read.parquet(path)``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from streamtable.errors import StreamsError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["committed_files", "read_files"]

_LOG_FILE = re.compile(r"^(\d+)(\.compact)?$")


def committed_files(path: str | Path) -> list[Path]:
    r"""The files the file sink at ``path`` has committed, in log order.

    Parameters
    ----------
    path : str or Path
        The sink's directory (a local path or a ``file://`` URI).

    Returns
    -------
    list of Path
        Every data file of every committed micro-batch (none of a crashed, unlogged attempt).

    Raises
    ------
    StreamsError
        If ``path`` has no file-sink log (``_spark_metadata``), or a log file is not in
        Spark's format.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "_spark_metadata").mkdir()
    >>> _ = (d / "_spark_metadata" / "0").write_text(
    ...     'v1\n{"path":"file://%s/part-0.parquet","action":"add"}' % d)
    >>> [p.name for p in committed_files(d)]
    ['part-0.parquet']
    """
    root = _local(path)
    log = root / "_spark_metadata"
    entries = {}
    for f in log.iterdir() if log.is_dir() else ():
        m = _LOG_FILE.match(f.name)
        if m:
            entries[int(m.group(1))] = (f, m.group(2) is not None)
    if not entries:
        raise StreamsError(
            f"{str(path)!r} has no file-sink log (_spark_metadata): it is not a to_files() "
            "output, or no micro-batch has been committed to it yet."
        )
    compacts = [i for i, (_, compact) in entries.items() if compact]
    first = max(compacts) if compacts else 0
    files: dict[str, None] = {}
    for batch in range(first, max(entries) + 1):
        if batch not in entries:
            raise StreamsError(
                f"The file-sink log of {str(path)!r} misses batch {batch} (it has "
                f"{sorted(entries)}): the log is damaged; read the directory with Spark."
            )
        for entry in _read_log_file(entries[batch][0]):
            if entry.get("action", "add") == "delete":
                files.pop(entry["path"], None)
            else:
                files[entry["path"]] = None
    return [_local(p) for p in files]


def read_files(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """The committed rows of a Parquet file sink as one ``pyarrow.Table``.

    Partition columns (``partition_by``) are restored from the directory names, typed as
    strings (pyarrow's reading of Hive-style partitions).

    Parameters
    ----------
    path : str or Path
        The sink's directory.
    columns : list of str, optional
        Read only these columns.

    Raises
    ------
    StreamsError
        As :func:`committed_files`.
    """
    import pyarrow.dataset as ds

    root = _local(path)
    files = [str(f) for f in committed_files(root)]
    dataset = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=str(root))
    return dataset.to_table(columns=columns)


def _read_log_file(f: Path) -> list[dict[str, object]]:
    lines = f.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != "v1":
        raise StreamsError(
            f"{f} is not a Spark file-sink log file (its first line is not 'v1'); read the "
            "directory with Spark instead."
        )
    return [json.loads(line) for line in lines[1:] if line.strip()]


def _local(path: str | Path) -> Path:
    text = str(path)
    if "://" not in text and not text.startswith("file:"):
        return Path(text)
    parsed = urlparse(text)
    if parsed.scheme != "file":
        raise StreamsError(
            f"{text!r} is not a local path: streamtable.files reads local file sinks only; "
            "read others with Spark (spark.read.parquet(path) uses the sink's log)."
        )
    return Path(unquote(parsed.path))
