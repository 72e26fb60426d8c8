"""Which ``consumer.*``/``producer.*`` keys streamtable's librdkafka clients take (no broker)."""

import logging

import pytest

from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError
from streamtable.runtime.librdkafka_config import librdkafka_settings
from streamtable.runtime.task_output import output_spec

pytestmark = pytest.mark.unit


def test_java_only_keys_are_left_out_and_the_rest_keep_their_order_and_values():
    settings = {
        "security.protocol": "PLAINTEXT",
        "default.api.timeout.ms": 30000,  # Java consumer only
        "max.poll.interval.ms": "300000",
        "fetch.max.wait.ms": 100,  # Java's name; librdkafka's is fetch.wait.max.ms
        "bootstrap.servers": "b:9092",  # kept unchecked (the probe never connects)
        "client.id": None,  # unset
    }
    split = librdkafka_settings(settings, "consumer")
    assert split.accepted == {
        "security.protocol": "PLAINTEXT",
        "max.poll.interval.ms": "300000",
        "bootstrap.servers": "b:9092",
    }
    assert list(split.accepted) == [
        "security.protocol",
        "max.poll.interval.ms",
        "bootstrap.servers",
    ]
    assert split.ignored == {
        "default.api.timeout.ms": "unknown to librdkafka",
        "fetch.max.wait.ms": "unknown to librdkafka",
    }


def test_a_key_of_the_other_client_kind_is_left_out_instead_of_warned_about():
    # librdkafka would log "Configuration property request.timeout.ms is a producer property
    # and will be ignored by this consumer instance" on the console
    consumer = librdkafka_settings({"request.timeout.ms": 10000, "check.crcs": True}, "consumer")
    assert consumer.accepted == {"check.crcs": True}
    assert consumer.ignored == {"request.timeout.ms": "a producer property in librdkafka"}
    producer = librdkafka_settings(
        {"session.timeout.ms": 45000, "buffer.memory": 1 << 25, "linger.ms": 5}, "producer"
    )
    assert producer.accepted == {"linger.ms": 5}
    assert producer.ignored == {
        "session.timeout.ms": "a consumer property in librdkafka",
        "buffer.memory": "unknown to librdkafka",
    }


def test_the_left_out_keys_are_logged_once_with_their_prefixed_names(caplog):
    # values no other test uses: the split of a set of settings is cached, and logged once
    settings = {"max.block.ms": 61234, "acks": "all", "buffer.memory": 12345678}
    with caplog.at_level(logging.INFO, logger="streamtable"):
        librdkafka_settings(settings, "producer")
        librdkafka_settings(dict(settings), "producer")
    assert [r.getMessage() for r in caplog.records] == [
        "Left out of streamtable's librdkafka producers (Spark's Java client still gets them): "
        "producer.max.block.ms (unknown to librdkafka), "
        "producer.buffer.memory (unknown to librdkafka)"
    ]


def test_a_value_librdkafka_refuses_names_the_prefixed_key_and_what_to_do():
    with pytest.raises(ConfigError) as e:
        librdkafka_settings({"session.timeout.ms": "soon"}, "consumer")
    assert str(e.value) == (
        "Config 'consumer.session.timeout.ms' is refused by librdkafka, the Kafka "
        "client of streamtable's own consumers (Invalid value for configuration property "
        '"session.timeout.ms"); set a value that both librdkafka and Spark\'s Java client '
        "accept"
    )


def test_settings_no_client_can_be_built_from_name_the_client_and_librdkafka_reason(tmp_path):
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises(ConfigError) as e:
        librdkafka_settings(
            {"security.protocol": "SSL", "ssl.ca.location": str(missing)}, "producer"
        )
    message = str(e.value)
    assert message.startswith("The 'producer.*' settings cannot build a librdkafka producer: ")
    assert "ssl.ca.location" in message


def test_output_spec_gives_the_writers_only_what_librdkafka_takes():
    config = StreamsConfig.from_mapping(
        {
            "application.id": "app",
            "bootstrap.servers": "b:9092",
            "producer.max.block.ms": 60000,
            "producer.linger.ms": 20,
            "producer.compression.type": "lz4",
        }
    )
    spec = output_spec(config, "q.sink")
    assert spec.producer_config == {
        "bootstrap.servers": "b:9092",
        "partitioner": "murmur2_random",
        "linger.ms": 20,
        "compression.type": "lz4",
    }


def test_java_keys_librdkafka_knows_only_to_refuse_are_left_out():
    settings = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;",
        "sasl.username": "alice",  # librdkafka's names for the same credentials
        "sasl.password": "s3cret",
        "ssl.truststore.location": "/etc/kafka/truststore.jks",
    }
    split = librdkafka_settings(settings, "producer")
    assert split.accepted == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "s3cret",
    }
    assert split.ignored == {
        "sasl.jaas.config": "a Java setting librdkafka does not support",
        "ssl.truststore.location": "a Java setting librdkafka does not support",
    }
