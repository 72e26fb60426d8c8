"""``streamtable cluster start|status|stop``: a real background Spark standalone cluster."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from streamtable.cli import cli
from streamtable.platform import spark_cluster_daemon
from streamtable.platform._process import pid_alive, read_state, write_state

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("STREAMTABLE_CLUSTER_HOME", str(home))
    yield home
    spark_cluster_daemon.stop_background()  # never leave a cluster running, whatever failed


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), auto_envvar_prefix="STREAMTABLE", env=env)


def test_start_status_stop(cluster_home):
    # --memory-per-worker comes from the environment variable fallback
    result = run(
        "cluster",
        "start",
        "--workers",
        "1",
        env={"STREAMTABLE_CLUSTER_START_MEMORY_PER_WORKER": "1g"},
    )
    assert result.exit_code == 0, result.output
    assert "Spark cluster started: spark.master=spark://127.0.0.1:" in result.output
    assert "(1 worker(s) x 1 core(s), 1g;" in result.output
    assert f"logs: {cluster_home / 'cluster'}" in result.output

    status = run("cluster", "status", "--json")
    assert status.exit_code == 0, status.output
    info = json.loads(status.output)
    assert info["running"] and info["answers"]
    assert info["alive_workers"] == 1
    [worker] = info["workers"]
    assert worker["state"] == "ALIVE" and worker["running"]
    assert (worker["cores"], worker["memory_mib"]) == (1, 1024)
    assert info["master_url"] in result.output

    text = run("cluster", "status")
    assert text.exit_code == 0
    assert f"running: spark.master={info['master_url']}" in text.output
    assert f"worker 0: ALIVE at 127.0.0.1:{worker['port']} (1 core(s), 1024 MiB;" in text.output

    again = run("cluster", "start", "--workers", "2")
    assert again.exit_code == 0
    assert f"Spark cluster already running: spark.master={info['master_url']}" in again.output
    assert "note: it has 1 worker(s), not 2; stop it first to change that" in again.output

    state = read_state(cluster_home / "state.json")
    stopped = run("cluster", "stop")
    assert stopped.exit_code == 0
    assert f"stopped Spark cluster {info['master_url']}" in stopped.output
    assert not pid_alive(info["master_pid"]) and not pid_alive(worker["pid"])

    # a state file left by a cluster that is gone: not running, nothing to stop
    assert state is not None
    write_state(cluster_home / "state.json", state)
    assert run("cluster", "status").output == "not running\n"
    assert run("cluster", "stop").output == "no background Spark cluster is running\n"
