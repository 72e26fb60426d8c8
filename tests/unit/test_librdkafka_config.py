"""Which ``consumer.*``/``producer.*`` keys streamtable's librdkafka clients take (no broker)."""

import logging
import socket

import pytest

from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError
from streamtable.runtime import librdkafka_config
from streamtable.runtime.librdkafka_config import librdkafka_settings
from streamtable.runtime.task_output import output_spec

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test probes librdkafka itself (the split of a set of settings is cached)."""
    librdkafka_config._split_cached.cache_clear()
    yield
    librdkafka_config._split_cached.cache_clear()


def test_java_only_keys_are_left_out_and_the_rest_keep_their_order_and_values():
    settings = {
        "security.protocol": "PLAINTEXT",
        "default.api.timeout.ms": 30000,  # Java consumer only
        "max.poll.interval.ms": "300000",
        "fetch.max.wait.ms": 100,  # Java's name; librdkafka's is fetch.wait.max.ms
        "bootstrap.servers": "b:9092",  # kept unprobed (the probe never connects)
        "client.id": None,  # unset
    }
    split = librdkafka_settings(settings, "consumer")
    assert list(split.accepted.items()) == [
        ("security.protocol", "PLAINTEXT"),
        ("max.poll.interval.ms", "300000"),
        ("bootstrap.servers", "b:9092"),
    ]
    assert split.ignored == {
        "default.api.timeout.ms": "unknown to librdkafka",
        "fetch.max.wait.ms": "unknown to librdkafka",
    }


def test_a_key_of_the_other_client_kind_is_left_out_even_under_an_alias():
    # librdkafka would log "Configuration property queue.buffering.max.ms is a producer
    # property and will be ignored by this consumer instance" (linger.ms is an alias of it)
    consumer = librdkafka_settings(
        {"request.timeout.ms": 10000, "linger.ms": 5, "acks": "all", "check.crcs": True},
        "consumer",
    )
    assert consumer.accepted == {"check.crcs": True}
    assert consumer.ignored == {
        "request.timeout.ms": "a producer property in librdkafka",
        "linger.ms": "a producer property in librdkafka",
        "acks": "a producer property in librdkafka",
    }
    producer = librdkafka_settings(
        {"session.timeout.ms": 45000, "buffer.memory": 1 << 25, "linger.ms": 5}, "producer"
    )
    assert producer.accepted == {"linger.ms": 5}
    assert producer.ignored == {
        "session.timeout.ms": "a consumer property in librdkafka",
        "buffer.memory": "unknown to librdkafka",
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


def test_the_left_out_keys_are_logged_once_with_their_prefixed_names(caplog):
    settings = {"max.block.ms": 60000, "acks": "all", "buffer.memory": 1 << 25}
    with caplog.at_level(logging.INFO, logger="streamtable"):
        librdkafka_settings(settings, "producer")
        librdkafka_settings(dict(settings), "producer")
    assert [r.getMessage() for r in caplog.records] == [
        "Left out of streamtable's librdkafka producers (Spark's Java client still gets them): "
        "producer.max.block.ms (unknown to librdkafka), "
        "producer.buffer.memory (unknown to librdkafka)"
    ]


@pytest.mark.parametrize(
    ("kind", "key", "value", "reason"),
    [
        ("consumer", "session.timeout.ms", "soon", 'Invalid value for configuration property "s'),
        ("consumer", "session.timeout.ms", 0, "value 0 is outside allowed range 1..3600000"),
        ("producer", "acks", "everything", '"request.required.acks"'),
        ("producer", "linger.ms", -5, '"queue.buffering.max.ms" value -5 is outside allowed'),
        ("producer", "enable.idempotence", "maybe", "true or false"),
        ("producer", "compression.type", "gzipx", '"compression.codec"'),
        ("consumer", "partition.assignment.strategy", "org.apache.kafka.Range", "Unsupported"),
    ],
)
def test_a_value_librdkafka_refuses_names_the_prefixed_key_and_what_to_do(kind, key, value, reason):
    with pytest.raises(ConfigError) as e:
        librdkafka_settings({"client.id": "app", key: value}, kind)
    message = str(e.value)
    assert message.startswith(
        f"Config '{kind}.{key}' is refused by librdkafka, the Kafka client of streamtable's "
        f"own {kind}s: "
    )
    assert reason in message
    assert message.endswith(
        ". Set a value that both librdkafka and Spark's Java client accept, or leave the key out"
    )
    assert repr(value) not in message.replace(reason, "")  # values may be secrets


def test_a_security_protocol_that_is_none_of_its_four_values_is_refused():
    with pytest.raises(ConfigError) as e:
        librdkafka_settings({"security.protocol": "SASL_SSLX"}, "consumer")
    assert str(e.value) == (
        "Config 'consumer.security.protocol' expects one of 'PLAINTEXT' | 'SSL' | "
        "'SASL_PLAINTEXT' | 'SASL_SSL', got 'SASL_SSLX'"
    )
    assert librdkafka_settings({"security.protocol": "sasl_ssl"}, "consumer").accepted == {
        "security.protocol": "sasl_ssl"
    }


def test_settings_that_together_build_no_client_name_librdkafka_reason():
    with pytest.raises(ConfigError) as e:  # each is fine alone
        librdkafka_settings({"enable.idempotence": True, "acks": "1"}, "producer")
    message = str(e.value)
    assert message.startswith("The 'producer.*' settings cannot build a librdkafka producer: ")
    assert "`acks` must be set to `all` when `enable.idempotence` is true" in message
    assert message.endswith(". Fix or leave out the settings it names")


def test_the_probe_reaches_no_network_for_oauth_settings():
    """An OIDC setup would make a real client ask the token endpoint as it is built."""
    endpoint = socket.socket()
    endpoint.bind(("127.0.0.1", 0))
    endpoint.listen(4)
    endpoint.setblocking(False)
    url = f"http://127.0.0.1:{endpoint.getsockname()[1]}/token"
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": url,
        "sasl.oauthbearer.client.id": "app",
        "sasl.oauthbearer.client.secret": "s3cret",
    }
    try:
        for kind in ("consumer", "producer"):
            assert librdkafka_settings(settings, kind).accepted == settings
        with pytest.raises(BlockingIOError):
            endpoint.accept()  # nobody connected
    finally:
        endpoint.close()


def test_a_value_is_cached_with_its_type_and_results_are_fresh_objects():
    # True == 1 in Python, but librdkafka refuses True for a number
    with pytest.raises(ConfigError, match="producer.linger.ms"):
        librdkafka_settings({"linger.ms": True}, "producer")
    assert librdkafka_settings({"linger.ms": 1}, "producer").accepted == {"linger.ms": 1}
    first = librdkafka_settings({"linger.ms": 1}, "producer")
    first.accepted["linger.ms"] = 99
    first.ignored["x"] = "y"
    again = librdkafka_settings({"linger.ms": 1}, "producer")
    assert (again.accepted, again.ignored) == ({"linger.ms": 1}, {})


def test_callables_are_kept_and_never_called_by_the_probe():
    calls = []

    def oauth_cb(config):
        calls.append(config)
        return "token", 0

    split = librdkafka_settings({"oauth_cb": oauth_cb, "client.id": "app"}, "consumer")
    assert split.accepted == {"oauth_cb": oauth_cb, "client.id": "app"}
    assert calls == []


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
