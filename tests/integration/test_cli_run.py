"""``streamtable run`` as a user runs it: a separate process, stopped with SIGTERM.

Checks the operational promises of issue 19 for the command: a clean stop on SIGTERM (the
running micro-batch commits, exit 0 within ``--shutdown-timeout``, nothing left to redo), and
quiet output (Spark's log lines and the Python workers' chatter go to the log file under the
state directory, not to the console).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap

APP = """
from streamtable import Serdes, StreamsBuilder

b = StreamsBuilder()
(
    b.stream({source!r}, key_serde=Serdes.string(), value_serde=Serdes.string())
    .group_by_key()
    .aggregate(lambda: 0, lambda key, value, total: total + len(value), name="lengths")
    .to_stream()
    .to({sink!r}, value_serde=Serdes.long())
)
topology = b.build()
"""


#: a progress line of ``streamtable run`` when stdout is not a terminal (its state is not empty)
PROGRESS_LINE = re.compile(
    r"^\S+: batch \d+, [\d,]+ records/s, lag [\d,]+, batch [\d,]+ ms, state [1-9][\d,]* rows \(",
    re.M,
)


def test_sigterm_stops_a_run_cleanly_and_the_console_shows_no_spark_log(
    kafka_broker, topic_name, tmp_path
):
    from _support import SPARK_LINE, ensure_topics, produce_values, read_topic, wait_until
    from streamtable.runtime.starting_offsets import pending_batch_records

    bs = kafka_broker.bootstrap_servers
    source, sink = topic_name("in"), topic_name("out")
    ensure_topics(bs, {source: 2, sink: 1})
    (tmp_path / "lengths_app.py").write_text(textwrap.dedent(APP.format(source=source, sink=sink)))
    produce_values(bs, source, [(f"k{i % 7}", "x" * (i % 5 + 1)) for i in range(300)])
    state = tmp_path / "state"
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamtable",
                "run",
                "lengths_app:topology",
                "--application-id",
                "cli-run-sigterm",
                "--bootstrap-servers",
                bs,
                "--state-dir",
                str(state),
                "--shutdown-timeout",
                "60",
            ],
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
        )
        try:
            # a progress line: the first micro-batch completed (stdout is not a terminal)
            wait_until(
                lambda: PROGRESS_LINE.search(out.read_text()) or proc.poll() is not None,
                180,
                "the first progress line of the run",
            )
            assert proc.poll() is None, err.read_text()
            before = len(read_topic(bs, sink))
            assert before > 0
            # more input; its first results reach the sink while its micro-batch runs (the
            # batch commits after its tasks), so the signal most likely arrives mid-batch
            produce_values(bs, source, [(f"k{i % 7}", "yy") for i in range(300)])
            wait_until(
                lambda: len(read_topic(bs, sink)) > before or proc.poll() is not None,
                120,
                "results of the second input",
            )
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
    printed, console_err = out.read_text(), err.read_text()
    assert code == 0, printed + console_err
    assert "SIGTERM: letting the running micro-batch commit, then stopping (at most 60 s)" in (
        printed
    )
    assert re.search(r"^stopped in \d+\.\d s$", printed, re.M), printed
    # a clean stop leaves no micro-batch to run again
    query_dirs = [p for p in (state / "cli-run-sigterm").iterdir() if (p / "offsets").is_dir()]
    assert query_dirs
    assert [pending_batch_records(q) for q in query_dirs] == [0] * len(query_dirs)
    # quiet: neither stream holds a Spark log line or worker chatter; the log file has them
    assert not SPARK_LINE.search(printed), printed
    assert not SPARK_LINE.search(console_err), console_err
    log = state / "logs" / "spark.log"
    assert f"Spark's log: {log}" in printed
    logged = log.read_text()
    assert "streamtable starts a Spark session" in logged
    assert "TransformWithStateInPandas Python worker" in logged
