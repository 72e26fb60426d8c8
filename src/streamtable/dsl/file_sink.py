"""Validation of :meth:`KStream.to_files` arguments into a :class:`FileSinkNode`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from streamtable.errors import TopologyError
from streamtable.topology.nodes import FileSinkNode

if TYPE_CHECKING:
    from streamtable.serde import Serde

#: The file formats :meth:`KStream.to_files` writes (Spark's built-in file sources that keep
#: column types and can hold binary columns).
FILE_FORMATS = ("parquet", "orc", "json")


def file_sink_node(
    name: str,
    parent: str,
    path: str | os.PathLike[str],
    *,
    format: str,  # noqa: A002 - Spark's own name for it
    partition_by: str | Sequence[str] | None,
    key_serde: Serde | None,
    value_serde: Serde | None,
    commit_interval: timedelta | None = None,
) -> FileSinkNode:
    """A :class:`FileSinkNode`, after checking the arguments of ``KStream.to_files``.

    Raises
    ------
    TopologyError
        If ``path`` is empty, ``format`` is not one of :data:`FILE_FORMATS`,
        ``partition_by`` is not a column name or a sequence of them, or ``commit_interval``
        is not a positive timedelta.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.strip():
        raise TopologyError(
            f"KStream.to_files: path must be a non-empty directory path or URI "
            f"(file:///..., hdfs://..., s3a://...), got {path!r}."
        )
    if format not in FILE_FORMATS:
        raise TopologyError(
            f"KStream.to_files: format {format!r} is not supported; use one of "
            f"{', '.join(FILE_FORMATS)}."
        )
    if partition_by is None:
        columns: tuple[str, ...] = ()
    elif isinstance(partition_by, str):
        columns = (partition_by,)
    else:
        columns = tuple(partition_by)
    bad = [c for c in columns if not isinstance(c, str) or not c]
    if bad:
        raise TopologyError(
            f"KStream.to_files: partition_by takes column names (e.g. 'date'), got {bad!r}."
        )
    interval_ms = None
    if commit_interval is not None:
        if not isinstance(commit_interval, timedelta) or commit_interval <= timedelta(0):
            raise TopologyError(
                f"KStream.to_files: commit_interval must be a positive timedelta (e.g. "
                f"timedelta(seconds=30)), got {commit_interval!r}."
            )
        interval_ms = max(1, int(commit_interval / timedelta(milliseconds=1)))
    return FileSinkNode(
        name,
        (parent,),
        path=path,
        format=format,
        partition_by=columns,
        key_serde=key_serde,
        value_serde=value_serde,
        commit_interval_ms=interval_ms,
    )
