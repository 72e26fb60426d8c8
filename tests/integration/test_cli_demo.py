"""`streamtable demo wordcount FILE --bootstrap-servers ...` runs the job and prints the counts."""

import json

from click.testing import CliRunner

from streamtable.cli import cli


def test_demo_wordcount_from_a_text_file(kafka_broker, spark, tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("Hello Kafka Streams\nhello, kafka!\n", encoding="utf-8")
    result = CliRunner().invoke(
        cli,
        [
            "demo",
            "wordcount",
            str(text),
            "--bootstrap-servers",
            kafka_broker.bootstrap_servers,
            "--state-dir",
            str(tmp_path / "state"),
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    figures = json.loads(lines[-1])
    # Java's split("\\W+") on "hello, kafka!" gives ["hello", "kafka"]
    assert figures["words"] == 5 and figures["distinct_words"] == 3
    printed = {tuple(line.split()) for line in lines[:-1]}
    assert {("'kafka'", "2"), ("'hello'", "2"), ("'streams'", "1")} <= printed
