"""An application on a TLS listener that requires client certificates.

One security setup under ``consumer.``, ``producer.`` and ``admin.``, with Java's and
librdkafka's keys side by side (``EmbeddedKafka.tls_client_config``): Spark's Kafka source and
sink (Java) take theirs, streamtable's own clients (librdkafka: the admin client, the offset
committer, the exactly-once writers of the output and the changelog, the store replica) theirs.
"""

import uuid
from datetime import timedelta

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from _support import ensure_topics, produce_values, read_topic
from streamtable import KafkaStreams
from streamtable.broker import EmbeddedKafka
from streamtable.demo import wordcount
from streamtable.runtime.kafka_admin import KafkaAdmin

LINES = ["all streams lead to kafka", "hello kafka streams", "join kafka summit"]
WORDS = {"all": 1, "streams": 2, "lead": 1, "to": 1, "kafka": 3, "hello": 1, "join": 1, "summit": 1}


def committed(bootstrap, group, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group)
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic}


def test_an_exactly_once_application_runs_over_tls_with_client_certificates(spark, tmp_path):
    with EmbeddedKafka(tls=True, startup_timeout=timedelta(minutes=2)) as kafka:
        plain = kafka.bootstrap_servers  # the test's own clients: setup and checks
        src, out = "tls-lines", "tls-counts"
        app_id = f"tls-wordcount-{uuid.uuid4().hex[:6]}"
        ensure_topics(plain, {src: 2, out: 2})
        produce_values(plain, src, [(None, line) for line in LINES])
        tls = kafka.tls_client_config()
        config = {
            "application.id": app_id,
            "bootstrap.servers": kafka.ssl_bootstrap_servers,  # the app knows only TLS
            "state.dir": str(tmp_path / "state"),
            "processing.guarantee": "exactly_once_v2",
            "streamtable.shuffle.partitions": 2,
            "commit.interval.ms": 200,
            **{
                f"{client}.{k}": v
                for client in ("consumer", "producer", "admin")
                for k, v in tls.items()
            },
        }
        app = KafkaStreams(wordcount.build_topology(src, out), config)
        app.start()
        try:
            # caught up: the input committed to the group and the store replica (a librdkafka
            # consumer of the changelog) at the changelog's end
            app.await_caught_up(timeout=timedelta(minutes=3))
        finally:
            app.close()

        assert wordcount.final_counts(read_topic(plain, out)) == WORDS
        ends = KafkaAdmin(plain).end_offsets([src])
        assert committed(plain, app_id, src) == {tp[1]: off for tp, off in ends.items()}
        # the named store's changelog, written by the exactly-once writers over TLS
        changelog = read_topic(plain, f"{app_id}-counts-store-changelog")
        assert wordcount.final_counts(changelog) == WORDS
