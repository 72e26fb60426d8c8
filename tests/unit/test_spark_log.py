"""The Spark JVM's output goes to a log file: what a child started in the block writes lands
there, and the Python process keeps its own stdout/stderr (no JVM: a shell child stands in)."""

from __future__ import annotations

import subprocess

import pytest

from streamtable.errors import EnvironmentSetupError
from streamtable.runtime import spark_log

pytestmark = pytest.mark.unit


def test_a_child_started_in_the_block_writes_to_the_log_file_for_its_whole_life(tmp_path, capfd):
    log = tmp_path / "logs" / "spark.log"
    go_on = tmp_path / "go-on"
    with spark_log.jvm_output_to(str(log)):
        child = subprocess.Popen(
            [
                "sh",
                "-c",
                f"echo started; echo 'WARN chatter' >&2; "
                f"while [ ! -e {go_on} ]; do sleep 0.05; done; echo 'later line' >&2",
            ]
        )
    print("the driver's own line")
    go_on.touch()
    assert child.wait(30) == 0
    text = log.read_text()
    assert "streamtable starts a Spark session" in text
    assert "started" in text and "WARN chatter" in text and "later line" in text
    out, err = capfd.readouterr()
    assert out == "the driver's own line\n"
    assert "chatter" not in err and "later line" not in err
    assert spark_log.current_spark_log() == str(log)


def test_the_log_file_is_appended_to(tmp_path):
    log = tmp_path / "spark.log"
    log.write_text("an earlier run\n")
    with spark_log.jvm_output_to(str(log)):
        subprocess.run(["sh", "-c", "echo second run >&2"], check=True)
    text = log.read_text()
    assert text.startswith("an earlier run\n") and "second run" in text


def test_stderr_keeps_the_output_on_the_console(tmp_path, capfd):
    with spark_log.jvm_output_to("stderr"):
        subprocess.run(["sh", "-c", "echo on the console >&2"], check=True)
    assert "on the console" in capfd.readouterr().err
    assert not list(tmp_path.iterdir())


def test_an_unwritable_log_path_names_the_file_and_the_config_key(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    target = blocker / "spark.log"  # a directory that is a file
    with pytest.raises(EnvironmentSetupError) as info:
        with spark_log.jvm_output_to(str(target)):
            pass
    message = str(info.value)
    assert f"Cannot write Spark's log file {str(target)!r}" in message
    assert "Set 'streamtable.spark.log' to a writable path" in message
