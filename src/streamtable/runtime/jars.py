"""Locate Java and resolve the JVM jar sets streamtable needs, with Maven, into a local cache.

The jar sets ship as Maven POMs inside the package (``streamtable/jvm/<component>/pom.xml``):

``"broker"``
    The Apache Kafka broker (KRaft mode) used by :class:`streamtable.broker.EmbeddedKafka`.
``"spark-kafka"``
    Spark's Kafka source/sink for ``spark.jars``: only the jars the PySpark wheel lacks.
``"connect"``
    Apache Kafka Connect with Debezium's PostgreSQL connector, used by
    :class:`streamtable.platform.KafkaConnect` (its own JVM and classpath).

:func:`resolve_jars` runs ``mvn dependency:copy-dependencies`` once per POM content and caches
the result under ``<cache root>/<component>-<hash of the POM>``; a marker file written after a
successful copy makes later calls free.  The cache root is ``$STREAMTABLE_JAR_CACHE`` if set,
else ``$XDG_CACHE_HOME/streamtable/jars``, else ``~/.cache/streamtable/jars``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.resources
import json
import logging
import os
import pathlib
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping

from streamtable.errors import EnvironmentSetupError

__all__ = [
    "COMPONENTS",
    "FALLBACK_PROPERTIES",
    "MIN_JAVA_VERSION",
    "cache_root",
    "check_java",
    "java_executable",
    "java_version_output",
    "maven_executable",
    "pom_path",
    "resolve_jars",
]

#: Jar sets that :func:`resolve_jars` knows about.
COMPONENTS: tuple[str, ...] = ("broker", "spark-kafka", "kstreams", "connect")

#: Oldest Java feature release that Kafka 4.x brokers and Spark 4.x accept.
MIN_JAVA_VERSION = 17

_LOG = logging.getLogger("streamtable")

_MARKER = ".streamtable-complete"

#: Tried in order, for a call without explicit ``properties``, when the POM's own versions do not
#: resolve.  Spark 4.3.0's Kafka connector was not on Maven Central (as reachable) when this was
#: written; the 4.2.0 connector (with the 4.0.0 token provider, the newest one there) was
#: verified to read and write Kafka from PySpark 4.3.0 (batch and structured streaming).
FALLBACK_PROPERTIES: dict[str, tuple[dict[str, str], ...]] = {
    "spark-kafka": ({"spark.version": "4.2.0", "spark.token.provider.version": "4.0.0"},),
}
_JAVA_HINT = "install a JDK 17+ (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
_MAVEN_HINT = "install Maven (apt-get install maven)"
_MVN_TIMEOUT_S = 1800.0


def java_executable() -> str:
    """Return the path of the ``java`` launcher to use.

    ``$JAVA_HOME/bin/java`` wins when ``JAVA_HOME`` is set and that file exists; otherwise the
    first ``java`` on ``PATH``.

    Returns
    -------
    str
        Absolute path (or PATH-resolved path) of the ``java`` executable.

    Raises
    ------
    EnvironmentSetupError
        If no ``java`` executable can be found; the message says how to install one.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = pathlib.Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    where = f"JAVA_HOME={java_home!r} has no bin/java and " if java_home else ""
    raise EnvironmentSetupError(f"Java not found: {where}`java` is not on PATH; {_JAVA_HINT}.")


def _parse_java_version(text: str) -> int | None:
    """Return the feature release from ``java -version`` output (``1.8`` → 8, ``17.0.1`` → 17)."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2):
        return int(m.group(2))
    return major


_version_output: dict[str, str] = {}


def java_version_output() -> str:
    """What ``java -version`` printed at the last :func:`check_java` ("" before it ran)."""
    return _version_output.get(java_executable(), "")


def check_java() -> int:
    """Check that a usable Java (17 or newer) is available.

    Returns
    -------
    int
        The Java feature release, e.g. ``17``.

    Raises
    ------
    EnvironmentSetupError
        If ``java`` is missing, cannot run, or is older than :data:`MIN_JAVA_VERSION`.
    """
    java = java_executable()
    try:
        proc = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentSetupError(f"Java at {java} could not run ({exc}); {_JAVA_HINT}.") from exc
    output = (proc.stderr or "") + (proc.stdout or "")
    _version_output[java] = output
    version = _parse_java_version(output)
    if proc.returncode != 0 or version is None:
        raise EnvironmentSetupError(
            f"Java at {java} did not report a version (exit {proc.returncode}): "
            f"{output.strip()[-500:]}; {_JAVA_HINT}."
        )
    if version < MIN_JAVA_VERSION:
        raise EnvironmentSetupError(
            f"Java at {java} is version {version}, but {MIN_JAVA_VERSION}+ is required; "
            f"{_JAVA_HINT}."
        )
    return version


def maven_executable() -> str:
    """Return the path of the ``mvn`` launcher on ``PATH``.

    Returns
    -------
    str
        Path of ``mvn``.

    Raises
    ------
    EnvironmentSetupError
        If Maven is not installed; the message says how to install it.
    """
    found = shutil.which("mvn")
    if not found:
        raise EnvironmentSetupError(
            f"Maven not found: `mvn` is not on PATH and is needed to download the JVM jars "
            f"once; {_MAVEN_HINT}."
        )
    return found


def cache_root() -> pathlib.Path:
    """Return the root folder of the jar cache (not created).

    Returns
    -------
    pathlib.Path
        ``$STREAMTABLE_JAR_CACHE``, else ``$XDG_CACHE_HOME/streamtable/jars``, else
        ``~/.cache/streamtable/jars``.
    """
    override = os.environ.get("STREAMTABLE_JAR_CACHE")
    if override:
        return pathlib.Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "streamtable" / "jars"


def pom_path(component: str) -> pathlib.Path:
    """Return the packaged POM of a jar set.

    Parameters
    ----------
    component : str
        One of :data:`COMPONENTS`.

    Returns
    -------
    pathlib.Path
        Path of ``streamtable/jvm/<component>/pom.xml``.

    Raises
    ------
    ValueError
        If ``component`` is unknown.
    EnvironmentSetupError
        If the POM is missing from the installed package.
    """
    if component not in COMPONENTS:
        raise ValueError(f"unknown jar component {component!r}; expected one of {COMPONENTS}")
    path = pathlib.Path(
        str(importlib.resources.files("streamtable") / "jvm" / component / "pom.xml")
    )
    if not path.is_file():
        raise EnvironmentSetupError(
            f"{path} is missing from the installed streamtable package; reinstall streamtable."
        )
    return path


def _cache_key(pom_bytes: bytes, properties: Mapping[str, str]) -> str:
    h = hashlib.sha256(pom_bytes)
    for key in sorted(properties):
        h.update(f"\0{key}={properties[key]}".encode())
    return h.hexdigest()[:12]


@contextlib.contextmanager
def _file_lock(path: pathlib.Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _list_jars(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.glob("*.jar") if p.is_file())


def _is_complete(folder: pathlib.Path) -> bool:
    return (folder / _MARKER).is_file()


def resolve_jars(
    component: str,
    *,
    properties: Mapping[str, str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> list[pathlib.Path]:
    """Return the jar files of a jar set, downloading them with Maven on first use.

    The first call for a given POM content runs ``mvn dependency:copy-dependencies`` (runtime
    scope) into ``<cache root>/<component>-<hash>``, then writes a completion marker; later
    calls only list that folder.  A file lock (``fcntl``) serialises concurrent resolutions, in
    this or other processes, of the same jar set.

    Parameters
    ----------
    component : str
        ``"broker"`` (Kafka broker, KRaft), ``"spark-kafka"`` (Spark's Kafka connector) or
        ``"kstreams"`` (Kafka Streams, for parity tests and benchmarks) or ``"connect"`` (Kafka
        Connect with Debezium's PostgreSQL connector).
    properties : Mapping[str, str], optional
        Maven ``-D`` properties passed to the POM, e.g. ``{"kafka.version": "4.3.0"}``; they are
        part of the cache key.  Without them, if the POM's own versions do not resolve, the
        entries of :data:`FALLBACK_PROPERTIES` for ``component`` are tried in order (with a
        warning on the ``streamtable`` logger); a completed fallback is then reused without
        trying Maven again (delete the cache folder to retry).
    cache_dir : path-like, optional
        Cache root; defaults to :func:`cache_root`.

    Returns
    -------
    list of pathlib.Path
        The jar files, sorted by name.

    Raises
    ------
    ValueError
        If ``component`` is unknown.
    EnvironmentSetupError
        If Java or Maven is missing (the message says how to install them), or an artifact fails
        to resolve (the message carries the tail of Maven's output).
    """
    if properties is not None or component not in FALLBACK_PROPERTIES:
        return _resolve_one(component, dict(properties or {}), cache_dir)
    root = pathlib.Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    primary = _folder_for(root, component, {})
    if not _is_complete(primary):
        for props in FALLBACK_PROPERTIES[component]:
            fallback = _folder_for(root, component, props)
            if _is_complete(fallback):
                return _list_jars(fallback)
    try:
        return _resolve_one(component, {}, cache_dir)
    except EnvironmentSetupError as first_error:
        if "Maven failed to resolve" not in str(first_error):
            raise
        for props in FALLBACK_PROPERTIES[component]:
            try:
                jars = _resolve_one(component, dict(props), cache_dir)
            except EnvironmentSetupError:
                continue
            _LOG.info(
                "the %r jars at the POM's versions did not resolve; using the fallback %s "
                "instead (%s)",
                component,
                props,
                ", ".join(p.name for p in jars),
            )
            return jars
        raise first_error


def _folder_for(root: pathlib.Path, component: str, props: Mapping[str, str]) -> pathlib.Path:
    return root / f"{component}-{_cache_key(pom_path(component).read_bytes(), props)}"


def _resolve_one(
    component: str, props: dict[str, str], cache_dir: str | os.PathLike[str] | None
) -> list[pathlib.Path]:
    pom = pom_path(component)
    root = pathlib.Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    folder = root / f"{component}-{_cache_key(pom.read_bytes(), props)}"
    if _is_complete(folder):
        return _list_jars(folder)

    java = java_executable()
    mvn = maven_executable()
    with _file_lock(root / f".{folder.name}.lock"):
        if _is_complete(folder):  # another process finished while we waited
            return _list_jars(folder)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={folder}",
            *(f"-D{k}={v}" for k, v in sorted(props.items())),
        ]
        env = dict(os.environ)
        env.setdefault("JAVA_HOME", str(pathlib.Path(os.path.realpath(java)).parent.parent))
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=_MVN_TIMEOUT_S,
                env=env,
                cwd=str(root),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise EnvironmentSetupError(
                f"Maven did not finish resolving the {component!r} jars within "
                f"{_MVN_TIMEOUT_S:.0f} s; check network access to Maven Central."
            ) from exc
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise EnvironmentSetupError(f"Maven could not run ({exc}); {_MAVEN_HINT}.") from exc
        jars = _list_jars(folder)
        if proc.returncode != 0 or not jars:
            shutil.rmtree(folder, ignore_errors=True)
            output = (proc.stdout or "") + (proc.stderr or "")
            tail = "\n".join(_strip_ansi(output).strip().splitlines()[-25:])
            raise EnvironmentSetupError(
                f"Maven failed to resolve the {component!r} jars from {pom} "
                f"(exit {proc.returncode}). Check network access to Maven Central or the "
                f"artifact versions in the POM. Tail of mvn output:\n{tail}"
            )
        (folder / _MARKER).write_text(
            json.dumps(
                {"pom": str(pom), "properties": props, "jars": [p.name for p in jars]}, indent=1
            )
        )
        return jars


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
