"""WordCount on Kafka's WordCountDemo input gives Kafka Streams' counts."""

import struct
from datetime import timedelta

import pytest

from _support import ensure_topics, produce_values, read_topic
from streamtable import KafkaStreams
from streamtable.demo import wordcount
from streamtable.demo.text import wordcount_demo_sentences
from streamtable.serde.murmur2 import default_partition

# Kafka Streams' WordCountDemo output for these three sentences (final count per word).
EXPECTED = {
    "all": 1,
    "streams": 2,
    "lead": 1,
    "to": 1,
    "kafka": 3,
    "hello": 1,
    "join": 1,
    "summit": 1,
}


@pytest.mark.parametrize("columns", [False, True], ids=["callables", "column_expressions"])
def test_wordcount_gives_kafka_streams_counts(kafka_broker, spark, topic_name, app_config, columns):
    src, out = topic_name("in"), topic_name("out")
    bs = kafka_broker.bootstrap_servers
    ensure_topics(bs, {src: 2, out: 3})
    produce_values(bs, src, [(None, line) for line in wordcount_demo_sentences()])
    app = KafkaStreams(wordcount.build_topology(src, out, columns=columns), app_config())
    app.start()
    try:
        app.await_caught_up(timeout=timedelta(minutes=3))
    finally:
        app.close()
    records = read_topic(bs, out)
    assert wordcount.final_counts(records) == EXPECTED
    # values are Kafka's LongSerializer bytes, keys are placed by murmur2 like Java's producer
    assert all(len(v) == 8 for _, v, _ in records)
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bs, "group.id": "wc-check", "auto.offset.reset": "earliest"})
    c.subscribe([out])
    seen = 0
    while seen < len(records):
        for msg in c.consume(100, timeout=1.0):
            assert msg.partition() == default_partition(msg.key(), 3)
            struct.unpack(">q", msg.value())
            seen += 1
    c.close()
