"""The Kafka Streams (Java) reference runner gives Kafka Streams' documented results."""

import struct
import uuid

import pytest

from _support import ensure_topics, produce_records, read_topic
from streamtable.reference.kafka_streams import run_reference


def rec(key, value, ts):
    return (key.encode(), None if value is None else value.encode(), ts)


def final_values(bs, topic, decode):
    """The last value per key (so the result does not depend on record caching)."""
    out = {}
    for k, v, _ in read_topic(bs, topic):
        out[k.decode()] = None if v is None else decode(v)
    return out


def run(kafka_broker, tmp_path, topology, params, inputs):
    app_id = f"ref-{topology}-{uuid.uuid4().hex[:6]}"
    result = run_reference(
        topology,
        bootstrap_servers=kafka_broker.bootstrap_servers,
        application_id=app_id,
        params=params,
        input_topics=inputs,
        state_dir=str(tmp_path / "kstreams-state"),
    )
    assert 0 < result["startup_seconds"] <= result["seconds"]
    return result


def test_table_aggregate_is_the_documented_grouped_table_walkthrough(
    kafka_broker, topic_name, tmp_path
):
    bs = kafka_broker.bootstrap_servers
    table, output = topic_name("table"), topic_name("out")
    ensure_topics(bs, {table: 2, output: 2})
    records = [
        rec("alice", "E:5", 1000),
        rec("bob", "A:3", 2000),
        rec("charlie", "A:7", 3000),
        rec("alice", "A:5", 4000),  # moves alice from E to A: E -5, then A +5
        rec("charlie", None, 5000),  # tombstone: A -7
    ]
    produce_records(bs, table, records, partitions=2)

    result = run(
        kafka_broker, tmp_path, "table-aggregate", {"table": table, "output": output}, [table]
    )

    assert result["records_in"] == 5
    assert final_values(bs, output, lambda v: struct.unpack(">q", v)[0]) == {"A": 8, "E": 0}


def test_table_table_left_join(kafka_broker, topic_name, tmp_path):
    bs = kafka_broker.bootstrap_servers
    left, right, output = topic_name("left"), topic_name("right"), topic_name("out")
    ensure_topics(bs, {left: 2, right: 2, output: 2})
    produce_records(
        bs,
        left,
        [rec("a", "L1", 1000), rec("b", "L2", 2000), rec("c", "L3", 3000), rec("c", None, 6000)],
        partitions=2,
    )
    produce_records(
        bs,
        right,
        [rec("a", "R1", 4000), rec("b", "R2", 5000), rec("b", None, 7000), rec("d", "R4", 8000)],
        partitions=2,
    )

    result = run(
        kafka_broker,
        tmp_path,
        "table-table-join",
        {"left": left, "right": right, "output": output, "kind": "left"},
        [left, right],
    )

    assert result["records_in"] == 8
    # a: both sides; b: right side deleted -> "L2|null"; c: left deleted -> tombstone;
    # d: right side only -> no left-join result at all.
    assert final_values(bs, output, bytes.decode) == {"a": "L1|R1", "b": "L2|null", "c": None}


def test_java_failure_raises_with_the_output_tail(kafka_broker, topic_name, tmp_path):
    bs = kafka_broker.bootstrap_servers
    left, right = topic_name("left"), topic_name("right")
    ensure_topics(bs, {left: 1, right: 1})
    with pytest.raises(RuntimeError, match="unsupported kind=cross"):
        run(
            kafka_broker,
            tmp_path,
            "table-table-join",
            {"left": left, "right": right, "output": "unused", "kind": "cross"},
            [left, right],
        )


def test_started_reference_runs_the_latency_echo_while_the_block_runs(
    kafka_broker, topic_name, tmp_path
):
    from _support import wait_until
    from streamtable.reference.kafka_streams import started_reference

    bs = kafka_broker.bootstrap_servers
    source, output = topic_name("in"), topic_name("out")
    ensure_topics(bs, {source: 2, output: 2})
    produce_records(bs, source, [rec("a", "5", 1000), rec("b", "-3", 2000)], partitions=2)
    with started_reference(
        "latency-echo",
        bootstrap_servers=bs,
        application_id=f"ref-echo-{uuid.uuid4().hex[:6]}",
        params={"input": source, "output": output},
        state_dir=str(tmp_path / "kstreams-state"),
    ):
        # produced while it runs: processed without a restart
        produce_records(bs, source, [rec("c", "12", 3000)], partitions=2)

        def echoed():
            return {k.decode(): struct.unpack(">q", v)[0] for k, v, _ in read_topic(bs, output)}

        wait_until(lambda: len(echoed()) == 2, 60, "the two non-negative values echoed")
        assert echoed() == {"a": 5, "c": 12}  # the negative one filtered out


def test_started_reference_raises_with_the_output_tail_when_java_fails(
    kafka_broker, topic_name, tmp_path
):
    from streamtable.reference.kafka_streams import started_reference

    left, right = topic_name("left"), topic_name("right")
    ensure_topics(kafka_broker.bootstrap_servers, {left: 1, right: 1})
    with (
        pytest.raises(RuntimeError, match="unsupported kind=cross"),
        started_reference(
            "table-table-join",
            bootstrap_servers=kafka_broker.bootstrap_servers,
            application_id=f"ref-fail-{uuid.uuid4().hex[:6]}",
            params={"left": left, "right": right, "output": "unused", "kind": "cross"},
            state_dir=str(tmp_path / "kstreams-state"),
        ),
    ):
        pytest.fail("the block must not run")
