"""A local file system for Spark's checkpoints that starts no process per file.

PySpark ships no Hadoop native library, and without it Hadoop's ``RawLocalFileSystem`` sets
the permission of every file it creates (and of every directory it makes with a permission) by
running ``chmod`` in a child process of the driver JVM. Every checkpoint file a micro-batch
writes — its offset and commit log entries, each state partition's changelog, each with a
``.crc`` file — costs two such processes: 19.6 ms per file on 2 cores, against 2.5 ms
without them (py4j's round trips included; see docs/deployment.md, "Checkpoint files").

``io.streamtable.hadoop.ForklessLocalFileSystem`` (source in ``streamtable/jvm/local-fs``) is
Hadoop's ``LocalFileSystem`` with one method changed: the raw file system sets the same
permission bits with Java's ``Files.setPosixFilePermissions``, the same system call without the
process. What Java would do differently goes to Hadoop's own code: the sticky bit, which Java
cannot set, a directory with its set-user-ID or set-group-ID bit, which ``chmod`` keeps, and a
file system without POSIX permissions. Everything else (checksums, rename, listing) is
Hadoop's.

PySpark ships no such class, so :func:`forkless_jar` compiles it once with the JDK's ``javac``
against the Hadoop API jar of the Spark installation and caches the jar beside the connector
jars. A local session puts it on the driver's class path (:func:`session_settings`); without a
``javac`` (a JRE only) or when the compile fails, the session keeps Hadoop's own class and the
reason is logged at debug level. Only for ``local`` and ``local[...]`` masters: the executors
of a cluster (or of ``local-cluster``) would need the jar too (see
:func:`streamtable.runtime.spark.wants_local_file_system`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from streamtable.runtime.jars import cache_root, java_executable

__all__ = ["CLASS_NAME", "forkless_jar", "session_settings"]

log = logging.getLogger("streamtable")

#: The file system class, for ``spark.hadoop.fs.file.impl``.
CLASS_NAME = "io.streamtable.hadoop.ForklessLocalFileSystem"

#: Its Java source, shipped with the package.
SOURCE = (
    Path(__file__).resolve().parent.parent
    / "jvm"
    / "local-fs"
    / "src"
    / "main"
    / "java"
    / "io"
    / "streamtable"
    / "hadoop"
    / "ForklessLocalFileSystem.java"
)

#: The Hadoop API jar a Spark installation compiles against (PySpark's shaded client API).
_HADOOP_API = "hadoop-client-api-*.jar"

#: A fixed modification time (and zip entry time) for the jar: a rebuild of the same classes
#: gives the same file, which the driver's class data sharing archive checks (see
#: :mod:`streamtable.runtime.class_data_sharing`).
_FIXED_MTIME = 946_684_800  # 2000-01-01T00:00:00Z
_ZIP_TIME = (2000, 1, 1, 0, 0, 0)


def javac_executable() -> str | None:
    """The ``javac`` of the JDK whose ``java`` starts Spark (its sibling), else the one on
    ``PATH``; None when there is none (a JRE only).
    """
    try:
        sibling = Path(os.path.realpath(java_executable())).with_name("javac")
    except Exception:  # no Java: the session start reports it
        return None
    if os.access(sibling, os.X_OK):
        return str(sibling)
    return shutil.which("javac")


def forkless_jar(
    spark_jars: Path, cache: Path | None = None, javac: str | None = None
) -> Path | None:
    """The jar of :data:`CLASS_NAME`, compiled against ``spark_jars``' Hadoop API on first use.

    Parameters
    ----------
    spark_jars : Path
        The ``jars`` folder of the Spark installation the driver runs.
    cache : Path, optional
        Where jars are kept (default: the jar cache of :mod:`streamtable.runtime.jars`); one
        folder per source, Hadoop jar and ``javac``, so a new Spark, a changed source or
        another JDK compiles anew.
    javac : str, optional
        The compiler (default :func:`javac_executable`).

    Returns
    -------
    Path or None
        The jar; None, with the reason at debug level, when Spark has no Hadoop API jar, no
        ``javac`` is found, or the compile fails (not tried again in this process). Never
        raises.

    Examples
    --------
    >>> import tempfile
    >>> forkless_jar(Path(tempfile.mkdtemp())) is None  # no Hadoop jar to compile against
    True
    """
    try:
        return _build(spark_jars, cache, javac)
    except Exception as e:  # best effort: the session keeps Hadoop's own class
        log.debug("forkless local file system: not built: %r", e)
        return None


#: ``(javac, jar)`` pairs whose compile failed in this process: not tried again.
_failed: set[tuple[str, Path]] = set()


def _build(spark_jars: Path, cache: Path | None, javac: str | None) -> Path | None:
    hadoop = sorted(spark_jars.glob(_HADOOP_API))
    if not hadoop:
        log.debug("forkless local file system: no %s in %s", _HADOOP_API, spark_jars)
        return None
    compiler = javac or javac_executable()
    digest = hashlib.sha256(SOURCE.read_bytes())
    for jar in hadoop:
        digest.update(f"\0{jar.name}".encode())
    if compiler is not None:  # another JDK's javac may write other bytes: another jar
        digest.update(f"\0{os.path.realpath(compiler)}".encode())
    folder = (cache or cache_root()) / f"local-fs-{digest.hexdigest()[:12]}"
    jar_path = folder / "streamtable-local-fs.jar"
    if jar_path.is_file():
        return jar_path
    if compiler is None:
        log.debug("forkless local file system: no javac (a JRE only); Hadoop's own is used")
        return None
    if (compiler, jar_path) in _failed:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run(
            [
                compiler,
                "--release",
                "17",
                "-nowarn",
                "-cp",
                os.pathsep.join(str(j) for j in hadoop),
                "-d",
                str(classes),
                str(SOURCE),
            ],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=120,
        )
        if done.returncode != 0:
            _failed.add((compiler, jar_path))
            log.debug(
                "forkless local file system: javac failed (exit %d): %s",
                done.returncode,
                done.stderr.strip()[-2000:],
            )
            return None
        staged = Path(tmp) / jar_path.name
        _write_jar(classes, staged)
        os.utime(staged, (_FIXED_MTIME, _FIXED_MTIME))
        os.replace(staged, jar_path)  # atomic: a concurrent start sees all of it or none
    return jar_path


def _write_jar(classes: Path, jar: Path) -> None:
    """Zip ``classes`` into ``jar`` with fixed entry times, in name order (same bytes for the
    same classes).
    """
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as z:
        manifest = zipfile.ZipInfo("META-INF/MANIFEST.MF", _ZIP_TIME)
        z.writestr(manifest, "Manifest-Version: 1.0\r\n\r\n")
        for path in sorted(p for p in classes.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(path.relative_to(classes).as_posix(), _ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, path.read_bytes())


def session_settings(spark_jars: Path, cache: Path | None = None) -> dict[str, str]:
    """The settings that give a local session :data:`CLASS_NAME` for ``file:`` paths.

    Parameters
    ----------
    spark_jars : Path
        The ``jars`` folder of the Spark installation the driver runs.
    cache : Path, optional
        As in :func:`forkless_jar`.

    Returns
    -------
    dict[str, str]
        ``spark.driver.extraClassPath`` (the jar) and ``spark.hadoop.fs.file.impl``; empty
        when :func:`forkless_jar` gives no jar, so that the session keeps Hadoop's own class.
    """
    jar = forkless_jar(spark_jars, cache)
    if jar is None:
        return {}
    return {"spark.driver.extraClassPath": str(jar), "spark.hadoop.fs.file.impl": CLASS_NAME}
