"""The pure parts of `streamtable reset`, the state-directory lock and the group-offset commits."""

import json
import logging
import threading
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.cli import cli
from streamtable.errors import ConfigError, StateDirLockedError, StreamtableError, TopologyError
from streamtable.runtime.checkpoint import check_fingerprint, reset_command
from streamtable.runtime.group_offsets import GroupOffsetCommitter, processed_offsets
from streamtable.runtime.internal_topics import (
    eos_group_prefix,
    internal_topic_name,
    is_eos_group,
    is_internal_topic,
)
from streamtable.runtime.progress import end_offsets, latest_offsets
from streamtable.runtime.reset import parse_input_topics, parse_reset_datetime, reset_application
from streamtable.runtime.starting_offsets import (
    STARTING_OFFSETS_FILE,
    checkpoint_positions,
    query_checkpoint_positions,
    read_starting_offsets,
    spark_starting_offsets,
    write_starting_offsets,
)
from streamtable.runtime.state_lock import StateDirLock


def topology(store="counts", topics=("in",)):
    b = StreamsBuilder()
    b.stream(
        list(topics), key_serde=Serdes.string(), value_serde=Serdes.string()
    ).group_by_key().count(name=store).to_stream().to("out", value_serde=Serdes.long())
    return b.build()


def run(*args):
    return CliRunner().invoke(cli, list(args))


# --------------------------------------------------------------------------- --to-datetime


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T14:00:00.250+02:00", datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)),
        ("2024-05-01T12:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),  # no offset: UTC
        ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
    ],
)
def test_to_datetime_parses_iso_8601_with_utc_as_default(text, expected):
    parsed = parse_reset_datetime(text)
    assert parsed.tzinfo is not None
    assert parsed == expected


def test_to_datetime_keeps_a_given_offset_and_takes_naive_datetimes_as_utc():
    assert parse_reset_datetime("2024-05-01T14:00:00+02:00").utcoffset() == timedelta(hours=2)
    assert parse_reset_datetime(datetime(2024, 5, 1)) == datetime(2024, 5, 1, tzinfo=UTC)
    aware = datetime(2024, 5, 1, tzinfo=timezone(timedelta(hours=-5)))
    assert parse_reset_datetime(aware) is aware


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01T00:00:00", "01/05/2024", ""])
def test_unparsable_to_datetime_is_named_with_examples(text):
    with pytest.raises(
        ConfigError,
        match=rf"--to-datetime {text!r} is not an ISO-8601 date-time; use e\.g\. "
        r"'2024-05-01T12:00:00Z'",
    ):
        parse_reset_datetime(text)


def test_to_datetime_before_1970_is_refused():
    with pytest.raises(ConfigError, match=r"is before 1970-01-01T00:00:00Z"):
        parse_reset_datetime("1969-12-31T23:59:59Z")


def test_input_topics_split_on_commas_and_repeat():
    assert parse_input_topics(["a,b", " c ", "a"]) == ["a", "b", "c"]
    assert parse_input_topics("x") == ["x"]
    with pytest.raises(ConfigError, match=r"--input-topics names no topic"):
        parse_input_topics([" , "])


# --------------------------------------------------------------------------- internal names


def test_internal_topic_names_and_predicates():
    name = internal_topic_name("wc", "eos-markers-streamtable-internal")
    assert name == "wc-eos-markers-streamtable-internal"
    assert is_internal_topic("wc", name)
    assert is_internal_topic("wc", "wc-counts-changelog")
    assert is_internal_topic("wc", "wc-KSTREAM-AGGREGATE-0000000003-repartition")
    assert not is_internal_topic("wc", "wc-input")
    assert not is_internal_topic("wc", "wc-changelog")  # no name before the suffix
    assert not is_internal_topic("wc", "wcx-counts-changelog")  # another application
    assert not is_internal_topic("wc2", "wc-counts-changelog")
    assert eos_group_prefix("wc") == "wc-eos-"
    assert is_eos_group("wc", "wc-eos-0") and not is_eos_group("wc", "wc")
    with pytest.raises(ValueError, match=r"suffix 'markers' must be a name ending with one of"):
        internal_topic_name("wc", "markers")
    with pytest.raises(ValueError, match=r"application_id must not be empty"):
        internal_topic_name("", "x-changelog")


# --------------------------------------------------------------------------- starting offsets


def test_starting_offsets_file_round_trip_and_spark_option(tmp_path):
    assert read_starting_offsets(tmp_path) == {}
    assert spark_starting_offsets(tmp_path, ["in"], {"in": 2}, "earliest") == "earliest"
    write_starting_offsets(tmp_path, {"in": {0: 5, 1: 7}, "other": {0: 3}})
    assert read_starting_offsets(tmp_path) == {"in": {0: 5, 1: 7}, "other": {0: 3}}
    assert json.loads(spark_starting_offsets(tmp_path, ["in"], {"in": 2}, "earliest")) == {
        "in": {"0": 5, "1": 7}
    }
    # a partition added since, and a topic the file lacks, start from auto.offset.reset
    assert json.loads(
        spark_starting_offsets(tmp_path, ["in", "new"], {"in": 3, "new": 1}, "latest")
    ) == {"in": {"0": 5, "1": 7, "2": -1}, "new": {"0": -1}}
    assert spark_starting_offsets(tmp_path, ["unrelated"], {"unrelated": 1}, "latest") == "latest"


def test_corrupt_starting_offsets_file_is_named(tmp_path):
    (tmp_path / STARTING_OFFSETS_FILE).write_text("[1, 2]")
    with pytest.raises(
        StreamtableError, match=r"starting-offsets.json' is not \{topic: \{partition: offset\}\}"
    ):
        read_starting_offsets(tmp_path)


def _spark_checkpoint(query_dir, batches, committed):
    """A Spark-style checkpoint: offsets/<N> (version, metadata, one line per source)."""
    (query_dir / "offsets").mkdir(parents=True)
    (query_dir / "commits").mkdir()
    for n, sources in batches.items():
        lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})]
        lines += [s if isinstance(s, str) else json.dumps(s) for s in sources]
        (query_dir / "offsets" / str(n)).write_text("\n".join(lines))
        (query_dir / "offsets" / f".{n}.crc").write_text("x")
    for n in committed:
        (query_dir / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_checkpoint_positions_are_the_last_committed_batch_minimum_over_queries(tmp_path):
    _spark_checkpoint(
        tmp_path / "sink-a",
        {
            0: [{"in": {"0": 2, "1": 1}}],
            1: [{"in": {"0": 4, "1": 3}}, "-"],
            2: [{"in": {"0": 9, "1": 9}}],  # planned, not committed
        },
        committed=[0, 1],
    )
    _spark_checkpoint(
        tmp_path / "sink-b",
        {0: [{"in": {"0": 3, "1": 5}}, {"side": {"0": 8}}]},
        committed=[0],
    )
    _spark_checkpoint(tmp_path / "sink-c", {0: [{"in": {"0": 1, "1": 1}}]}, committed=[])
    (tmp_path / "topology.json").write_text("{}")
    assert query_checkpoint_positions(tmp_path / "sink-a") == {"in": {0: 4, 1: 3}}
    assert query_checkpoint_positions(tmp_path / "sink-c") == {}
    assert checkpoint_positions(tmp_path) == {"in": {0: 3, 1: 3}, "side": {0: 8}}
    assert checkpoint_positions(tmp_path / "missing") == {}


# --------------------------------------------------------------------------- state lock


def test_state_dir_lock_is_exclusive_and_names_the_holder(tmp_path):
    import os

    held = StateDirLock(tmp_path / "app").acquire("app")
    assert held.held and StateDirLock(tmp_path / "app").is_locked()
    with pytest.raises(
        StateDirLockedError,
        match=rf"State directory '.*app' of application 'app' is locked by another running "
        rf"instance \(pid {os.getpid()}\)\. Only one instance may use a state directory: stop "
        r"the other instance",
    ):
        StateDirLock(tmp_path / "app").acquire("app")
    held.release()
    held.release()  # idempotent
    assert not StateDirLock(tmp_path / "app").is_locked()
    with StateDirLock(tmp_path / "app").acquire("app") as again:
        assert again.held
    assert not again.held


def test_second_instance_on_a_locked_state_dir_fails_before_any_work(tmp_path):
    config = {
        "application.id": "app",
        "bootstrap.servers": "127.0.0.1:1",
        "state.dir": str(tmp_path),
    }
    app = KafkaStreams(topology(), config)
    with StateDirLock(tmp_path / "app").acquire("app"):
        with pytest.raises(StateDirLockedError, match=r"is locked by another running instance"):
            app.start()
        assert app.state.value == "CREATED"
        with pytest.raises(StateDirLockedError, match=r"cleanup\(\) refused: the state directory"):
            app.cleanup()
    assert (tmp_path / "app").exists()
    app.cleanup()
    assert not (tmp_path / "app").exists()


def test_failed_start_releases_the_lock(tmp_path):
    config = {
        "application.id": "app",
        "bootstrap.servers": "127.0.0.1:1",
        "state.dir": str(tmp_path),
        "request.timeout.ms": 1000,
    }
    with pytest.raises(StreamtableError, match=r"No Kafka broker answered"):
        KafkaStreams(topology(), config).start()
    assert not StateDirLock(tmp_path / "app").is_locked()


# --------------------------------------------------------------------------- reset refusals


def test_reset_never_deletes_a_topic_the_application_reads_named_like_an_internal_one(
    tmp_path, monkeypatch
):
    # StreamsResetter leaves input topics out of the internal topics it deletes (KAFKA-7930):
    # `orders` reads `orders-cdc-changelog` (rewound) and `orders-feed-changelog` (recorded in
    # its topology.json), both named like its changelogs by chance
    import streamtable.runtime.reset as reset_module

    calls: dict[str, object] = {}

    class Admin:
        def __init__(self, *args, **kwargs):
            pass

        def topic_partitions(self, topics=None):
            names = ["orders-cdc-changelog", "orders-feed-changelog", "orders-count-repartition"]
            return dict.fromkeys(names + ["out"], 1)

        def list_offsets(self, wanted, spec, what):
            return {(t, p): 0 for t, n in wanted.items() for p in range(n)}

        def consumer_groups(self):
            return []

        def alter_group_offsets(self, group, offsets):
            calls["offsets"] = offsets

        def delete_topics(self, topics):
            calls["deleted"] = topics

        def delete_consumer_groups(self, groups):
            pass

    app_dir = tmp_path / "orders"
    app_dir.mkdir()
    (app_dir / "topology.json").write_text(
        json.dumps({"sources": ["orders-cdc-changelog", "orders-feed-changelog"]})
    )
    monkeypatch.setattr(reset_module, "KafkaAdmin", Admin)
    config = {"application.id": "orders", "bootstrap.servers": "x:1", "state.dir": str(tmp_path)}
    result = reset_application(config, ["orders-cdc-changelog"])
    assert result.deleted_topics == calls["deleted"] == ["orders-count-repartition"]
    assert calls["offsets"] == {("orders-cdc-changelog", 0): 0}


def test_reset_refuses_a_running_application(tmp_path):
    config = {
        "application.id": "app",
        "bootstrap.servers": "127.0.0.1:1",
        "state.dir": str(tmp_path),
    }
    with StateDirLock(tmp_path / "app").acquire("app"):
        for dry_run in (False, True):
            with pytest.raises(
                StateDirLockedError,
                match=r"Application 'app' is still running: its state directory .* is locked by "
                r"process .*Stop the application first",
            ):
                reset_application(config, ["in"], dry_run=dry_run)
        result = run(
            "reset",
            "--application-id",
            "app",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--input-topics",
            "in",
            "--state-dir",
            str(tmp_path),
        )
    assert result.exit_code == 1
    assert "Error: Application 'app' is still running" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_reset_cli_refuses_a_bad_datetime_and_both_targets(tmp_path):
    base = ["reset", "--application-id", "app", "--bootstrap-servers", "127.0.0.1:1"]
    base += ["--input-topics", "in", "--state-dir", str(tmp_path)]
    result = run(*base, "--to-datetime", "last tuesday")
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: --to-datetime 'last tuesday' is not an ISO-8601 date-time; use e.g. "
        "'2024-05-01T12:00:00Z', '2024-05-01T14:00:00.000+02:00' or '2024-05-01' (UTC when no "
        "offset is given)."
    )
    result = run(*base, "--to-earliest", "--to-datetime", "2024-05-01")
    assert result.exit_code == 2
    assert "--to-earliest and --to-datetime exclude each other" in result.output
    result = run(*base, "-c", "bootstrap.server=x:1")
    assert result.exit_code == 1 and "Unknown config key 'bootstrap.server'" in result.output
    assert not (tmp_path / "app").exists()  # nothing was created by a refused reset


def test_reset_cli_reports_an_unreachable_broker(tmp_path):
    from streamtable.broker._node import free_port

    port = free_port()  # nothing listens there
    result = run(
        "reset",
        "--application-id",
        "app",
        "--bootstrap-servers",
        f"127.0.0.1:{port}",
        "--input-topics",
        "in",
        "--state-dir",
        str(tmp_path),
        "-c",
        "request.timeout.ms=1500",
    )
    assert result.exit_code == 1
    assert result.output.startswith(
        f"Error: No Kafka broker answered at bootstrap.servers='127.0.0.1:{port}' within 1.5 s"
    )
    assert not StateDirLock(tmp_path / "app").is_locked()


# --------------------------------------------------------------------------- fingerprint


def test_reset_command_and_incompatible_restart_message(tmp_path):
    t = topology(topics=("a", "b"))
    assert reset_command(t, "app", "k:9092") == (
        "streamtable reset --application-id app --bootstrap-servers k:9092 --input-topics a,b"
    )
    assert reset_command(t, "app", "k:9092", str(tmp_path)).endswith(f"--state-dir {tmp_path}")
    assert "HOST:PORT" in reset_command(t, "app")
    check_fingerprint(tmp_path, topology("counts", ("a", "b")), "app")
    with pytest.raises(TopologyError) as err:
        check_fingerprint(
            tmp_path,
            topology("renamed", ("a", "b")),
            "app",
            bootstrap_servers="k:9092",
            state_dir=str(tmp_path / "x y"),
        )
    assert (
        "run `streamtable reset --application-id app --bootstrap-servers k:9092 "
        f"--input-topics a,b --state-dir '{tmp_path / 'x y'}'`"
    ) in str(err.value)
    assert "Kafka Streams, too, needs an application reset" in str(err.value)


# --------------------------------------------------------------------------- group offsets


def progress(*sources):
    return SimpleNamespace(sources=[SimpleNamespace(endOffset=json.dumps(s)) for s in sources])


def query(p):
    return SimpleNamespace(lastProgress=p)


class FakeConsumer:
    def __init__(self, conf, log, fail=None):
        self.conf, self.log, self.fail = conf, log, fail
        self.closed = False

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        if self.fail:
            raise self.fail
        self.log.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def close(self):
        self.closed = True


def test_processed_offsets_are_the_minimum_over_the_queries_reading_a_topic():
    a = progress({"in": {"0": 5, "1": 7}}, {"side": {"0": 2}})
    b = progress({"in": {"0": 6, "1": 4}})
    assert processed_offsets([a, b]) == {("in", 0): 5, ("in", 1): 4, ("side", 0): 2}
    assert processed_offsets([a, None]) is None  # a query has not reported: unknown
    assert processed_offsets([]) == {}


def test_a_topic_read_by_two_sources_of_one_query_counts_as_processed_up_to_the_smaller():
    """A stream merged with a branch of itself is two Kafka sources of one topic, each with
    its own end offsets: the offset to commit (and to purge a repartition topic up to) is the
    one both have read, not the last source's.
    """
    both = progress({"rep": {"0": 100, "1": 9}}, {"rep": {"0": 105, "1": 7}})
    assert processed_offsets([both]) == {("rep", 0): 100, ("rep", 1): 7}
    assert end_offsets(both) == {("rep", 0): 100, ("rep", 1): 7}
    latest = SimpleNamespace(
        sources=[
            SimpleNamespace(latestOffset=json.dumps({"rep": {"0": 110}})),
            SimpleNamespace(latestOffset=json.dumps({"rep": {"0": 108}})),
        ]
    )
    assert latest_offsets(latest) == {("rep", 0): 110}


def test_checkpoint_positions_of_a_topic_read_by_two_sources_are_the_smaller(tmp_path):
    _spark_checkpoint(
        tmp_path / "sink-a",
        {0: [{"rep": {"0": 100, "1": 9}}, {"rep": {"0": 105, "1": 7}}]},
        committed=[0],
    )
    assert query_checkpoint_positions(tmp_path / "sink-a") == {"rep": {0: 100, 1: 7}}


def test_group_offsets_commit_only_changes_and_use_the_group_id():
    commits, made = [], []

    def factory(conf):
        made.append(FakeConsumer(conf, commits))
        return made[-1]

    c = GroupOffsetCommitter(
        "app", "k:9092", {"security.protocol": "SSL"}, consumer_factory=factory
    )
    q1, q2 = query(progress({"in": {"0": 5, "1": 7}})), query(progress({"in": {"0": 6, "1": 4}}))
    c.update([q1, q2])
    assert c.flush(5)
    c.update([q1, q2])  # unchanged: no commit
    assert c.flush(5)
    q2.lastProgress = progress({"in": {"0": 6, "1": 9}})
    c.update([q1, q2])
    assert c.close(5)
    assert commits == [{("in", 0): 5, ("in", 1): 4}, {("in", 1): 7}]
    assert c.committed == {("in", 0): 5, ("in", 1): 7}
    assert len(made) == 1 and made[0].closed
    assert made[0].conf == {
        "bootstrap.servers": "k:9092",
        "log_level": 2,  # librdkafka's errors stay off the console; failures are logged once
        "security.protocol": "SSL",
        "group.id": "app",
        "enable.auto.commit": False,
    }
    c.update([q1, q2])  # after close: ignored, no error


def test_group_offset_failures_are_logged_never_raised(caplog):
    def factory(conf):
        return FakeConsumer(conf, [], fail=RuntimeError("coordinator not available"))

    class Broken:
        @property
        def lastProgress(self):
            raise RuntimeError("query is gone")

    c = GroupOffsetCommitter("app", "k:9092", consumer_factory=factory)
    with caplog.at_level(logging.WARNING, logger="streamtable"):
        c.update([Broken()])
        c.update([query(progress({"in": {"0": 1}}))])
        assert c.flush(5)
        c.update([query(progress({"in": {"0": 1}}))])  # retried: not committed yet
        assert c.close(5)
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not read the queries' progress: query is gone" in m for m in messages)
    warned = [m for m in messages if "coordinator not available" in m]
    assert len(warned) == 1  # the same failure is logged once
    assert "could not commit offsets to consumer group 'app'" in warned[0]
    assert c.committed == {}


def test_a_retriable_commit_error_is_tried_again(monkeypatch):
    from confluent_kafka import KafkaError, KafkaException

    from streamtable.runtime import group_offsets

    monkeypatch.setattr(group_offsets, "_COMMIT_BACKOFF_S", 0.0)
    commits = []

    class LoadingCoordinator(FakeConsumer):
        failures = 2

        def commit(self, offsets, asynchronous):
            if self.failures:
                self.failures -= 1
                raise KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
            super().commit(offsets, asynchronous)

    c = GroupOffsetCommitter(
        "app", "k:9092", consumer_factory=lambda conf: LoadingCoordinator(conf, commits)
    )
    c.update([query(progress({"in": {"0": 3}}))])
    assert c.close(5)
    assert commits == [{("in", 0): 3}]
    assert c.committed == {("in", 0): 3}


def test_group_offsets_do_not_block_the_caller():
    gate = threading.Event()

    class Slow(FakeConsumer):
        def commit(self, offsets, asynchronous):
            gate.wait(10)

    c = GroupOffsetCommitter("app", "k:9092", consumer_factory=lambda conf: Slow(conf, []))
    c.update([query(progress({"in": {"0": 1}}))])  # returns although the commit hangs
    assert not c.flush(0.2)
    assert not c.close(0.2)
    gate.set()
