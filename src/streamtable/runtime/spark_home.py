"""The Spark home of local sessions: Spark's Python processes import the installed ``pyspark``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*-src.zip`` first on the path of
every Python process it starts. A pip-installed PySpark ships those archives beside the same
modules, but without bytecode, so each fresh process compiles what it imports: measured on 2
cores, importing PySpark's streaming, Arrow-serializer and function modules with pandas and
pyarrow took 0.95 s from the archives and 0.50 s from the installed package (``python -c
"import pyspark.sql.streaming.stateful_processor, ..."`` with and without ``PYTHONPATH`` set to
the archives, 3 runs each). streamtable's worker daemon
(:mod:`streamtable.runtime.worker_daemon`) already drops the archives for the workers it
forks; the processes Spark starts on its own still compiled — above all the one
``transformWithStateInPandas`` starts on the driver while planning a query's first micro-batch
(to learn its state schemas), on the path of every restart's first output.

:func:`local_spark_home` gives local driver JVMs a Spark home made of links to the installed
package's folders (``jars``, ``bin``, ...) but no ``python`` folder: Spark finds no archive,
and its Python processes import the installed ``pyspark`` and ``py4j`` with their bytecode.
Nothing changes when ``SPARK_HOME`` is set (a Spark distribution is the user's choice), on a
cluster (executors use their own installation), when Spark's Python is another interpreter,
or when the archive and the installed package are not the same PySpark version.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from streamtable.platform._process import cache_home
from streamtable.runtime.worker_daemon import zip_version_file

#: The folder of the links (``$STREAMTABLE_SPARK_HOME_CACHE`` overrides it).
_ENV_VAR = "STREAMTABLE_SPARK_HOME_CACHE"


def installed_spark_home() -> Path:
    """The folder of the installed ``pyspark`` package (Spark's home for a pip install)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def local_spark_home(
    installed: Path | None = None, cache: Path | None = None, python: str | None = None
) -> Path | None:
    """A Spark home whose Python processes import the installed ``pyspark`` (made on first use).

    Parameters
    ----------
    installed : pathlib.Path, optional
        The installed ``pyspark`` package; default :func:`installed_spark_home`.
    cache : pathlib.Path, optional
        Where the homes are kept; default ``$STREAMTABLE_SPARK_HOME_CACHE``, else
        ``$XDG_CACHE_HOME/streamtable/spark-home``, else ``~/.cache/streamtable/spark-home``.
    python : str, optional
        The interpreter of Spark's Python processes (``spark.pyspark.python`` or
        ``$PYSPARK_PYTHON``); default: this one. Another path (even a link to the same
        binary: a virtual environment has its own packages) may have another ``pyspark``, or
        none, and keeps Spark's archives.

    Returns
    -------
    pathlib.Path or None
        ``<cache>/<digest of the package's path and version>``, holding a link to each entry
        of the package but ``python`` (and a ``conf`` link, dangling while the package has no
        ``conf`` folder). None when ``SPARK_HOME`` is set, when ``python`` is not this
        interpreter, when the package has no ``jars`` folder, has a ``spark-distribution``
        of its own, or has no ``python/lib/pyspark.zip`` of its own version (nothing to gain),
        or when the folder cannot be made. Never raises.
    """
    if os.environ.get("SPARK_HOME"):
        return None
    try:
        if python is not None and os.path.abspath(python) != os.path.abspath(sys.executable):
            return None
        installed = installed or installed_spark_home()
        version = zip_version_file(str(installed / "python" / "lib" / "pyspark.zip"))
        if (
            version is None
            or not (installed / "jars").is_dir()
            or (installed / "spark-distribution").exists()
            or version != (installed / "version.py").read_bytes()
        ):
            return None
        digest = hashlib.sha256(str(installed).encode() + b"\0" + version).hexdigest()[:16]
        home = (cache or cache_home(_ENV_VAR, "spark-home")) / digest
        if not _current(home, installed):
            with contextlib.suppress(OSError):  # e.g. another process made it meanwhile
                _make(home, installed)
        return home if _current(home, installed) else None
    except (OSError, RuntimeError):  # no home folder (Path.home()), a link loop
        return None


def _entries(installed: Path) -> set[str]:
    """What a home of ``installed`` links: every entry but ``python``, and ``conf``."""
    return (set(os.listdir(installed)) - {"python"}) | {"conf"}


def _current(home: Path, installed: Path) -> bool:
    """Whether ``home`` links exactly the entries of ``installed`` (a package changed since,
    e.g. a ``conf`` folder added, or links into another package, make it stale).
    """
    try:
        return set(os.listdir(home)) == _entries(installed) and all(
            os.readlink(home / e) == str(installed / e) for e in _entries(installed)
        )
    except OSError:
        return False


def _make(home: Path, installed: Path) -> None:
    """Build the folder of links beside ``home`` and move it in place: a concurrent start sees
    no half-made home, and a current home another process made meanwhile is kept.
    """
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}.", dir=home.parent))
    try:
        for entry in sorted(_entries(installed)):
            os.symlink(installed / entry, staging / entry)
        if _current(home, installed):
            return
        if os.path.lexists(home):  # stale: moved aside first, so no start sees it half-removed
            stale = Path(tempfile.mkdtemp(prefix=f".{home.name}.stale.", dir=home.parent))
            os.rename(home, stale / "home")
            shutil.rmtree(stale, ignore_errors=True)
        os.rename(staging, home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def launched_with(home: Path | None) -> Iterator[None]:
    """``SPARK_HOME`` is ``home`` while the block launches the driver JVM (which keeps it),
    then it is unset again in this process. Nothing is changed for ``home=None``.

    The variable is process-wide: a subprocess another thread starts meanwhile inherits it
    (none of streamtable's start-up threads starts one).
    """
    if home is None:
        yield
        return
    os.environ["SPARK_HOME"] = str(home)
    try:
        yield
    finally:
        os.environ.pop("SPARK_HOME", None)
