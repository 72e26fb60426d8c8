"""The Spark home of local sessions: Spark's Python processes import the installed ``pyspark``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*-src.zip`` first on the path of
every Python process it starts: the worker daemon, simple workers, and driver-side helpers
such as the process ``transformWithStateInPandas`` starts while planning a query's first
micro-batch, to learn its state schemas. A pip-installed PySpark ships those archives beside
the same modules, but without bytecode, so each fresh process compiles what it imports:
measured on 2 cores, importing PySpark's streaming, Arrow-serializer and function modules with
pandas and pyarrow took 0.95 s from the archives and 0.50 s from the installed package
(``python -c "import pyspark.sql.streaming.stateful_processor, ..."`` with and without
``PYTHONPATH`` set to the archives, 3 runs each) — seconds of a restart's first micro-batch.

:func:`local_spark_home` gives local driver JVMs a Spark home made of links to the installed
package's folders (``jars``, ``bin``, ...) but no ``python`` folder: Spark finds no archive,
and its Python processes import the installed ``pyspark`` and ``py4j`` with their bytecode.
Nothing changes when ``SPARK_HOME`` is set (a Spark distribution is the user's choice), on a
cluster (executors use their own installation), or when the archive and the installed package
are not the same PySpark version.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

from streamtable.platform._process import cache_home

#: The folder of the links (``$STREAMTABLE_SPARK_HOME_CACHE`` overrides it).
_ENV_VAR = "STREAMTABLE_SPARK_HOME_CACHE"


def installed_spark_home() -> Path:
    """The folder of the installed ``pyspark`` package (Spark's home for a pip install)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _zip_version(installed: Path) -> bytes | None:
    try:
        with zipfile.ZipFile(installed / "python" / "lib" / "pyspark.zip") as z:
            return z.read("pyspark/version.py")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def local_spark_home(installed: Path | None = None, cache: Path | None = None) -> Path | None:
    """A Spark home whose Python processes import the installed ``pyspark`` (made on first use).

    Parameters
    ----------
    installed : pathlib.Path, optional
        The installed ``pyspark`` package; default :func:`installed_spark_home`.
    cache : pathlib.Path, optional
        Where the homes are kept; default ``$STREAMTABLE_SPARK_HOME_CACHE``, else
        ``~/.cache/streamtable/spark-home``.

    Returns
    -------
    pathlib.Path or None
        ``<cache>/<digest of the package's path and version>``, holding a link to each entry
        of the package but ``python``. None when ``SPARK_HOME`` is set, when the package has
        no ``jars`` folder or no ``python/lib/pyspark.zip`` of its own version (nothing to
        gain), or when the folder cannot be made. Never raises.
    """
    if os.environ.get("SPARK_HOME"):
        return None
    installed = installed or installed_spark_home()
    version = _zip_version(installed)
    try:
        if not (installed / "jars").is_dir() or version != (installed / "version.py").read_bytes():
            return None
    except OSError:
        return None
    digest = hashlib.sha256(str(installed).encode() + b"\0" + version).hexdigest()[:16]
    home = (cache or cache_home(_ENV_VAR, "spark-home")) / digest
    with contextlib.suppress(OSError):
        if (home / "jars").resolve() == (installed / "jars").resolve():
            return home
    with contextlib.suppress(OSError):  # e.g. another process made it first
        _make(home, installed)
    try:
        return home if (home / "jars").resolve() == (installed / "jars").resolve() else None
    except OSError:
        return None


def _make(home: Path, installed: Path) -> None:
    """Build the folder of links beside ``home`` and move it in place (atomic: a concurrent
    start sees no half-made home; a home another process made first is kept).
    """
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = home.with_name(f".{home.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        for entry in sorted(os.listdir(installed)):
            if entry != "python":
                os.symlink(installed / entry, staging / entry)
        if home.is_symlink() or home.exists():
            shutil.rmtree(home, ignore_errors=True)  # stale: links to another package
        os.rename(staging, home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def launched_with(home: Path | None) -> Iterator[None]:
    """``SPARK_HOME`` is ``home`` while the block launches the driver JVM (which keeps it),
    then it is unset again in this process. Nothing is changed for ``home=None``.
    """
    if home is None:
        yield
        return
    os.environ["SPARK_HOME"] = str(home)
    try:
        yield
    finally:
        os.environ.pop("SPARK_HOME", None)
