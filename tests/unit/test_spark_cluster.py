"""The Spark cluster's arguments and the ``streamtable cluster`` commands without a cluster."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from streamtable.cli import cli
from streamtable.errors import ConfigError
from streamtable.platform import SparkClusterError, SparkStandaloneCluster
from streamtable.platform.spark_cluster import parse_memory


@pytest.fixture
def cluster_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("STREAMTABLE_CLUSTER_HOME", str(home))
    return home


def run(*args):
    return CliRunner().invoke(cli, list(args), auto_envvar_prefix="STREAMTABLE")


@pytest.mark.parametrize(
    ("text", "mib"), [("2g", 2048), ("512m", 512), ("512M", 512), ("1024", 1024), ("1t", 1 << 20)]
)
def test_parse_memory(text, mib):
    assert parse_memory(text) == mib


@pytest.mark.parametrize("text", ["", "lots", "2x", "-1g", "0m", "100k"])
def test_parse_memory_refuses_what_spark_would(text):
    with pytest.raises(ConfigError, match="memory per worker must be a size such as '2g'"):
        parse_memory(text)


def test_cluster_arguments_are_checked_when_it_is_made():
    with pytest.raises(ConfigError, match="at least 1 worker; got workers=0"):
        SparkStandaloneCluster(workers=0)
    with pytest.raises(ConfigError, match="cores_per_worker must be at least 1; got 0"):
        SparkStandaloneCluster(cores_per_worker=0)
    with pytest.raises(ConfigError, match="got 'two gigs'"):
        SparkStandaloneCluster(memory_per_worker="two gigs")


def test_a_cluster_not_started_has_no_master_url():
    cluster = SparkStandaloneCluster()
    with pytest.raises(SparkClusterError, match="has not been started; no master yet"):
        _ = cluster.master_url
    with pytest.raises(SparkClusterError, match="is not running; call start"):
        cluster.kill_worker(0)


def test_stop_when_no_cluster_runs(cluster_home):
    result = run("cluster", "stop")
    assert result.exit_code == 0, result.output
    assert result.output == "no background Spark cluster is running\n"


def test_status_when_no_cluster_runs(cluster_home):
    result = run("cluster", "status")
    assert result.exit_code == 1
    assert result.output == "not running\n"
    as_json = json.loads(run("cluster", "status", "--json").output)
    assert as_json["running"] is False
    assert as_json["state_file"] == str(cluster_home / "state.json")


def test_start_refuses_bad_memory_before_starting_anything(cluster_home):
    result = run("cluster", "start", "--memory-per-worker", "lots")
    assert result.exit_code == 1
    assert "memory per worker must be a size such as '2g' or '512m'" in result.output
    assert not (cluster_home / "state.json").exists()
