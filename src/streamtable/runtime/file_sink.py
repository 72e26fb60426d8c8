"""Starting a ``to_files`` query: Spark's file sink, and the checks it needs first.

Spark's file sink is exactly once by its log ``<path>/_spark_metadata``: a batch whose id the log
already holds is skipped. That is also its trap: a query that starts over (a new checkpoint,
after ``streamtable reset`` or with another ``application.id``) numbers its batches from 0 again,
and the sink would silently skip them until the ids pass the old log's. Such a start is refused
here, naming the path, as Kafka Streams refuses an incompatible restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamtable.errors import StreamsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streamtable.topology.nodes import FileSinkNode

#: The file sink's log, inside its output directory.
LOG_DIR = "_spark_metadata"


def prepare_file_sink(spark: SparkSession, node: FileSinkNode, checkpoint: Path) -> None:
    """Create ``node.path`` and refuse a fresh query over another run's file-sink log.

    Parameters
    ----------
    spark : SparkSession
        Its Hadoop configuration resolves the path (any Hadoop-compatible file system).
    node : FileSinkNode
        The sink.
    checkpoint : Path
        The query's checkpoint directory.

    Raises
    ------
    StreamsError
        If the directory cannot be created (the message has the file system's reason), or if
        the query has no checkpoint yet while the path holds a file-sink log.
    """
    fs, path = _hadoop_path(spark, node.path)
    try:
        fs.mkdirs(path)
    except Exception as e:  # py4j wraps the JVM's IOException
        raise StreamsError(
            f"File sink {node.name!r} cannot create its output directory {node.path!r}: "
            f"{_jvm_reason(e)}. Give to_files() a path this application can write."
        ) from e
    log = spark._jvm.org.apache.hadoop.fs.Path(path, LOG_DIR)  # type: ignore[union-attr]
    started = (checkpoint / "offsets").is_dir() and any((checkpoint / "offsets").iterdir())
    if not started and fs.exists(log) and len(fs.listStatus(log)) > 0:
        raise StreamsError(
            f"File sink {node.name!r}: {node.path!r} already holds the files and the log "
            f"({LOG_DIR}) of an earlier run, but this query starts from scratch (no "
            "checkpoint: a new application.id, or after a reset). Spark's file sink would "
            "skip this run's first batches as already written. Move or delete the directory, "
            "or give to_files() a new path."
        )


def file_sink_writer(writer: DataStreamWriter, node: FileSinkNode) -> DataStreamWriter:
    """``writer`` set to write ``node``'s files."""
    writer = writer.format(node.format).option("path", node.path)
    if node.partition_by:
        writer = writer.partitionBy(*node.partition_by)
    return writer


def _hadoop_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm = spark._jvm  # type: ignore[attr-defined]
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark._jsc.hadoopConfiguration()), hpath  # type: ignore[attr-defined]


def _jvm_reason(e: BaseException) -> str:
    java = getattr(e, "java_exception", None)
    if java is not None:
        return f"{java.getClass().getSimpleName()}: {java.getMessage()}"
    return str(e)
