"""An application on a secured listener: SASL (PLAIN) over TLS, with client certificates too.

One security setup under ``consumer.``, ``producer.`` and ``admin.``, with Java's and
librdkafka's keys side by side (``EmbeddedKafka.client_security_config``: ``sasl.jaas.config``
and ``sasl.username``/``sasl.password``, ``ssl.truststore.location`` and ``ssl.ca.location``, a
PKCS#12 keystore for both): Spark's Kafka source and sink (Java) take theirs, streamtable's own
clients (librdkafka: the admin client, the offset committer, the exactly-once writers of the
output and the changelog, the store replica) theirs. The broker asks for both a SASL login and
a client certificate, so a client missing either cannot take part.
"""

import uuid
from datetime import timedelta

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

from _support import ensure_topics, produce_values, read_topic
from streamtable import KafkaStreams
from streamtable.broker import EmbeddedKafka
from streamtable.demo import wordcount
from streamtable.runtime.kafka_admin import KafkaAdmin
from streamtable.runtime.librdkafka_config import librdkafka_settings

LINES = ["all streams lead to kafka", "hello kafka streams", "join kafka summit"]
WORDS = {"all": 1, "streams": 2, "lead": 1, "to": 1, "kafka": 3, "hello": 1, "join": 1, "summit": 1}


def committed(bootstrap, group, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group)
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic}


def test_an_exactly_once_application_runs_over_sasl_ssl_with_client_certificates(spark, tmp_path):
    with EmbeddedKafka(
        security_protocol="SASL_SSL",
        sasl_users={"wordcount": "wordcount-secret"},
        broker_config={"listener.name.sasl_ssl.ssl.client.auth": "required"},
        startup_timeout=timedelta(minutes=2),
    ) as kafka:
        plain = kafka.bootstrap_servers  # the test's own clients: setup and checks
        src, out = "secure-lines", "secure-counts"
        app_id = f"secure-wordcount-{uuid.uuid4().hex[:6]}"
        ensure_topics(plain, {src: 2, out: 2})
        produce_values(plain, src, [(None, line) for line in LINES])
        security = kafka.client_security_config()
        assert security["sasl.username"] == "wordcount"
        config = {
            "application.id": app_id,
            "bootstrap.servers": kafka.secure_bootstrap_servers,  # the app knows only this
            "state.dir": str(tmp_path / "state"),
            "processing.guarantee": "exactly_once_v2",
            "streamtable.shuffle.partitions": 2,
            "commit.interval.ms": 200,
            **{
                f"{client}.{k}": v
                for client in ("consumer", "producer", "admin")
                for k, v in security.items()
            },
        }
        # the listener asks for both: a client without its certificate, or with a wrong
        # password, is turned away (librdkafka reports why through error_cb)
        librdkafka = librdkafka_settings(security, "admin").accepted
        no_certificate = {k: v for k, v in librdkafka.items() if not k.startswith("ssl.keystore")}
        wrong_password = {**librdkafka, "sasl.password": "not-the-password"}
        for settings, why in ((no_certificate, "certificate"), (wrong_password, "Authentication")):
            errors = []
            refused = AdminClient(
                {
                    "bootstrap.servers": kafka.secure_bootstrap_servers,
                    **settings,
                    "log_level": 0,
                    "error_cb": lambda e, errors=errors: errors.append(e.str()),
                }
            )
            with pytest.raises(KafkaException, match="transport failure"):
                refused.list_topics(timeout=5)
                pytest.fail(f"a client with only {sorted(settings)} read the cluster's metadata")
            refused.poll(0)
            assert any(why in error for error in errors), errors
            del refused  # destroyed now: it stops retrying

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
        # the named store's changelog, written by the exactly-once writers
        changelog = read_topic(plain, f"{app_id}-counts-store-changelog")
        assert wordcount.final_counts(changelog) == WORDS
