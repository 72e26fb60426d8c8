import threading
import time
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, Producer

from streamtable.broker import EmbeddedKafka
from streamtable.errors import BrokerError

pytestmark = pytest.mark.integration


def wait_until(condition, timeout=30.0, interval=0.2, what="condition"):
    """Poll ``condition`` until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        threading.Event().wait(interval)


def produce(bootstrap, topic, records, **config):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3, **config})
    reports = []
    for key, value, partition in records:
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=partition,
            on_delivery=lambda err, msg: reports.append((err, msg)),
        )
    assert producer.flush(60) == 0, "records still queued after 60 s"
    errors = [err for err, _ in reports if err is not None]
    assert not errors, errors
    return [msg for _, msg in reports]


def consume(bootstrap, topic, count, timeout=30.0):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "t",
            "log_level": 3,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


def test_single_broker_produce_consume():
    with EmbeddedKafka() as kafka:
        data_dir = kafka.data_dir
        assert kafka.bootstrap_servers.startswith("127.0.0.1:")
        assert kafka.topics() == []
        kafka.create_topic("words", partitions=3)
        assert kafka.topics() == ["words"]
        assert kafka.leader_of("words", 2) == 0
        records = [(f"k{i}".encode(), f"v{i}".encode(), i % 3) for i in range(9)]
        produce(kafka.bootstrap_servers, "words", records)
        got = consume(kafka.bootstrap_servers, "words", 9)
        assert sorted((m.key(), m.value(), m.partition()) for m in got) == sorted(records)
        assert "Kafka Server started" in kafka.log_tail(2000) or kafka.log_path.exists()
        with pytest.raises(BrokerError, match="could not create topic 'words'"):
            kafka.create_topic("words", partitions=3)
        kafka.delete_topic("words")
        assert kafka.topics() == []
    assert not data_dir.exists(), "data dir is deleted on exit unless keep=True"


def test_three_brokers_survive_leader_crash(three_brokers, topic_name):
    kafka = three_brokers
    topic = topic_name("replicated")
    kafka.create_topic(topic, partitions=2, config={"min.insync.replicas": "2"})
    admin = kafka.admin()
    md = admin.list_topics(topic=topic, timeout=10).topics[topic]
    assert all(len(p.replicas) == 3 for p in md.partitions.values())
    produce(kafka.bootstrap_servers, topic, [(b"a", b"1", 0)])

    leader = kafka.leader_of(topic, 0)
    kafka.kill_broker(leader)
    assert not kafka.is_alive(leader)
    wait_until(
        lambda: kafka.leader_of(topic, 0) not in (-1, leader),
        timeout=90,
        what=f"a new leader for {topic}-0",
    )

    msgs = produce(
        kafka.bootstrap_servers,
        topic,
        [(b"b", b"2", 0)],
        **{"message.timeout.ms": 60000},
    )
    assert msgs[0].offset() == 1

    kafka.restart_broker(leader, timeout=timedelta(minutes=2))  # 60 s by default
    assert kafka.is_alive(leader)
    got = consume(kafka.bootstrap_servers, topic, 2)
    assert [m.value() for m in got if m.partition() == 0] == [b"1", b"2"]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # rejected while formatting the storage (config parsing)
        ({"num.io.threads": "not-a-number"}, r"formatting the storage.*num\.io\.threads"),
        # accepted by the parser, fails when the broker process starts
        ({"metric.reporters": "no.such.Reporter"}, r"exited with code.*no\.such\.Reporter"),
    ],
)
def test_broker_that_cannot_start_raises_with_log_lines(config, expected):
    started = time.monotonic()
    kafka = EmbeddedKafka(broker_config=config, startup_timeout=timedelta(seconds=60))
    with pytest.raises(BrokerError, match=r"(?s)Kafka node 0.*" + expected):
        kafka.start()
    assert time.monotonic() - started < 60
    assert kafka.data_dir is not None and not kafka.data_dir.exists()


def test_keep_leaves_data(tmp_path):
    with EmbeddedKafka(keep=True, data_dir=tmp_path / "kafka") as kafka:
        kafka.create_topic("kept")
    assert (tmp_path / "kafka" / "node-0" / "data" / "meta.properties").exists()
    assert (tmp_path / "kafka" / "node-0" / "server.log").stat().st_size > 0
