"""processing.guarantee=exactly_once_v2: transactional output, replays write nothing twice."""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest

from _support import (
    ensure_topics,
    kafka_client_threads,
    kafka_clients_alive,
    produce_records,
    producers_held_by,
    read_topic,
    wait_until,
)
from streamtable import KafkaStreams, Serdes, StreamsBuilder
from streamtable.runtime.task_output import (
    OutputSpec,
    TaskCoordinates,
    TaskOutput,
    marker_topic,
)


def _topology(src: str, echo: str, sums: str):
    b = StreamsBuilder()
    s = b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.long())
    s.map_values(lambda v: v * 10).to(echo, value_serde=Serdes.long())
    (
        s.group_by_key()
        .reduce(lambda a, v: a + v, name="Sums")
        .to_stream()
        .to(sums, value_serde=Serdes.long())
    )
    return b.build()


def test_exactly_once_output_is_transactional_and_carries_event_time(
    kafka_broker, spark, topic_name, app_config
):
    bs = kafka_broker.bootstrap_servers
    src, echo, sums = topic_name("in"), topic_name("echo"), topic_name("sums")
    ensure_topics(bs, {src: 2, echo: 2, sums: 2})
    records = [(f"k{i % 7}".encode(), struct.pack(">q", i), 1_000_000 + i * 10) for i in range(500)]
    produce_records(bs, src, records)
    cfg = app_config(**{"processing.guarantee": "exactly_once_v2"})
    app = KafkaStreams(_topology(src, echo, sums), cfg)
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
    finally:
        app.close()
    out = read_topic(bs, echo)
    # every input exactly once, with its event time as the record timestamp
    assert sorted((k, struct.unpack(">q", v)[0], ts) for k, v, ts in out) == sorted(
        (k, struct.unpack(">q", v)[0] * 10, ts) for k, v, ts in records
    )
    totals: dict[bytes, int] = {}
    seen: dict[bytes, list[int]] = {}
    for k, v, _ in read_topic(bs, sums):
        seen.setdefault(k, []).append(struct.unpack(">q", v)[0])
    for k, v, _ in records:
        totals[k] = totals.get(k, 0) + struct.unpack(">q", v)[0]
    assert {k: vs[-1] for k, vs in seen.items()} == totals
    for vs in seen.values():  # running sums of non-negative values: no update emitted twice
        assert len(vs) == len(set(vs)) or vs.count(0) > 1
    assert marker_topic(cfg["application.id"]) in kafka_broker.topics()


def test_a_stream_merged_with_a_branch_of_itself_is_refused_and_the_named_remedy_works(
    kafka_broker, spark, topic_name, app_config
):
    """Two branches of one stream merged again: Spark would read the topic through two scans
    in one query, two tasks of a micro-batch holding the same source partition and sharing
    its transaction (the second found the batch written and wrote nothing: half the output
    was lost). Refused before anything runs; the remedy the message names, a
    repartition(num_partitions=...) on one branch, writes every record once.
    """
    from streamtable.errors import TopologyError

    bs = kafka_broker.bootstrap_servers
    src, out = topic_name("in"), topic_name("out")
    ensure_topics(bs, {src: 2, out: 2})
    records = [(f"k{i % 7}".encode(), struct.pack(">q", i), 1_000_000 + i) for i in range(400)]
    produce_records(bs, src, records)

    def topology(*, cut):
        b = StreamsBuilder()
        s = b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.long())
        odd = s.filter(lambda k, v: v % 2 == 1).map_values(lambda v: -v)
        if cut:
            odd = odd.repartition(
                key_serde=Serdes.string(), value_serde=Serdes.long(), num_partitions=2
            )
        s.filter(lambda k, v: v % 2 == 0).merge(odd).to(out, value_serde=Serdes.long())
        return b.build()

    config = app_config(**{"processing.guarantee": "exactly_once_v2"})
    app = KafkaStreams(topology(cut=False), config)
    with pytest.raises(
        TopologyError,
        match=rf"MergeNode '.*' unites inputs that each read topic\(s\) \['{src}'\] in the "
        rf"query writing '{out}', which exactly_once_v2 cannot write exactly once yet .* Put "
        r"\.repartition\(num_partitions=n\) on one of the inputs",
    ):
        app.start()
    assert app.queries == []
    # a count after the union shuffles before the sink, but dead letters are written before it
    dlq, counts = topic_name("dlq"), topic_name("counts")
    ensure_topics(bs, {dlq: 1, counts: 2})
    b = StreamsBuilder()
    s = b.stream(src, key_serde=Serdes.string(), value_serde=Serdes.long())
    s.filter(lambda k, v: v % 2 == 0).merge(
        s.filter(lambda k, v: v % 2 == 1)
    ).group_by_key().count().to_stream().to(counts, value_serde=Serdes.long())
    app = KafkaStreams(b.build(), {**config, "errors.dead.letter.queue.topic.name": dlq})
    with pytest.raises(
        TopologyError,
        match=rf"MergeNode '.*' unites inputs that each read topic\(s\) \['{src}'\] in one "
        rf"query, and its dead letters \('errors.dead.letter.queue.topic.name'='{dlq}'\) "
        r"cannot be written exactly once then",
    ):
        app.start()
    assert app.queries == []
    app = KafkaStreams(topology(cut=True), config)
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
    finally:
        app.close()
    written = sorted(struct.unpack(">q", v)[0] for _, v, _ in read_topic(bs, out))
    assert written == sorted(i if i % 2 == 0 else -i for i in range(400))


def test_a_closed_application_holds_no_kafka_client(kafka_broker, spark, topic_name, app_config):
    # Kafka Streams' close() closes its clients. One that a closed application kept (it stays
    # referenced until the program ends) would log the broker's shutdown on the console.
    bs = kafka_broker.bootstrap_servers
    src, echo, sums = topic_name("in"), topic_name("echo"), topic_name("sums")
    ensure_topics(bs, {src: 1, echo: 1, sums: 1})
    produce_records(bs, src, [(b"k", struct.pack(">q", 1), 1_000_000)])
    before = kafka_clients_alive()
    app = KafkaStreams(
        _topology(src, echo, sums), app_config(**{"processing.guarantee": "exactly_once_v2"})
    )
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
        assert kafka_clients_alive() > before  # the count sees the application's clients
    finally:
        app.close()
    wait_until(
        lambda: kafka_clients_alive() <= before,  # (a client of an earlier test may go too)
        10,
        lambda: f"{kafka_clients_alive() - before} Kafka client(s) alive after close()",
    )


def test_a_replayed_batch_is_not_written_again(kafka_broker, topic_name):
    bs = kafka_broker.bootstrap_servers
    out_topic = topic_name("out")
    app = f"replay-{topic_name('app')}"
    ensure_topics(bs, {out_topic: 1, marker_topic(app): 1})
    spec = OutputSpec(app, "q.sink", {"bootstrap.servers": bs}, guarantee="exactly_once_v2")

    def write(batch: int, query: str, values: list[int]) -> bool:
        out = TaskOutput(spec, TaskCoordinates(0, batch, query))
        for v in values:
            out.produce(out_topic, b"k", struct.pack(">q", v))
        replayed = out.replayed
        out.close()
        return replayed

    assert write(0, "query-a", [1, 2]) is False
    assert write(0, "query-a", [1, 2]) is True  # the replay of batch 0 skips
    assert write(1, "query-a", [3]) is False
    # a new checkpoint (new Spark query id) starts counting batches again: not skipped
    assert write(0, "query-b", [4]) is False
    # a task that fails before commit leaves nothing visible, and its retry writes once
    failed = TaskOutput(spec, TaskCoordinates(0, 1, "query-b"))
    failed.produce(out_topic, b"k", struct.pack(">q", 99))
    failed.abort()
    assert write(1, "query-b", [5]) is False
    values = [struct.unpack(">q", v)[0] for _, v, _ in read_topic(bs, out_topic)]
    assert values == [1, 2, 3, 4, 5]


def _zombie_and_retry(bs, topic_name, app, *, zombie_delivered=False):
    """Two attempts of one task (the same transactional id), each with one record written:
    the second's producer fenced the first's. Returns (output topic, zombie, retry).

    With ``zombie_delivered``, the zombie's record reached the broker before the fencing, so
    the zombie learns of it when it commits (else it may learn it from its own delivery).
    """
    out_topic = topic_name("out")
    ensure_topics(bs, {out_topic: 1, marker_topic(app): 1})
    spec = OutputSpec(app, "q.sink", {"bootstrap.servers": bs}, guarantee="exactly_once_v2")
    zombie = TaskOutput(spec, TaskCoordinates(0, 0, "q"))
    zombie.produce(out_topic, b"k", b"zombie")
    if zombie_delivered:
        assert zombie._producer.flush(30) == 0
    retry = TaskOutput(spec, TaskCoordinates(0, 0, "q"))
    retry.produce(out_topic, b"k", b"retry")
    return out_topic, zombie, retry


def test_a_zombie_task_is_fenced(kafka_broker, topic_name):
    """A second attempt of the same task fences the first: the zombie cannot commit."""
    bs = kafka_broker.bootstrap_servers
    before = kafka_client_threads()
    out_topic, zombie, retry = _zombie_and_retry(
        bs, topic_name, f"zombie-{topic_name('app')}", zombie_delivered=True
    )
    retry.close()
    import pytest

    from streamtable.errors import StreamsError

    with pytest.raises(StreamsError, match="Committing the transaction") as fenced:
        zombie.close()
    assert [v for _, v, _ in read_topic(bs, out_topic)] == [b"retry"]
    # the error outlives the task (Spark reports it, a caller may keep it): it must not keep
    # the given-up producer alive, reconnecting for as long as the process runs
    assert producers_held_by(fenced.value) == []
    # nor may the frames of its calls (in that error's traceback) nor the log record of its
    # failed abort (pytest keeps this test's records, as a user's MemoryHandler would): only
    # the retry's producer and the task's marker consumer, cached for its next batch, are left
    wait_until(
        lambda: len(kafka_client_threads() - before) <= 2,
        30,
        lambda: f"{len(kafka_client_threads() - before)} of its Kafka clients alive after close",
    )


def test_a_task_fenced_while_it_writes_fails_with_an_error_that_re_runs_the_batch(
    kafka_broker, topic_name
):
    """A task whose producer a newer attempt of the same task fenced mid-batch learns it from
    ``produce`` as a bare ``_FATAL``. That is a fencing (the batch is re-run, the zombie
    writes nothing), not a record the broker rejected, which would stop the application.
    """
    from streamtable.errors import StreamsError
    from streamtable.runtime.query_errors import is_transient

    bs = kafka_broker.bootstrap_servers
    out_topic, zombie, retry = _zombie_and_retry(bs, topic_name, f"fenced-{topic_name('app')}")

    def write_until_refused() -> StreamsError | None:
        try:
            zombie.produce(out_topic, b"k", b"zombie")
        except StreamsError as e:
            return e
        return None

    # until the zombie's background thread learns of the fencing
    failed = wait_until(write_until_refused, 60, "the zombie's producer failing", interval_s=0.05)
    given_up = zombie._producer
    zombie.abort()
    # the records it could not send are purged, so that nothing is left for librdkafka to
    # report ("Producer terminating with 1 message still in queue") when it is destroyed
    assert len(given_up) == 0
    del given_up  # this frame outlives the test (in a cycle through the error's traceback)
    assert "'q.sink'" in str(failed)
    assert "fenced by a newer instance" in str(failed), failed
    assert is_transient(failed)
    retry.close()
    assert [v for _, v, _ in read_topic(bs, out_topic)] == [b"retry"]


def test_a_restart_fences_the_transactional_ids_the_last_start_recorded(
    kafka_broker, spark, topic_name, app_config
):
    from pathlib import Path

    import pytest
    from confluent_kafka import KafkaException, Producer

    from streamtable.config import StreamsConfig
    from streamtable.runtime.fencing import fence_recorded, recorded_ids
    from streamtable.runtime.task_output import transactional_id

    bs = kafka_broker.bootstrap_servers
    src, echo, sums = topic_name("in"), topic_name("echo"), topic_name("sums")
    ensure_topics(bs, {src: 2, echo: 2, sums: 2})
    cfg = app_config(**{"processing.guarantee": "exactly_once_v2"})
    app = KafkaStreams(_topology(src, echo, sums), cfg)
    app.start()
    app.close()
    config = StreamsConfig.from_mapping(cfg)
    ids = recorded_ids(Path(config.checkpoint_dir))
    # every task number and source-partition slot of every output stage: both sinks and the
    # changelog of the store Sums
    slots = {*range(max(config.shuffle_partitions, 2)), f"{src}-0", f"{src}-1"}
    stages = {stage for stage, _ in ids}
    assert sorted(stage.split(".", 1)[1] for stage in stages) == ["changelog-Sums", "sink", "sink"]
    assert ids == {(stage, slot) for stage in stages for slot in slots}
    # a producer of the last run, its transaction left open (the run was killed)
    stage, slot = min(ids, key=str)
    zombie = Producer(
        {
            "bootstrap.servers": bs,
            "transactional.id": transactional_id(config.application_id, stage, slot),
        }
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(echo, key=b"k", value=struct.pack(">q", 1))
    zombie.flush(30)
    assert fence_recorded(config) == ids
    with pytest.raises(KafkaException, match="(?i)fenc"):
        zombie.commit_transaction(30)
    assert read_topic(bs, echo) == []  # aborted: nothing visible to read_committed


def test_a_lowered_shuffle_partitions_still_fences_every_task_the_checkpoint_runs(
    kafka_broker, spark, topic_name, app_config
):
    from pathlib import Path

    from streamtable.config import StreamsConfig
    from streamtable.runtime.fencing import recorded_ids

    bs = kafka_broker.bootstrap_servers
    src, echo, sums = topic_name("in"), topic_name("echo"), topic_name("sums")
    ensure_topics(bs, {src: 1, echo: 1, sums: 1})  # one source partition: slots 0.. come
    produce_records(bs, src, [(b"k", struct.pack(">q", 1), 1_000)])  # from the partitions
    cfg = app_config(
        **{"processing.guarantee": "exactly_once_v2", "streamtable.shuffle.partitions": 2}
    )
    with KafkaStreams(_topology(src, echo, sums), cfg) as app:
        app.start()
        app.await_caught_up(timeout=timedelta(minutes=3))
    lowered = {**cfg, "streamtable.shuffle.partitions": 1}
    with KafkaStreams(_topology(src, echo, sums), lowered) as app:
        app.start()  # the checkpoint keeps its 2 state partitions: tasks 0 and 1 run
    ids = recorded_ids(Path(StreamsConfig.from_mapping(lowered).checkpoint_dir))
    stages = {stage for stage, _ in ids}
    assert len(stages) == 3, ids  # both sinks and the changelog of Sums
    for stage in stages:
        assert (stage, 1) in ids, f"task 1 of {stage} neither fenced nor recorded: {ids}"
