"""``streamtable upgrade --dry-run``: which versions restart from the checkpoints (no JVM: the
checkpoints are the files a run leaves, written here by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from streamtable import Serdes, StreamsBuilder, TimeWindows
from streamtable.cli import cli
from streamtable.config import StreamsConfig
from streamtable.runtime.checkpoint import check_fingerprint
from streamtable.runtime.upgrade import QueryUpgrade, check_upgrade

pytestmark = pytest.mark.unit

S = Serdes.string()


def version(*, extra_sink: bool = False, step_before_sink: bool = False, windowed: bool = False):
    b = StreamsBuilder()
    events = b.stream("events", key_serde=S, value_serde=S)
    grouped = events.group_by_key()
    if windowed:
        counts = grouped.windowed_by(TimeWindows.of_size_with_no_grace(60_000)).count(name="n")
        counts.to_stream().map(lambda k, v: (k.key, v)).to("counts", value_serde=Serdes.long())
    else:
        counts = grouped.count(name="n").to_stream()
        if step_before_sink:
            counts = counts.map_values(lambda v: v * 10)
        counts.to("counts", value_serde=Serdes.long())
    events.filter(lambda k, v: v != "").to("audit-copy", name="copy-sink")
    if extra_sink:
        events.map_values(str.upper).to("shouted", name="shout-sink")
    return b.build()


def config(tmp_path: Path, **extra) -> StreamsConfig:
    return StreamsConfig.from_mapping(
        {
            "application.id": "app",
            "bootstrap.servers": "k:9092",
            "state.dir": str(tmp_path),
            **extra,
        }
    )


def ran(tmp_path: Path, topology, committed: dict[str, int]) -> None:
    """Leave what a run of ``topology`` leaves: the fingerprint and each query's batch files."""
    cfg = config(tmp_path)
    check_fingerprint(Path(cfg.checkpoint_dir), topology, "app")
    for name, last in committed.items():
        for part in ("offsets", "commits"):
            folder = Path(cfg.checkpoint_dir) / name / part
            folder.mkdir(parents=True)
            for batch in range(last + 1):
                (folder / str(batch)).write_text("v1\n{}")


def query_names(topology) -> list[str]:
    from streamtable.runtime.checkpoint import query_outputs

    return list(query_outputs(topology))


def test_the_same_version_resumes_every_query_after_its_last_committed_batch(tmp_path):
    v1 = version()
    counts_sink, copy_sink = query_names(v1)
    ran(tmp_path, v1, {counts_sink: 4, copy_sink: 2})
    report = check_upgrade(version(), config(tmp_path))
    assert report.compatible and not report.first_run
    assert report.queries == (
        QueryUpgrade(counts_sink, "resumes", "from its checkpoint, after batch 4"),
        QueryUpgrade("copy-sink", "resumes", "from its checkpoint, after batch 2"),
    )


def test_a_new_sink_is_a_new_query_reading_from_auto_offset_reset(tmp_path):
    v1 = version()
    ran(tmp_path, v1, dict.fromkeys(query_names(v1), 1))
    report = check_upgrade(
        version(extra_sink=True), config(tmp_path, **{"auto.offset.reset": "latest"})
    )
    assert report.compatible
    new = [q for q in report.queries if q.action == "new"]
    assert new == [
        QueryUpgrade(
            "shout-sink",
            "new",
            "no checkpoint: reads its input from auto.offset.reset='latest' and writes "
            "topic shouted from there",
        )
    ]
    assert [q.action for q in report.queries].count("resumes") == 2


def test_a_step_before_a_generated_sink_name_takes_over_the_old_checkpoint(tmp_path):
    v1 = version()
    old_counts_sink = query_names(v1)[0]
    ran(tmp_path, v1, dict.fromkeys(query_names(v1), 3))
    v2 = version(step_before_sink=True)
    report = check_upgrade(v2, config(tmp_path))
    assert report.compatible  # same stateful operators: Spark's state is reused
    new_counts_sink = query_names(v2)[0]
    assert new_counts_sink != old_counts_sink
    assert report.queries == (
        QueryUpgrade(
            new_counts_sink,
            "resumes",
            f"from the checkpoint of query {old_counts_sink!r} (it wrote the same topic counts; "
            "its generated name changed), after batch 3",
        ),
        QueryUpgrade("copy-sink", "resumes", "from its checkpoint, after batch 3"),
    )
    text = report.text()
    assert text.splitlines()[0].endswith("compatible; a restart resumes from the checkpoints.")


def test_under_exactly_once_an_interrupted_batch_blocks_the_take_over(tmp_path):
    v1 = version()
    old_counts_sink = query_names(v1)[0]
    ran(tmp_path, v1, dict.fromkeys(query_names(v1), 3))
    # batch 4 started (offsets written, even without new records) but never committed
    (Path(config(tmp_path).checkpoint_dir) / old_counts_sink / "offsets" / "4").write_text("v1\n{}")
    v2 = version(step_before_sink=True)
    at_least_once = check_upgrade(v2, config(tmp_path))
    assert at_least_once.compatible  # a re-run batch may write twice anyway
    assert [q.action for q in at_least_once.queries] == ["resumes", "resumes"]
    eos = check_upgrade(v2, config(tmp_path, **{"processing.guarantee": "exactly_once_v2"}))
    assert not eos.compatible and eos.reset is None
    assert eos.changes == (
        f"query {query_names(v2)[0]} would take over the checkpoint of query {old_counts_sink} "
        "(same topic counts; its generated name changed), whose last micro-batch was "
        "interrupted: start the previous version once and stop it after its first "
        "micro-batch, or name the sink in both versions",
    )
    assert "to start over" not in eos.text()


def test_start_takes_over_with_a_link_and_the_old_name_is_not_reported_unused(tmp_path):
    from streamtable.runtime.checkpoint_adoption import adopt_renamed_checkpoints

    v1 = version()
    old_counts_sink = query_names(v1)[0]
    ran(tmp_path, v1, dict.fromkeys(query_names(v1), 3))
    v2 = version(step_before_sink=True)
    new_counts_sink = query_names(v2)[0]
    assert adopt_renamed_checkpoints(v2, config(tmp_path)) == {new_counts_sink: old_counts_sink}
    link = Path(config(tmp_path).checkpoint_dir) / new_counts_sink
    assert link.is_symlink() and link.resolve().name == old_counts_sink
    check_fingerprint(Path(config(tmp_path).checkpoint_dir), v2, "app")  # start records v2
    report = check_upgrade(v2, config(tmp_path))
    assert [(q.name, q.action) for q in report.queries] == [
        (new_counts_sink, "resumes"),
        ("copy-sink", "resumes"),
    ]
    # a second start with the same version takes nothing over again
    assert adopt_renamed_checkpoints(v2, config(tmp_path)) == {}


def test_start_refuses_a_take_over_of_an_interrupted_batch_under_exactly_once(tmp_path):
    from streamtable.errors import TopologyError
    from streamtable.runtime.checkpoint_adoption import adopt_renamed_checkpoints

    v1 = version()
    old_counts_sink = query_names(v1)[0]
    ran(tmp_path, v1, dict.fromkeys(query_names(v1), 3))
    (Path(config(tmp_path).checkpoint_dir) / old_counts_sink / "offsets" / "4").write_text("v1")
    eos = config(tmp_path, **{"processing.guarantee": "exactly_once_v2"})
    with pytest.raises(TopologyError, match=r"last micro-batch was interrupted: under exactly"):
        adopt_renamed_checkpoints(version(step_before_sink=True), eos)
    assert not (Path(eos.checkpoint_dir) / query_names(version(step_before_sink=True))[0]).exists()


def test_renamed_queries_needs_one_writer_of_the_output_in_each_version():
    from streamtable.runtime.checkpoint_adoption import renamed_queries

    existing = ["old-a", "old-b"]
    # two old queries wrote the topic: ambiguous
    assert (
        renamed_queries(
            existing, ["new"], {"old-a": "topic t", "old-b": "topic t"}, {"new": "topic t"}
        )
        == {}
    )
    # two new queries write it: ambiguous
    assert (
        renamed_queries(
            existing, ["n1", "n2"], {"old-a": "topic t"}, {"n1": "topic t", "n2": "topic t"}
        )
        == {}
    )
    # a foreach has no identity
    assert renamed_queries(existing, ["new"], {"old-a": "foreach"}, {"new": "foreach"}) == {}
    # the old query still exists under its name: it keeps its checkpoint
    assert (
        renamed_queries(
            existing, ["old-a", "new"], {"old-a": "topic t"}, {"old-a": "topic u", "new": "topic t"}
        )
        == {}
    )
    assert renamed_queries(existing, ["new"], {"old-a": "files /x"}, {"new": "files /x"}) == {
        "new": "old-a"
    }


def test_a_changed_stateful_operator_is_incompatible_with_the_reset_command(tmp_path):
    v1 = version()
    ran(tmp_path, v1, dict.fromkeys(query_names(v1), 0))
    report = check_upgrade(version(windowed=True), config(tmp_path), bootstrap_servers="k:9092")
    assert not report.compatible and report.queries == ()
    assert len(report.changes) == 1 and report.changes[0].startswith("stateful operators ")
    assert report.reset == (
        f"streamtable reset --application-id app --bootstrap-servers k:9092 "
        f"--input-topics events --state-dir {tmp_path}"
    )
    lines = report.text().splitlines()
    assert lines[0].endswith("INCOMPATIBLE with its checkpoints; a restart is refused.")
    assert lines[-1] == f"  to start over: stop every instance, then `{report.reset}`"


def test_no_checkpoint_is_a_first_run(tmp_path):
    report = check_upgrade(version(), config(tmp_path))
    assert report.first_run and report.compatible
    assert report.text().endswith("no checkpoint yet; this version starts from scratch.")


APP = """
from streamtable import Serdes, StreamsBuilder

b = StreamsBuilder()
b.stream("events", key_serde=Serdes.string(), value_serde=Serdes.string()){step}.to("out")
topology = b.build()
"""


def test_the_command_exits_0_when_compatible_and_1_when_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v1.py").write_text(APP.format(step=""))
    (tmp_path / "v2.py").write_text(APP.format(step=".group_by_key().count().to_stream()"))
    from streamtable._locator import load_topology

    ran(tmp_path / "state", load_topology("v1:topology"), {})
    args = ["upgrade", "--application-id", "app", "--state-dir", str(tmp_path / "state")]
    same = CliRunner().invoke(cli, [*args, "v1:topology", "--dry-run"])
    assert same.exit_code == 0, same.output
    assert "compatible; a restart resumes from the checkpoints." in same.output
    changed = CliRunner().invoke(cli, [*args, "v2:topology", "--dry-run"])
    assert changed.exit_code == 1
    assert "INCOMPATIBLE with its checkpoints" in changed.output
    assert "stateful operators [] -> " in changed.output
    no_flag = CliRunner().invoke(cli, [*args, "v1:topology"])
    assert no_flag.exit_code == 2
    assert "streamtable upgrade only checks (--dry-run)" in no_flag.output


def test_each_stateful_query_resumes_on_the_state_partitions_its_checkpoint_keeps(tmp_path):
    v1 = version()
    counts_sink, copy_sink = query_names(v1)
    ran(tmp_path, v1, {counts_sink: 1, copy_sink: 1})
    for name in (counts_sink, copy_sink):  # as Spark records it in each offset log entry
        (Path(config(tmp_path).checkpoint_dir) / name / "offsets" / "1").write_text(
            'v1\n{"batchWatermarkMs":0,"conf":{"spark.sql.shuffle.partitions":"4"}}\n-'
        )
    (Path(config(tmp_path).checkpoint_dir) / counts_sink / "state").mkdir()  # the count's
    # whatever streamtable.shuffle.partitions says (start() warns when it differs)
    report = check_upgrade(version(), config(tmp_path, **{"streamtable.shuffle.partitions": 8}))
    assert report.compatible
    assert set(report.queries) == {
        QueryUpgrade(
            counts_sink, "resumes", "from its checkpoint, after batch 1, on its 4 state partitions"
        ),
        QueryUpgrade(copy_sink, "resumes", "from its checkpoint, after batch 1"),  # stateless
    }
