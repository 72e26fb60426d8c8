"""A crash harness: SIGKILL a running application again and again, then verify its output.

Modelled on Kafka's ``streams_eos_test`` (``EosTestDriver``): the application
(:mod:`streamtable.testing._crash_app`) runs as a separate process group — the Python driver,
the Spark JVM and Spark's Python workers — and is killed with ``SIGKILL`` at random moments
while it processes, then restarted from its checkpoint. After the last kill it runs until it has
caught up, and a ``read_committed`` consumer checks the outputs record by record:

The kill takes the whole process tree: the application's process group and Spark's Python
worker daemon, which runs in a process group of its own.

* the echo topic holds every input sequence number exactly once;
* the sums topic's values for each key are a strictly increasing subsequence of the key's
  running sums (in the order its partition holds the input), none emitted twice, and the last
  one is the key's total.

With ``topology="chain"`` the app also runs a chain of two sub-topologies (a stream-table join,
a re-key, a per-group sum behind a repartition topic; :func:`streamtable.testing._crash_app.
chain_topology`), and the group sums are checked too: each group's emitted sums strictly
increase (every update adds ``seq + 1 > 0``; a replay written twice would repeat or lower one),
and the groups' final sums add up to the sum over all input (nothing lost, nothing counted
twice). Which group a record lands in depends on whether the join saw its key's table row yet,
so only these totals, not per-group values, are known in advance.

Under ``at_least_once`` duplicates are allowed (and counted); loss never is.

Every random choice comes from one seed, printed in :class:`CrashReport`, so a failing run can be
replayed with ``seed=``. The kill moments themselves are times, so a replay hits similar, not
identical, instants.
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamtable import _watchdog
from streamtable.errors import StreamtableError
from streamtable.platform._process import descendants as _descendants


@dataclass
class CrashReport:
    """What one crash run did and found.

    Attributes
    ----------
    seed : int
        Replays the run's random choices (``run_crash_test(..., seed=seed)``).
    kills : list of float
        Seconds after the first output of each run at which it was killed.
    echo_missing, echo_duplicates : int
        Input sequence numbers absent from the echo topic / present more than once.
    sums_errors : list of str
        Keys whose emitted sums are not a strictly increasing subsequence of their running sums
        or whose last sum is not their total (first few, with details).
    sums_duplicates : int
        Sums emitted more than once for the same key.
    seconds : float
        Wall time of the run.
    """

    seed: int
    guarantee: str
    records: int
    kills: list[float] = field(default_factory=list)
    echo_records: int = 0
    echo_missing: int = 0
    echo_duplicates: int = 0
    sums_records: int = 0
    sums_errors: list[str] = field(default_factory=list)
    sums_duplicates: int = 0
    topology: str = "simple"
    group_sums_records: int = 0
    group_sums_errors: list[str] = field(default_factory=list)
    restarts_s: list[float] = field(default_factory=list)
    seconds: float = 0.0
    #: with ``files_dir``: the same checks over the file sinks, read through their logs
    files_echo_missing: int = 0
    files_echo_duplicates: int = 0
    files_sums_errors: list[str] = field(default_factory=list)
    files_sums_duplicates: int = 0
    #: data files in the sinks' directories that their logs do not hold (crashed attempts:
    #: what a reader listing the directory would read twice)
    files_unlogged: int = 0

    @property
    def exactly_once(self) -> bool:
        """No record lost, none duplicated, every sum right."""
        return (
            self.echo_missing == 0
            and self.echo_duplicates == 0
            and self.sums_duplicates == 0
            and not self.sums_errors
            and not self.group_sums_errors
            and self.files_echo_missing == 0
            and self.files_echo_duplicates == 0
            and self.files_sums_duplicates == 0
            and not self.files_sums_errors
        )

    @property
    def nothing_lost(self) -> bool:
        """Every input echoed at least once and every final sum right (at-least-once)."""
        return self.echo_missing == 0 and not [
            e for e in self.sums_errors + self.group_sums_errors if "final" in e
        ]

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        out = dict(self.__dict__)
        out["exactly_once"] = self.exactly_once
        out["nothing_lost"] = self.nothing_lost
        return out


def _end_offset_sum(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"crash-probe-{uuid.uuid4().hex}"})
    try:
        md = c.list_topics(topic, timeout=30)
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in md.topics[topic].partitions
        )
    finally:
        c.close()


class _App:
    """One run of the crash app as its own process group."""

    def __init__(self, spec: dict[str, Any], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in kill()/wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamtable.testing._crash_app", json.dumps(spec)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the JVM and workers are in it
        )
        _watchdog.guard(self.proc.pid)  # a killed test run does not leave the app running

    def kill(self) -> None:
        """SIGKILL the app's whole process tree and wait until it is gone."""
        kill_process_tree(self.proc)
        _watchdog.release(self.proc.pid)
        self._log.close()

    def wait(self, timeout: float) -> int:
        """Wait for a clean exit; the exit code."""
        try:
            code = self.proc.wait(timeout=timeout)
            _watchdog.release(self.proc.pid)
            return code
        finally:
            self._log.close()

    def tail(self, n: int = 30) -> str:
        """The log's last error line (its cause, which a long traceback pushes out of the
        tail), then its last ``n`` lines.
        """
        from streamtable.runtime.query_errors import last_exception_line

        text = self.log_path.read_text(errors="replace")
        cause = last_exception_line(text)
        lines = text.splitlines()[-n:]
        return "\n".join(([f"last error: {cause}"] if cause else []) + lines)


def kill_process_tree(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL ``proc``'s process group and every descendant; wait until all are gone.

    ``proc`` must lead its own process group (``start_new_session=True``). Spark's Python
    worker daemon puts itself and its workers in a process group of their own, so killing the
    group alone would leave them running as zombies.
    """
    tree = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        _group_alive(proc.pid) or any(_alive(pid) for pid in tree)
    ):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True


def _wait_for_output(bootstrap: str, topic: str, above: int, app: _App, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _end_offset_sum(bootstrap, topic) <= above:
        if app.proc.poll() is not None:
            raise StreamtableError(f"The crash app exited early:\n{app.tail()}")
        if time.monotonic() > deadline:
            raise StreamtableError(f"The crash app wrote nothing within {timeout} s:\n{app.tail()}")
        time.sleep(0.2)


def run_crash_test(
    bootstrap_servers: str,
    workdir: Path,
    *,
    records: int = 20000,
    keys: int = 50,
    partitions: int = 3,
    kills: int = 3,
    seed: int | None = None,
    guarantee: str = "exactly_once_v2",
    max_kill_delay_s: float = 4.0,
    max_offsets_per_trigger: int = 1000,
    shuffle_partitions: int = 2,
    replication_factor: int | None = None,
    config: dict[str, Any] | None = None,
    timeout_s: float = 600.0,
    topology: str = "simple",
    files_dir: Path | None = None,
) -> CrashReport:
    """Run the crash app, SIGKILL it ``kills`` times, let it finish, verify the outputs.

    Parameters
    ----------
    bootstrap_servers : str
        A running Kafka cluster (e.g. :class:`~streamtable.broker.EmbeddedKafka`).
    workdir : Path
        For the app's state directory and process logs.
    records, keys, partitions : int
        Input size: record ``i`` has key ``k{i % keys}`` and value ``i``, in a topic of
        ``partitions`` partitions.
    kills : int
        How many times the running app is killed (each after its first new output, at a random
        delay up to ``max_kill_delay_s`` seconds).
    seed : int, optional
        Seed of every random choice (random when omitted; reported either way).
    guarantee : {"exactly_once_v2", "at_least_once"}
        The app's ``processing.guarantee``.
    max_offsets_per_trigger : int
        Spreads the input over many micro-batches, so kills land mid-processing.
    config : dict, optional
        Extra app configuration.
    topology : {"simple", "chain"}
        ``"chain"`` adds the two-sub-topology chain (join, re-key, aggregate; see the module
        doc) and its checks.
    files_dir : Path, optional
        Also write the echo stream and the sums' update stream to Parquet with ``to_files``
        (``files_dir/echo``, ``files_dir/sums``) and check them like the topics.

    Returns
    -------
    CrashReport

    Raises
    ------
    StreamtableError
        If the app fails to start, exits early, or does not catch up after the last kill.
    """
    from streamtable.demo._harness import ensure_topics
    from streamtable.demo.flights_data import produce_records

    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    rng = random.Random(seed)
    t0 = time.monotonic()
    run_id = f"{seed}-{uuid.uuid4().hex[:6]}"
    if topology not in ("simple", "chain"):
        raise ValueError(f"run_crash_test: topology must be 'simple' or 'chain'; got {topology!r}")
    source, echo, sums = (f"crash-{n}-{run_id}" for n in ("in", "echo", "sums"))
    topics = {source: partitions, echo: partitions, sums: partitions}
    chain: dict[str, str] = {}
    if topology == "chain":
        chain = {"groups": f"crash-groups-{run_id}", "group_sums": f"crash-group-sums-{run_id}"}
        topics.update({chain["groups"]: partitions, chain["group_sums"]: partitions})
    ensure_topics(bootstrap_servers, topics)
    if chain:  # every key's group, before the input (the join sees the table as of then)
        produce_records(
            bootstrap_servers,
            chain["groups"],
            [(f"k{j}".encode(), f"g{j % 7}".encode(), 1) for j in range(keys)],
        )
    produce_records(
        bootstrap_servers,
        source,
        [(f"k{i % keys}".encode(), struct.pack(">q", i), 1_000_000 + i) for i in range(records)],
    )
    workdir.mkdir(parents=True, exist_ok=True)
    app_config = {
        "application.id": f"crash-{run_id}",
        "bootstrap.servers": bootstrap_servers,
        "state.dir": str(workdir / "state"),
        "processing.guarantee": guarantee,
        "commit.interval.ms": 100,
        "streamtable.shuffle.partitions": shuffle_partitions,
        "streamtable.max.offsets.per.trigger": max_offsets_per_trigger,
        **(config or {}),
    }
    spec = {"source": source, "echo": echo, "sums": sums, "config": app_config, **chain}
    if files_dir is not None:
        spec["files"] = str(files_dir)
    report = CrashReport(seed=seed, guarantee=guarantee, records=records, topology=topology)
    log_path = workdir / f"crash-app-{run_id}.log"
    for _ in range(kills):
        before = _end_offset_sum(bootstrap_servers, echo)
        started = time.monotonic()
        app = _App(spec, log_path)
        try:
            _wait_for_output(bootstrap_servers, echo, before, app, timeout=timeout_s)
        except BaseException:
            app.kill()
            raise
        report.restarts_s.append(round(time.monotonic() - started, 2))
        delay = rng.uniform(0.0, max_kill_delay_s)
        time.sleep(delay)  # the random kill moment (not a wait for a condition)
        app.kill()
        report.kills.append(round(delay, 3))
    final = _App({**spec, "exit_when_caught_up": True, "timeout_s": timeout_s}, log_path)
    code = final.wait(timeout=timeout_s + 120)
    if code != 0:
        raise StreamtableError(
            f"The crash app did not finish after the kills (exit {code}):\n{final.tail()}"
        )
    verify_outputs(report, bootstrap_servers, source, echo, sums)
    if chain:
        verify_group_sums(report, bootstrap_servers, chain["group_sums"])
    if files_dir is not None:
        verify_files(report, files_dir, running_sums(bootstrap_servers, source))
    report.seconds = round(time.monotonic() - t0, 1)
    return report


def verify_outputs(
    report: CrashReport, bootstrap_servers: str, source: str, echo: str, sums: str
) -> CrashReport:
    """Check the crash topology's outputs with ``read_committed`` consumers; fill ``report``.

    Reading waits until every transaction on the topics has finished (a read_committed
    consumer's position reaches the end offset), as Kafka's EOS verifier does.

    Parameters
    ----------
    report : CrashReport
        Its ``records`` says how many inputs (values ``0 .. records - 1``) there are.
    bootstrap_servers, source, echo, sums : str
        The cluster and the input, echo and sums topics of
        :func:`streamtable.testing._crash_app.crash_topology`.
    """
    from streamtable.demo._harness import read_topic

    records = report.records
    echo_records = read_topic(bootstrap_servers, echo)
    sums_records = read_topic(bootstrap_servers, sums)
    seen = Counter(struct.unpack(">q", v)[0] for _, v, _ in echo_records if v is not None)
    report.echo_records = len(echo_records)
    report.echo_missing = sum(1 for i in range(records) if seen[i] == 0)
    report.echo_duplicates = sum(n - 1 for n in seen.values() if n > 1)
    running = running_sums(bootstrap_servers, source)
    emitted: dict[bytes, list[int]] = {}
    for k, v, _ in sums_records:
        assert k is not None and v is not None
        emitted.setdefault(k, []).append(struct.unpack(">q", v)[0])
    report.sums_records = len(sums_records)
    report.sums_errors, report.sums_duplicates = check_sums(running, emitted)
    return report


def running_sums(bootstrap_servers: str, source: str) -> dict[bytes, list[int]]:
    """Each key's running sums, in the order the key's partition holds its records."""
    from streamtable.demo._harness import read_topic

    running: dict[bytes, list[int]] = {}
    for k, v, _ in read_topic(bootstrap_servers, source):
        assert k is not None and v is not None
        sums_k = running.setdefault(k, [])
        sums_k.append((sums_k[-1] if sums_k else 0) + struct.unpack(">q", v)[0])
    return running


def check_sums(
    running: dict[bytes, list[int]], emitted: dict[bytes, list[int]]
) -> tuple[list[str], int]:
    """Errors (first few per key) and duplicates of the ``emitted`` sums against ``running``:
    each key's emitted sums must be a strictly increasing subsequence of its running sums,
    none twice, the last one its total.
    """
    errors: list[str] = []
    duplicates = 0
    for k, prefix in running.items():
        got = emitted.get(k, [])
        duplicates += len(got) - len(set(got))
        if not got or got[-1] != prefix[-1]:
            errors.append(f"{k!r}: final {got[-1] if got else None} != total {prefix[-1]}")
            continue
        it = iter(prefix)
        if not all(any(x == p for p in it) for x in got):  # in order, each at most once
            errors.append(f"{k!r}: emitted {got[:8]}... not a subsequence of sums")
    return errors, duplicates


def verify_files(report: CrashReport, files_dir: Path, running: dict[bytes, list[int]]) -> None:
    """Check the crash app's file sinks (``files_dir/echo``, ``files_dir/sums``) through their
    logs, as :func:`verify_outputs` checks the topics; fill ``report``'s ``files_*`` fields.
    """
    from streamtable.files import committed_files, read_files

    seen = Counter(read_files(files_dir / "echo", columns=["value"]).column("value").to_pylist())
    report.files_echo_missing = sum(1 for i in range(report.records) if seen[i] == 0)
    report.files_echo_duplicates = sum(n - 1 for n in seen.values() if n > 1)
    emitted: dict[bytes, list[int]] = {}
    sums = read_files(files_dir / "sums", columns=["key", "value", "timestamp"]).to_pylist()
    # one key's updates come from one task, in order; equal timestamps keep the log's order
    for row in sorted(sums, key=lambda r: r["timestamp"]):
        emitted.setdefault(row["key"].encode(), []).append(row["value"])
    report.files_sums_errors, report.files_sums_duplicates = check_sums(running, emitted)
    for sink in ("echo", "sums"):
        logged = set(committed_files(files_dir / sink))
        listed = {p for p in (files_dir / sink).rglob("*.parquet")}
        report.files_unlogged += len(listed - logged)


def verify_group_sums(report: CrashReport, bootstrap_servers: str, group_sums: str) -> CrashReport:
    """Check the chain's per-group sums (see the module doc); fill ``report``.

    Parameters
    ----------
    report : CrashReport
        Its ``records`` says how many inputs (values ``0 .. records - 1``) there are.
    bootstrap_servers, group_sums : str
        The cluster and the group sums topic of
        :func:`streamtable.testing._crash_app.chain_topology`.
    """
    from streamtable.demo._harness import read_topic

    emitted: dict[bytes, list[int]] = {}
    records = read_topic(bootstrap_servers, group_sums)
    for k, v, _ in records:
        assert k is not None and v is not None
        emitted.setdefault(k, []).append(struct.unpack(">q", v)[0])
    report.group_sums_records = len(records)
    for k, got in emitted.items():
        if any(b <= a for a, b in zip(got, got[1:], strict=False)):
            bad = next(i for i in range(1, len(got)) if got[i] <= got[i - 1])
            report.group_sums_errors.append(
                f"{k!r}: sums do not increase at {bad}: {got[max(0, bad - 2) : bad + 2]}"
            )
    total = sum(got[-1] for got in emitted.values())
    expected = sum(i + 1 for i in range(report.records))
    if total != expected:
        report.group_sums_errors.append(
            f"final group sums add up to {total}, not the input's {expected}"
        )
    return report
