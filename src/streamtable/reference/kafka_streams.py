"""Run a fixed topology in real Apache Kafka Streams (Java), for parity tests and benchmarks.

Internal, not public API.  The Java side is ``streamtable/jvm/kstreams``: a POM (the jar set:
kafka-streams, Jackson, slf4j-simple) and ``ReferenceApp.java``, which builds one of
:data:`TOPOLOGIES` and runs it with ``commit.interval.ms=100``, no record cache
(``statestore.cache.max.bytes=0``: every update is emitted), ``auto.offset.reset=earliest``,
at-least-once and one stream thread.

The jars are the ``kstreams`` jar set of
:func:`streamtable.runtime.jars.resolve_jars` (folder ``kstreams-<hash of the POM>``), and
the Java source is compiled with ``javac`` into ``kstreams-classes-<hash of the sources and
jars>`` beside them; both happen once.

Kafka Streams' own result for a stream-table join depends on timing when the stream side is
repartitioned: if the table side is processed more than the versioned store's history retention
ahead of the stream side, lookups return null (``RocksDBVersionedStore`` logs "Returning null for
expired get") and inner-join records are dropped.  For replayed data spanning months (the flights
year), pass a ``history_ms`` longer than that span to get every match.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib.resources
import json
import os
import pathlib
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from streamtable import _watchdog
from streamtable.errors import EnvironmentSetupError
from streamtable.runtime import jars

__all__ = [
    "ADVANCE_WALL_CLOCK",
    "TOPOLOGIES",
    "classpath",
    "describe_reference",
    "drive_reference",
    "reads_internal_topic",
    "run_reference",
    "started_reference",
]

#: Topologies that ``ReferenceApp`` knows, with their ``params``.
TOPOLOGIES: dict[str, tuple[str, ...]] = {
    "stream-table-join": ("stream", "table", "output", "kind", "history_ms"),
    "table-table-join": ("left", "right", "output", "kind"),
    "table-aggregate": ("table", "output"),
    "flights-weather": ("flights", "weather", "output", "history_ms"),
    "flights-planes": ("flights", "planes", "output"),
    "flights-fk-planes": ("flights", "planes", "output"),
    # windowed: tumbling windows of size_ms with grace_ms, suppress=true|false, output keys in
    # TimeWindowedSerde bytes; metrics_file receives {"dropped-records-total": N} at shutdown
    # store=rocksdb (default) | memory picks the window store
    "windowed-count": (
        "input",
        "output",
        "size_ms",
        "grace_ms",
        "suppress",
        "store",
        "metrics_file",
    ),
    "windowed-aggregate": (
        "input",
        "output",
        "size_ms",
        "grace_ms",
        "suppress",
        "store",
        "metrics_file",
    ),
    "flights-hourly": (
        "flights",
        "output",
        "size_ms",
        "grace_ms",
        "agg",
        "suppress",
        "store",
        "metrics_file",
    ),
    "windowed-parity": (
        "input",
        "size_ms",
        "grace_ms",
        "count_output",
        "aggregate_output",
        "count_final_output",
        "aggregate_final_output",
        "metrics_file",
    ),
    # chains of several sub-topologies (repartition topics between them)
    "join-rekey-reduce": ("stream", "table", "output", "history_ms"),
    "count-histogram": ("input", "output"),
    "count-filter": ("input", "output", "suppress_ms"),
    "windowed-count-filter": ("input", "output", "size_ms", "grace_ms", "suppress", "suppress_ms"),
    "session-count-filter": ("input", "output", "gap_ms", "grace_ms", "suppress"),
    "sliding-count-filter": ("input", "output", "difference_ms", "grace_ms", "suppress"),
    "table-join-regroup": ("left", "right", "output"),
    "three-level": ("input", "output"),
    "flights-carrier-seats": ("flights", "planes", "output"),
    "windowed-filter-join": ("input", "table", "output", "size_ms", "grace_ms", "history_ms"),
    # Processor API: a counting processor with store "counts", stream-time punctuation every
    # stream_ms ((key, "st:<count>") per key) and wall-clock punctuation every wall_ms
    # (("total", "wall:<sum>"))
    "processor-punctuation": ("input", "output", "stream_ms", "wall_ms"),
    # Kafka's WordCountDemo; store=rocksdb (default) | memory picks the count's store
    "wordcount": ("input", "output", "store"),
    "latency-echo": ("input", "output"),
    "latency-max": ("input", "output"),
    "latency-count": ("input", "output"),
}

#: The ``topic`` of a :func:`drive_reference` input entry that advances the driver's wall
#: clock by its timestamp field (ms) instead of piping a record.
ADVANCE_WALL_CLOCK = "(advance wall clock)"

_MAIN_CLASS = "io.streamtable.reference.ReferenceApp"
_STATE_LINE = "streamtable-reference: state "
_POLL_S = 0.2
_STOP_GRACE_S = 20.0
_TAIL_LINES = 40
_TOOL_TIMEOUT_S = 1800.0


def _jvm_dir() -> pathlib.Path:
    return pathlib.Path(str(importlib.resources.files("streamtable") / "jvm" / "kstreams"))


def _run_tool(cmd: list[str], what: str, cwd: pathlib.Path) -> None:
    env = dict(os.environ)
    java = jars.java_executable()
    env.setdefault("JAVA_HOME", str(pathlib.Path(os.path.realpath(java)).parent.parent))
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, env=env, cwd=cwd
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentSetupError(f"{what} could not run ({exc}).") from exc
    if proc.returncode != 0:
        tail = "\n".join(((proc.stdout or "") + (proc.stderr or "")).strip().splitlines()[-25:])
        raise EnvironmentSetupError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _cached_folder(name: str, key: str, fill: Callable[[pathlib.Path], None]) -> pathlib.Path:
    """``<jar cache>/<name>-<key>``, filled once by ``fill(folder)`` under a file lock."""
    root = jars.cache_root()
    folder = root / f"{name}-{key}"
    if jars._is_complete(folder):
        return folder
    with jars._file_lock(root / f".{folder.name}.lock"):
        if not jars._is_complete(folder):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            try:
                fill(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            (folder / jars._MARKER).write_text(json.dumps({"name": name}))
    return folder


def _javac() -> pathlib.Path:
    javac = pathlib.Path(os.path.realpath(jars.java_executable())).with_name("javac")
    if javac.is_file():
        return javac
    found = shutil.which("javac")
    if found:
        return pathlib.Path(found)
    raise EnvironmentSetupError(
        "javac not found beside java nor on PATH; install a JDK 17+ "
        "(e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME."
    )


def classpath() -> list[pathlib.Path]:
    """Resolve the Kafka Streams jars and compile ``ReferenceApp`` if needed (both cached).

    Returns
    -------
    list of pathlib.Path
        The compiled classes folder, then the jars.

    Raises
    ------
    EnvironmentSetupError
        If Java, ``javac`` or Maven is missing, or resolving or compiling fails.
    """
    jar_files = jars.resolve_jars("kstreams")
    sources = sorted((_jvm_dir() / "src" / "main" / "java").rglob("*.java"))
    digest = hashlib.sha256()
    for src in sources:
        digest.update(src.name.encode() + b"\0" + src.read_bytes())
    for jar in jar_files:
        digest.update(jar.name.encode() + b"\0")

    def fill(out: pathlib.Path) -> None:
        cmd = [str(_javac()), "-encoding", "UTF-8", "-d", str(out)]
        cmd += ["-cp", os.pathsep.join(map(str, jar_files)), *map(str, sources)]
        _run_tool(cmd, "javac compiling the Kafka Streams reference app", out.parent)

    classes = _cached_folder("kstreams-classes", digest.hexdigest()[:12], fill)
    return [classes, *jar_files]


class _Lag:
    """Compares a consumer group's committed offsets with the end offsets of topics."""

    def __init__(self, bootstrap_servers: str, group: str) -> None:
        self.group = group
        self.admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap_servers, "group.id": f"{group}-reference-probe"}
        )

    def watermarks(self, topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, int]]:
        """``(low, high)`` watermark offsets of every partition of ``topics``."""
        md = self.consumer.list_topics(timeout=30).topics
        return {
            (t, p): self.consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)
            for t in topics
            for p in md[t].partitions
        }

    def internal_input_topics(self) -> list[str]:
        """The internal topics the app reads that exist now (:func:`reads_internal_topic`)."""
        names = self.consumer.list_topics(timeout=30).topics
        return sorted(t for t in names if reads_internal_topic(self.group, t))

    def behind(self, marks: Mapping[tuple[str, int], tuple[int, int]]) -> list[str]:
        """Partitions of ``marks`` whose committed offset is below their high watermark."""
        request = [ConsumerGroupTopicPartitions(self.group)]
        result = self.admin.list_consumer_group_offsets(request)[self.group].result()
        committed = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []}
        return [
            f"{t}-{p} at {committed.get((t, p), -1)} of {high}"
            for (t, p), (low, high) in sorted(marks.items())
            if high > low and committed.get((t, p), -1) < high
        ]

    def close(self) -> None:
        self.consumer.close()


def describe_reference(topology: str, params: Mapping[str, str]) -> str:
    """Kafka Streams' own ``Topology.describe()`` text of reference ``topology``.

    Builds the topology in the JVM (no broker, no state) and prints its description.

    Parameters
    ----------
    topology : str
        One of :data:`TOPOLOGIES`.
    params : Mapping[str, str]
        Topology parameters (topic names, ...), as for :func:`run_reference`.

    Returns
    -------
    str
        The text of ``TopologyDescription#toString``.

    Raises
    ------
    ValueError
        If ``topology`` or a key of ``params`` is unknown.
    RuntimeError
        If the Java process fails (the message holds its output).
    """
    _check_params(topology, params)
    return _run_java(
        _MAIN_CLASS,
        ["--topology", topology, "--describe", "true"],
        params,
        f"Kafka Streams describe of {topology!r}",
    )


def _run_java(main_class: str, args: list[str], params: Mapping[str, str], what: str) -> str:
    """Run ``main_class`` of the reference classes with ``args`` and ``--param k=v`` per
    entry of ``params``; its stdout.

    Raises
    ------
    RuntimeError
        If the process fails; ``what`` names it, and the message holds its output.
    """
    cmd = _java_command(main_class, args, params)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def drive_reference(
    topology: str,
    params: Mapping[str, str],
    records: Iterable[tuple[str, bytes | None, bytes | None, int]],
    output: str,
    *,
    work_dir: pathlib.Path,
    initial_wall_clock_ms: int | None = None,
) -> list[tuple[bytes | None, bytes | None, int]]:
    """Pipe ``records`` one by one through reference ``topology`` in Kafka Streams' own
    ``TopologyTestDriver`` and return what it wrote to topic ``output``.

    Kafka's driver keeps repartition topics in memory and processes each record through every
    sub-topology before the next. Kafka Streams' default record cache is on: the driver commits
    after every record, so each record's updates are emitted once per key, as streamtable emits
    one update per key and micro-batch.

    Parameters
    ----------
    topology : str
        One of :data:`TOPOLOGIES`.
    params : Mapping[str, str]
        Its parameters except ``output``.
    records : iterable of (topic, key bytes or None, value bytes or None, timestamp ms)
        The input, in piping order; an entry whose topic is :data:`ADVANCE_WALL_CLOCK`
        advances the driver's wall clock by its timestamp field instead.
    output : str
        The output topic (the topology's ``output`` parameter).
    work_dir : pathlib.Path
        Where the input file is written.
    initial_wall_clock_ms : int, optional
        The driver's initial wall-clock time (default: now).

    Returns
    -------
    list of (key, value, timestamp ms)
        The output topic's records in order (``None`` for a null key or a tombstone).

    Raises
    ------
    ValueError
        If ``topology`` or a key of ``params`` is unknown.
    RuntimeError
        If the Java process fails (the message holds its output).
    """
    import base64

    _check_params(topology, {**params, "output": output})

    def b64(b: bytes | None) -> str | None:
        return None if b is None else base64.b64encode(b).decode()

    source = work_dir / f"{topology}-driver-input.jsonl"
    with source.open("w", encoding="utf-8") as f:
        for topic, key, value, ts in records:
            if topic == ADVANCE_WALL_CLOCK:
                f.write(json.dumps({"advance_wall_clock_ms": ts}))
            else:
                entry = {"topic": topic, "key": b64(key), "value": b64(value), "ts": ts}
                f.write(json.dumps(entry))
            f.write("\n")
    clock = (
        []
        if initial_wall_clock_ms is None
        else ["--initial-wall-clock", str(initial_wall_clock_ms)]
    )
    stdout = _run_java(
        "io.streamtable.reference.ReferenceDriver",
        ["--topology", topology, "--input", str(source), "--output", output, *clock],
        params,
        f"Kafka Streams' TopologyTestDriver on {topology!r}",
    )
    out = []
    for line in stdout.splitlines():
        if line.strip():
            r = json.loads(line)
            unb64 = lambda v: None if v is None else base64.b64decode(v)  # noqa: E731
            out.append((unb64(r["key"]), unb64(r["value"]), int(r["ts"])))
    return out


def _check_params(topology: str, params: Mapping[str, str]) -> None:
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; expected one of {list(TOPOLOGIES)}")
    unknown = sorted(set(params) - set(TOPOLOGIES[topology]))
    if unknown:
        raise ValueError(f"unknown params {unknown} for {topology!r}: {TOPOLOGIES[topology]}")


def _ends(marks: Mapping[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], int]:
    """The end offsets of ``(low, high)`` watermarks (low ones move as Kafka Streams purges)."""
    return {tp: high for tp, (_low, high) in marks.items()}


def reads_internal_topic(application_id: str, topic: str) -> bool:
    """Whether ``topic`` is an internal topic that Kafka Streams app ``application_id`` reads:
    a repartition topic, or a foreign-key join's subscription registration or response topic,
    generated (upper case) or named with ``TableJoined.as(name)`` (lower case); changelog
    topics are written, never read while running.

    Examples
    --------
    >>> reads_internal_topic("app", "app-KSTREAM-KEY-SELECT-0000000002-repartition")
    True
    >>> reads_internal_topic("app", "app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic")
    True
    >>> reads_internal_topic("app", "app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic")
    True
    >>> store = "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000007"
    >>> reads_internal_topic("app", f"app-{store}-changelog")
    False
    >>> reads_internal_topic("app", "app-fk-subscription-registration-topic")
    True
    >>> reads_internal_topic("app", "app-fk-subscription-response-topic")
    True
    >>> reads_internal_topic("other", "app-KSTREAM-KEY-SELECT-0000000002-repartition")
    False
    """
    if not topic.startswith(f"{application_id}-"):
        return False
    rest = topic[len(application_id) :].lower()
    return rest.endswith("-repartition") or (
        rest.endswith("-topic")
        and ("-subscription-registration-" in rest or "-subscription-response-" in rest)
    )


def run_reference(
    topology: str,
    *,
    bootstrap_servers: str,
    application_id: str,
    params: Mapping[str, str],
    input_topics: list[str],
    state_dir: str,
    timeout_s: float = 180.0,
    config: Mapping[str, str] | None = None,
) -> dict[str, float | int]:
    """Run ``topology`` in Kafka Streams until it has processed all input present now, then stop.

    The app counts as caught up when its consumer group (``application_id``) has committed, for
    every partition of ``input_topics``, the end offset read at this call, and then, for every
    partition of the internal topics it reads (:func:`reads_internal_topic`: repartition topics,
    a foreign-key join's subscription topics), their current end offset, and those end offsets
    are the same when read again. The Java process runs in its own process group and is stopped
    with SIGTERM, then SIGKILL after 20 s.

    Parameters
    ----------
    topology : str
        One of :data:`TOPOLOGIES`.
    bootstrap_servers : str
        The Kafka cluster, ``host:port[,...]``.
    application_id : str
        Kafka Streams ``application.id``; also its consumer group and internal topic prefix.
    params : Mapping[str, str]
        Topology parameters (topics, ``kind``, ...), passed as ``--param key=value``.
    input_topics : list of str
        The source topics whose end offsets the app must reach; they must exist.
    state_dir : str
        Kafka Streams ``state.dir``.
    timeout_s : float
        Maximum seconds from process start until caught up.
    config : Mapping[str, str], optional
        Kafka Streams configs that override the runner's (``--config key=value``), e.g.
        ``{"max.task.idle.ms": "2000"}``.

    Returns
    -------
    dict
        ``records_in`` (records in ``input_topics`` at the call), ``seconds`` (from process
        start until caught up) and ``startup_seconds`` (from process start until the app first
        reached ``RUNNING``).

    Raises
    ------
    ValueError
        If ``topology`` or a key of ``params`` is unknown.
    RuntimeError
        If the Java process exits early (the message holds its last 40 lines of output).
    TimeoutError
        If it has not caught up within ``timeout_s`` (the message says what lags).
    EnvironmentSetupError
        If Java, ``javac`` or Maven is missing or the jars do not resolve.
    """
    cmd = _reference_command(topology, bootstrap_servers, application_id, params, state_dir, config)
    lag = _Lag(bootstrap_servers, application_id)
    try:
        inputs = lag.watermarks(input_topics)
        records_in = sum(high - low for low, high in inputs.values())
        t0 = time.monotonic()
        proc, output, running_at, reader = _launch(cmd)
        try:
            while True:
                if proc.poll() is not None:
                    reader.join(timeout=5)
                    raise RuntimeError(
                        f"Kafka Streams reference app {topology!r} exited with code "
                        f"{proc.returncode}; last lines of its output:\n" + "\n".join(output)
                    )
                if running_at:
                    behind = lag.behind(inputs)
                    if not behind:
                        internal = lag.watermarks(lag.internal_input_topics())
                        behind = lag.behind(internal)
                        if not behind:
                            caught = time.monotonic() - t0
                            # records written to an internal topic after its end offsets were
                            # read (from records processed meanwhile, e.g. from one repartition
                            # topic into the next) show as a changed end: check again
                            again = lag.watermarks(lag.internal_input_topics())
                            if _ends(again) == _ends(internal):
                                seconds = caught
                                break
                            behind = ["internal topics grew while checked"]
                else:
                    behind = ["not RUNNING yet"]
                if time.monotonic() - t0 > timeout_s:
                    raise TimeoutError(
                        f"Kafka Streams reference app {topology!r} did not catch up within "
                        f"{timeout_s:g} s ({'; '.join(behind[:5])}); last lines of its "
                        "output:\n" + "\n".join(output)
                    )
                time.sleep(_POLL_S)
        finally:
            _stop(proc)
            reader.join(timeout=5)
    finally:
        lag.close()
    return {
        "records_in": records_in,
        "seconds": seconds,
        "startup_seconds": running_at[0] - t0,
    }


@contextlib.contextmanager
def started_reference(
    topology: str,
    *,
    bootstrap_servers: str,
    application_id: str,
    params: Mapping[str, str],
    state_dir: str,
    timeout_s: float = 120.0,
    config: Mapping[str, str] | None = None,
) -> Iterator[float]:
    """Run ``topology`` in Kafka Streams for the duration of a ``with`` block.

    Enters once the app has reached ``RUNNING``; on exit the process group is stopped as by
    :func:`run_reference` (SIGTERM, then SIGKILL after 20 s).

    Parameters
    ----------
    topology : str
        One of :data:`TOPOLOGIES`.
    bootstrap_servers : str
        The Kafka cluster, ``host:port[,...]``.
    application_id : str
        Kafka Streams ``application.id``.
    params : Mapping[str, str]
        Topology parameters (topics, ...), passed as ``--param key=value``.
    state_dir : str
        Kafka Streams ``state.dir``.
    timeout_s : float
        Maximum seconds from process start until ``RUNNING`` (default 120).
    config : Mapping[str, str], optional
        Kafka Streams configs that override the runner's, e.g. ``{"commit.interval.ms": "100"}``.

    Yields
    ------
    float
        Seconds from process start until ``RUNNING``.

    Raises
    ------
    ValueError
        If ``topology`` or a key of ``params`` is unknown.
    RuntimeError
        If the Java process exits before ``RUNNING``, or by itself while the block runs (with
        its exit code and last lines of output).
    TimeoutError
        If it is not ``RUNNING`` within ``timeout_s``.
    EnvironmentSetupError
        If Java, ``javac`` or Maven is missing or the jars do not resolve.
    """
    cmd = _reference_command(topology, bootstrap_servers, application_id, params, state_dir, config)
    t0 = time.monotonic()
    proc, output, running_at, reader = _launch(cmd)
    try:
        while not running_at:
            if proc.poll() is not None:
                reader.join(timeout=5)
                raise RuntimeError(
                    f"Kafka Streams reference app {topology!r} exited with code "
                    f"{proc.returncode}; last lines of its output:\n" + "\n".join(output)
                )
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(
                    f"Kafka Streams reference app {topology!r} not RUNNING within "
                    f"{timeout_s:g} s; last lines of its output:\n" + "\n".join(output)
                )
            time.sleep(_POLL_S)
        yield running_at[0] - t0
        if proc.poll() is not None:
            reader.join(timeout=5)
            raise RuntimeError(
                f"Kafka Streams reference app {topology!r} exited with code {proc.returncode} "
                "while it was in use; last lines of its output:\n" + "\n".join(output)
            )
    finally:
        _stop(proc)
        reader.join(timeout=5)


def _reference_command(
    topology: str,
    bootstrap_servers: str,
    application_id: str,
    params: Mapping[str, str],
    state_dir: str,
    config: Mapping[str, str] | None,
) -> list[str]:
    """The ``java`` command line of ``ReferenceApp`` (parameters checked)."""
    _check_params(topology, params)
    args = [
        *("--topology", topology, "--bootstrap-servers", bootstrap_servers),
        *("--application-id", application_id, "--state-dir", state_dir),
    ]
    cmd = _java_command(_MAIN_CLASS, args, params)
    for key, value in (config or {}).items():
        cmd += ["--config", f"{key}={value}"]
    return cmd


def _java_command(main_class: str, args: list[str], params: Mapping[str, str]) -> list[str]:
    """``java`` running ``main_class`` of the reference classes with ``args``, then
    ``--param k=v`` per entry of ``params``.
    """
    cmd = [
        jars.java_executable(),
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        os.pathsep.join(map(str, classpath())),
        main_class,
        *args,
    ]
    for key, value in params.items():
        cmd += ["--param", f"{key}={value}"]
    return cmd


def _launch(
    cmd: list[str],
) -> tuple[subprocess.Popen[str], collections.deque[str], list[float], threading.Thread]:
    """Start ``cmd`` in its own process group with a thread keeping its last output lines
    and noting when it first reports ``RUNNING``.
    """
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # stopped as _stop() does if this process dies first
    _watchdog.guard(proc.pid, grace=timedelta(seconds=_STOP_GRACE_S))
    output: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    running_at: list[float] = []
    reader = threading.Thread(target=_read_output, args=(proc, output, running_at), daemon=True)
    reader.start()
    return proc, output, running_at, reader


def _read_output(
    proc: subprocess.Popen[str], output: collections.deque[str], running_at: list[float]
) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        output.append(line)
        if not running_at and line == _STATE_LINE + "RUNNING":
            running_at.append(time.monotonic())


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the process group, then SIGKILL it after :data:`_STOP_GRACE_S`."""
    _stop_group(proc)
    _watchdog.release(proc.pid)  # not before: an interrupted stop leaves it to the watchdog


def _stop_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait_s in ((signal.SIGTERM, _STOP_GRACE_S), (signal.SIGKILL, None)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
