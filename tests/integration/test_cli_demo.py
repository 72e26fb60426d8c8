"""`streamtable demo wordcount FILE --bootstrap-servers ...` runs the job and prints the counts.

Run as a user runs it (a separate process) so that the console it leaves is checked too: no
Spark log line and no Python-worker chatter on stdout or stderr (issue 19, "quiet by default").
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from _support import SPARK_LINE
from streamtable.platform._process import descendants, pid_alive


def test_demo_wordcount_from_a_text_file_prints_counts_and_no_spark_log(kafka_broker, tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("Hello Kafka Streams\nhello, kafka!\n", encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamtable",
            "demo",
            "wordcount",
            str(text),
            "--bootstrap-servers",
            kafka_broker.bootstrap_servers,
            "--state-dir",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    # Java's split("\\W+") on "hello, kafka!" gives ["hello", "kafka"]
    assert figures["words"] == 5 and figures["distinct_words"] == 3
    printed = {tuple(line.split()) for line in lines[:-1]}
    assert {("'kafka'", "2"), ("'hello'", "2"), ("'streams'", "1")} <= printed
    assert not SPARK_LINE.search(result.stdout), result.stdout
    assert not SPARK_LINE.search(result.stderr), result.stderr
    assert (tmp_path / "state" / "logs" / "spark.log").stat().st_size > 0


def _brokers_below(pid: int) -> set[int]:
    """The Kafka broker JVMs that ``pid`` started (Linux /proc)."""
    return {p for p in descendants(pid) if pid_alive(p, b"\0kafka.Kafka\0")}


def _query_started(state_dir) -> bool:
    """True once a streaming query has written an offset log under ``state_dir``."""
    return any(p.is_dir() for p in state_dir.glob("**/offsets"))


@pytest.mark.parametrize("moment", ["broker started", "query running"])
def test_sigterm_stops_a_demo_and_its_embedded_broker(tmp_path, moment):
    # the embedded broker runs in its own process group: Python's own SIGTERM would end the
    # demo at once and leave the broker running. While a query runs, the signal may land in
    # the middle of a call into Spark's JVM.
    from _support import wait_until

    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamtable",
            "demo",
            "wordcount",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def broker_started() -> set[int]:
        if demo.poll() is not None:
            pytest.fail(f"the demo ended first ({demo.returncode}): {demo.communicate()}")
        found = _brokers_below(demo.pid)
        if moment == "query running" and not _query_started(tmp_path / "state"):
            return set()
        return found

    brokers: set[int] = set()
    try:
        brokers = wait_until(broker_started, 120, "the demo's broker JVM")
        demo.send_signal(signal.SIGTERM)
        out, err = demo.communicate(timeout=120)
        wait_until(
            lambda: not any(pid_alive(p) for p in brokers),
            30,
            f"broker processes {brokers} still run",
        )
    finally:
        _kill_leftovers(demo, brokers)
    assert demo.returncode == 143, out + err  # a JVM's status after SIGTERM
    assert not SPARK_LINE.search(out + err), out + err


def test_sigkill_of_a_demo_stops_its_embedded_broker(tmp_path):
    # SIGKILL runs no clean-up in the demo: its watchdog (streamtable._watchdog) sees the pipe
    # from the demo close and stops the broker it guards. Spark's JVM, running the demo's query
    # by then, ends on its own when its stdin from the demo closes (PySpark's gateway), and
    # its Python workers with it; the watchdog exits after its work.

    from _support import wait_until

    demo = subprocess.Popen(
        [sys.executable, "-m", "streamtable", "demo", "wordcount", "--state-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    brokers: set[int] = set()
    left: set[int] = set()
    try:
        brokers = wait_until(
            lambda: _query_started(tmp_path) and _brokers_below(demo.pid),
            180,
            "the demo's broker JVM and query",
        )
        left = set(descendants(demo.pid))
        demo.kill()
        demo.wait(timeout=30)
        wait_until(
            lambda: not any(pid_alive(p) for p in left),
            45,
            lambda: (
                f"processes of the killed demo still run: "
                f"{ {p: _cmdline(p) for p in left if pid_alive(p)} }"
            ),
        )
    finally:
        _kill_leftovers(demo, left)
    assert brokers <= left


def _kill_leftovers(demo: subprocess.Popen, pids: set[int]) -> None:
    """SIGKILL the demo and ``pids``: what a failed run leaves behind."""
    if demo.poll() is None:
        demo.kill()
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"
