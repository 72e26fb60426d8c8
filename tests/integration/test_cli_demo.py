"""`streamtable demo wordcount FILE --bootstrap-servers ...` runs the job and prints the counts.

Run as a user runs it (a separate process) so that the console it leaves is checked too: no
Spark log line and no Python-worker chatter on stdout or stderr (issue 19, "quiet by default").
"""

import json
import subprocess
import sys

from _support import SPARK_LINE


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
