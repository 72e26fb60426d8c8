import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

import streamtable
from streamtable.broker import daemon
from streamtable.broker._node import free_port
from streamtable.cli import cli

pytestmark = pytest.mark.integration

SRC = str(Path(streamtable.__file__).resolve().parent.parent)


@pytest.fixture
def broker_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("STREAMTABLE_BROKER_HOME", str(home))
    yield home
    daemon.stop_background()  # never leave a broker running, whatever failed


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), auto_envvar_prefix="STREAMTABLE", env=env)


def test_start_status_stop(broker_home):
    port = free_port()
    # the port comes from the environment variable fallback
    result = run("broker", "start", env={"STREAMTABLE_BROKER_START_PORT": str(port)})
    assert result.exit_code == 0, result.output
    assert f"bootstrap.servers=127.0.0.1:{port}" in result.output

    status = run("broker", "status", "--json")
    assert status.exit_code == 0, status.output
    info = json.loads(status.output)
    assert info["running"] and info["answers"]
    assert info["bootstrap_servers"] == f"127.0.0.1:{port}"
    assert Path(info["data_dir"]) == (broker_home / "data").resolve()

    again = run("broker", "start")
    assert again.exit_code == 0 and "already running" in again.output

    stop = run("broker", "stop")
    assert stop.exit_code == 0 and "stopped Kafka broker" in stop.output
    status = run("broker", "status")
    assert status.exit_code == 1 and "not running" in status.output
    assert run("broker", "stop").output.startswith("no background Kafka broker")


def test_broker_survives_the_starting_process(broker_home, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "STREAMTABLE_BROKER_HOME": str(broker_home)}
    data_dir = tmp_path / "data"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamtable",
            "broker",
            "start",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the CLI process has exited; the broker still answers
    info = daemon.status()
    assert info["running"] and info["answers"], info
    assert info["data_dir"] == str(data_dir.resolve())
    md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
    assert len(md.brokers) == 1
    assert daemon.stop_background() is not None
    assert not daemon.status()["running"]


def test_port_in_use_is_reported(broker_home):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run("broker", "start", "--port", str(port))
    assert result.exit_code != 0
    assert f"port {port} on 127.0.0.1 is in use" in result.output
