"""Class data sharing for the driver JVM: every Spark session after the first starts sooner.

A Spark driver loads and verifies some 15,000 classes before its first micro-batch (session,
Catalyst, code generation, the streaming engine, RocksDB). Measured on 2
cores, that is most of a restart: a session took 5.3 s to create and 2.4 s to run its first
job; with the classes mapped from an archive, 3.2 s and 1.2 s. HotSpot's dynamic class data
sharing (AppCDS, JEP 350) records the classes a JVM loaded into such an archive when that JVM
exits (``-XX:ArchiveClassesAtExit``); later JVMs map it (``-XX:SharedArchiveFile``).

streamtable does this for the driver JVMs it launches (:func:`~streamtable.runtime.spark.
get_spark`), with one archive per Java installation, PySpark and streamtable version (and
streamtable's default session settings) under
``$STREAMTABLE_CDS_CACHE``, else ``$XDG_CACHE_HOME/streamtable/cds``, else
``~/.cache/streamtable/cds`` (150-200 MB; one no JVM mapped for 30 days is deleted):

- when the archive exists, the JVM maps it (the JVM itself checks that the archive matches its
  build and class path, and ignores one that does not: never an error, only a slower start);
- when none exists and no other JVM is recording one, this JVM records its classes and writes
  ``<key>.<pid>-<ns>.recording`` when it exits normally; the next start moves a finished
  recording into place once its header shows a complete archive (a JVM killed while writing,
  or killed before, leaves nothing usable, and a later start records again). A JVM that
  records loads classes more slowly (about 3 s more for the first session), once;
- nothing is done for a Java without HotSpot's base archive (``lib/server/classes.jsa``), for
  a cache path with whitespace (JVM options are split on it), or when
  ``spark.driver.extraJavaOptions`` already has class data sharing options of its own.

``make install`` records the archive ahead of the first run (``python -m
streamtable.runtime.class_data_sharing``). Turned off with ``streamtable.jvm.class.data.sharing
= false``; executors on a cluster are not affected (their JVMs are the cluster manager's).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from streamtable.platform._process import cache_home, pid_alive, read_state, write_state

#: Output of the JVM about class data sharing (mismatched archives, classes it skips when
#: recording) goes nowhere: a mismatched archive only means a slower start.
_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def cache_dir() -> Path:
    """The folder of the archives (not created).

    Returns
    -------
    pathlib.Path
        ``$STREAMTABLE_CDS_CACHE``, else ``$XDG_CACHE_HOME/streamtable/cds``, else
        ``~/.cache/streamtable/cds``.
    """
    return cache_home("STREAMTABLE_CDS_CACHE", "cds")


def archive_key(java: str, java_version_output: str, spark_jars_dir: str | None) -> str:
    """The archive's name: a digest of the Java build and Spark's jars (names and sizes).

    >>> archive_key("/usr/bin/java", "openjdk 17", None) == archive_key(
    ...     "/usr/bin/java", "openjdk 17", None)
    True
    >>> archive_key("/usr/bin/java", "openjdk 17", None) == archive_key(
    ...     "/usr/bin/java", "openjdk 21", None)
    False
    """
    h = hashlib.sha256()
    h.update(os.path.realpath(java).encode())
    h.update(java_version_output.encode())
    if spark_jars_dir and os.path.isdir(spark_jars_dir):
        for name in sorted(os.listdir(spark_jars_dir)):
            with contextlib.suppress(OSError):
                h.update(f"{name}:{os.path.getsize(os.path.join(spark_jars_dir, name))}".encode())
    return h.hexdigest()[:20]


def defaults_digest(session_defaults: Mapping[str, str]) -> str:
    """What, besides Java and Spark, decides which classes a driver JVM loads: this
    streamtable's version and its default session settings (a default such as the checkpoint
    file manager brings its own classes).

    Parameters
    ----------
    session_defaults : Mapping[str, str]
        streamtable's default Spark settings (not a user's: an archive per application would
        multiply 150-200 MB files).

    Returns
    -------
    str
        20 hex digits; the same for the same version and settings in any process.

    >>> defaults_digest({"a": "1"}) == defaults_digest({"a": "1"})
    True
    >>> defaults_digest({"a": "1"}) == defaults_digest({"a": "2"})
    False
    """
    from streamtable import __version__

    h = hashlib.sha256(__version__.encode())
    for k, v in sorted(session_defaults.items()):
        h.update(f"\n{k}={v}".encode())
    return h.hexdigest()[:20]


def driver_archive_key(spark_home: str | None = None, defaults: str = "") -> str | None:
    """The archive key of a driver JVM of this Java and PySpark (and, with ``defaults``,
    this streamtable: :func:`~streamtable.runtime.spark.session_archive_key` is the key of the
    JVM :func:`~streamtable.runtime.spark.get_spark` starts), or None when this Java cannot
    share classes dynamically (not HotSpot 13+, or without a base archive).

    Parameters
    ----------
    spark_home : str, optional
        The JVM's ``SPARK_HOME`` (default: ``$SPARK_HOME``, else the installed ``pyspark``
        package). Part of the key: the JVM's class path names the jars under it, and an
        archive maps only for the class path it was recorded with.
    defaults : str, optional
        From :func:`defaults_digest`. Part of the key: the JVM checks the archive against its
        class path only, so an archive recorded by another streamtable would map and silently
        miss the classes this one loads (about 2 s per start, measured).

    Raises
    ------
    EnvironmentSetupError
        If Java is missing or too old (from :func:`~streamtable.runtime.jars.check_java`).
    """
    import pyspark

    from streamtable.runtime import jars

    output = jars.java_version_output()
    if not output:  # check_java() not run yet in this process
        jars.check_java()
        output = jars.java_version_output()
    feature = jars._parse_java_version(output) or 0
    java = jars.java_executable()
    if not supports_dynamic_archive(output, feature) or not has_base_archive(java):
        return None
    home = spark_home or os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    return archive_key(java, f"{output}\n{home}\n{defaults}", os.path.join(home, "jars"))


def supports_dynamic_archive(java_version_output: str, feature: int) -> bool:
    """Whether this Java can record and map a dynamic archive: HotSpot, 13 or newer.

    >>> supports_dynamic_archive('OpenJDK 64-Bit Server VM (build 17.0.15+6)', 17)
    True
    >>> supports_dynamic_archive("Eclipse OpenJ9 VM (build openj9-0.43.0)", 17)
    False
    """
    text = java_version_output.lower()
    hotspot = "hotspot" in text or "server vm" in text
    return feature >= 13 and hotspot and "openj9" not in text


def has_base_archive(java: str) -> bool:
    """Whether the Java installation of ``java`` ships HotSpot's base archive, which a
    dynamic archive extends (``<java.home>/lib/server/classes*.jsa``).
    """
    server = Path(os.path.realpath(java)).parent.parent / "lib" / "server"
    return any(server.glob("classes*.jsa"))


#: Options a user may set to manage class data sharing: then streamtable adds none.
_USER_OPTIONS = (
    "Xshare",
    "SharedArchiveFile",
    "ArchiveClassesAtExit",
    "AutoCreateSharedArchive",
    "DumpLoadedClassList",
)


def user_manages_sharing(java_options: str) -> bool:
    """Whether ``spark.driver.extraJavaOptions`` has class data sharing options of its own.

    >>> user_manages_sharing("-Dx=1 -Xshare:off")
    True
    >>> user_manages_sharing("-Dlog4j2.configurationFile=file:/x.properties")
    False
    """
    return any(o in java_options for o in _USER_OPTIONS)


#: The first 4 bytes of a complete dynamic archive (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC,
#: little-endian); the JVM writes the header last, so a file cut short has zeros there.
_DYNAMIC_MAGIC = (0xF00BABA8).to_bytes(4, "little")


def _complete(recording: Path) -> bool:
    try:
        with open(recording, "rb") as f:
            return f.read(4) == _DYNAMIC_MAGIC
    except OSError:
        return False


def _alive(pid: int, needle: str | None) -> bool:
    """Whether process ``pid`` runs and, if given, has ``needle`` in its command line (a
    reused pid is another program).
    """
    return pid > 0 and pid_alive(pid, needle.encode() if needle is not None else None)


@dataclass(frozen=True)
class ArchivePlan:
    """What the driver JVM about to start does with the archive.

    Attributes
    ----------
    options : tuple of str
        JVM options to add to ``spark.driver.extraJavaOptions`` (empty: nothing to do).
    recording : pathlib.Path or None
        The file the JVM writes at its exit when it records the archive; register the JVM's
        pid with :meth:`register` once it runs.
    """

    options: tuple[str, ...]
    recording: Path | None = None

    def register(self, jvm_pid: int) -> None:
        """Note which JVM records (so later starts wait for it instead of recording again)."""
        if self.recording is None:
            return
        with contextlib.suppress(OSError):
            write_state(
                self.recording.with_suffix(".json"),
                {"jvm_pid": jvm_pid, "since": time.time(), "jvm": True},
            )


#: A recording without a marker (its JVM started outside :func:`plan_archive`'s bookkeeping)
#: is removed after this long.
_ORPHAN_AGE_S = 3600.0


def _settle(directory: Path, key: str) -> bool:
    """Move finished recordings of ``key`` into place; whether a recording is still running."""
    running = False
    final = directory / f"{key}.jsa"
    marked = set()
    for marker in directory.glob(f"{key}.*.json"):
        recording = marker.with_suffix(".recording")
        marked.add(recording)
        body = read_state(marker) or {}
        try:
            pid = int(body["jvm_pid"])
        except (KeyError, ValueError, TypeError):
            pid = -1
        needle = recording.name if body.get("jvm") else None
        if _alive(pid, needle):
            running = True
            continue
        with contextlib.suppress(OSError):
            if _complete(recording):
                os.replace(recording, final)
        for leftover in (marker, recording):
            with contextlib.suppress(OSError):
                leftover.unlink()
    for recording in directory.glob(f"{key}.*.recording"):
        with contextlib.suppress(OSError):
            if recording not in marked and time.time() - recording.stat().st_mtime > _ORPHAN_AGE_S:
                recording.unlink()
    return running


#: An archive no driver JVM has mapped for this long is deleted (the archive of an earlier
#: streamtable, PySpark or Java: each takes 150-200 MB).
_UNUSED_AGE_S = 30 * 86400.0
#: The names of the archives :func:`archive_key` names (nothing else in the folder is pruned).
_ARCHIVE_NAME = re.compile(r"[0-9a-f]{20}\.jsa")


def _used(directory: Path, key: str) -> Path:
    """The file whose mtime says when an archive was last mapped: a small file of its own, so
    that the archive itself is never written after it is recorded (touching it would copy it
    whole into a container's writable layer when an image holds it).
    """
    return directory / f"{key}.used"


def _mark_used(directory: Path, key: str) -> None:
    with contextlib.suppress(OSError):
        _used(directory, key).touch()


def _prune_unused(directory: Path, keep: Path) -> None:
    """Delete the archives other than ``keep`` that no JVM has mapped for ``_UNUSED_AGE_S``
    (their last use: the newer of the archive's and its ``.used`` file's mtime).
    """
    now = time.time()
    for archive in directory.glob("*.jsa"):
        if archive == keep or not _ARCHIVE_NAME.fullmatch(archive.name):
            continue
        used = _used(directory, archive.name[: -len(".jsa")])
        with contextlib.suppress(OSError):
            last = archive.stat().st_mtime
            with contextlib.suppress(OSError):
                last = max(last, used.stat().st_mtime)
            if now - last > _UNUSED_AGE_S:
                archive.unlink()
                used.unlink(missing_ok=True)


def plan_archive(key: str, directory: Path | None = None) -> ArchivePlan:
    """Options for the next driver JVM: map the archive of ``key``, or record it.

    Parameters
    ----------
    key : str
        From :func:`archive_key`.
    directory : pathlib.Path, optional
        Default :func:`cache_dir`.

    Returns
    -------
    ArchivePlan
        No options when the folder cannot be written or has whitespace in its path, or
        another JVM is recording. Never raises. Archives of other keys that no JVM has mapped
        for 30 days are deleted.
    """
    directory = directory or cache_dir()
    if any(c.isspace() for c in str(directory)):
        return ArchivePlan(())  # the JVM options are split on whitespace
    try:
        directory.mkdir(parents=True, exist_ok=True)
        running = _settle(directory, key)
    except OSError:
        return ArchivePlan(())
    final = directory / f"{key}.jsa"
    if final.is_file():
        _mark_used(directory, key)  # before pruning: another start cannot take it meanwhile
    _prune_unused(directory, final)
    if final.is_file():
        return ArchivePlan((f"-XX:SharedArchiveFile={final}", "-Xshare:auto", *_QUIET))
    if running:
        return ArchivePlan(())
    recording = directory / f"{key}.{os.getpid()}-{time.time_ns()}.recording"
    # this process stands for the JVM until it runs (register): a JVM that fails to start a
    # session still writes its recording at exit, which the next start then finds
    with contextlib.suppress(OSError):
        write_state(recording.with_suffix(".json"), {"jvm_pid": os.getpid(), "since": time.time()})
    return ArchivePlan((f"-XX:ArchiveClassesAtExit={recording}", *_QUIET), recording)


def record_now(timeout_s: float = 120.0) -> Path | None:
    """Record the driver JVM's archive now, unless it exists (``make install`` runs this).

    A Spark session runs a small batch job and a streaming aggregation (RocksDB state), then
    its JVM exits and writes the archive.

    Returns
    -------
    pathlib.Path or None
        The archive; None when this Java cannot record one, another process is recording it,
        or the JVM wrote none.

    Raises
    ------
    StreamsError
        If a Spark session is already active in this process (its JVM would not record).
    """
    from pyspark.sql import SparkSession

    from streamtable.errors import StreamsError
    from streamtable.runtime.spark import (
        current_archive_plan,
        get_spark,
        session_archive_key,
        session_extras,
    )
    from streamtable.runtime.spark_home import local_spark_home

    conf = {"spark.sql.shuffle.partitions": "2"}
    home = local_spark_home()  # the home get_spark gives the local JVM
    key = session_archive_key(home, session_extras(conf, home))
    if key is None:
        return None
    final = cache_dir() / f"{key}.jsa"
    if final.is_file():
        return final
    if SparkSession.getActiveSession() is not None:
        raise StreamsError("record_now() starts its own Spark session; stop the active one first")
    spark = get_spark(conf)
    plan = current_archive_plan()
    if plan is None or plan.recording is None:
        spark.stop()
        return final if final.is_file() else None
    spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 10)
        .load()
        .groupBy("value")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .start()
    )
    deadline = time.monotonic() + timeout_s
    while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    proc = spark.sparkContext._gateway.proc  # type: ignore[attr-defined]
    spark.stop()
    # the JVM exits when its stdin closes (PySpark's gateway protocol), writing the archive
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()
        proc.wait(timeout_s)
    _settle(plan.recording.parent, key)
    return final if final.is_file() else None


if __name__ == "__main__":  # pragma: no cover - run by make install
    archive = record_now()
    print(f"JVM class data sharing archive: {archive or 'not recorded'}", file=sys.stderr)
