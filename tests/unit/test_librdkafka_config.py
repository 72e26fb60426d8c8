"""Which ``consumer.*``/``producer.*`` keys streamtable's librdkafka clients take (no broker)."""

import logging
import socket

import pytest

from streamtable.broker._security import _keytool
from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError
from streamtable.runtime import librdkafka_config
from streamtable.runtime.kafka_admin import KafkaAdmin
from streamtable.runtime.librdkafka_config import librdkafka_settings
from streamtable.runtime.task_output import output_spec

pytestmark = pytest.mark.unit

#: SASL/PLAIN credentials in librdkafka's names
SASL_LIBRDKAFKA = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": "s3cret",
}
#: the same, with Java's name for the credentials too
SASL_BOTH_CLIENTS = {
    **SASL_LIBRDKAFKA,
    "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;",
}


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test probes librdkafka itself (the split of a set of settings is cached)."""
    librdkafka_config._split_cached.cache_clear()
    yield
    librdkafka_config._split_cached.cache_clear()


def refusal(settings, kind):
    """The message of the ConfigError ``librdkafka_settings(settings, kind)`` raises."""
    with pytest.raises(ConfigError) as e:
        librdkafka_settings(settings, kind)
    return str(e.value)


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
    settings = {**SASL_BOTH_CLIENTS, "ssl.truststore.location": "/etc/kafka/truststore.jks"}
    split = librdkafka_settings(settings, "producer")
    assert split.accepted == SASL_LIBRDKAFKA
    assert split.ignored == {
        "sasl.jaas.config": "a Java setting librdkafka does not support",
        "ssl.truststore.location": "a Java setting librdkafka does not support",
    }


def test_admin_settings_shared_with_the_java_clients_are_split_the_same_way(caplog):
    """A security setup written once for consumer./producer./admin. (Kafka Streams hands
    admin.* to Java's admin client, which ignores unknown keys)."""
    settings = {
        **SASL_BOTH_CLIENTS,
        "default.api.timeout.ms": 30000,
        "session.timeout.ms": 45000,  # a consumer key: the admin client is a producer here
    }
    with caplog.at_level(logging.INFO, logger="streamtable"):
        split = librdkafka_settings(settings, "admin")
    assert split.accepted == SASL_LIBRDKAFKA
    assert [r.getMessage() for r in caplog.records] == [
        "Left out of streamtable's librdkafka admin clients: "
        "admin.sasl.jaas.config (a Java setting librdkafka does not support), "
        "admin.default.api.timeout.ms (unknown to librdkafka), "
        "admin.session.timeout.ms (a consumer property in librdkafka)"
    ]
    # the admin client that checks topics and runs resets is built with what librdkafka takes
    # (it refused the whole setup before: "Java JAAS configuration is not supported")
    admin = KafkaAdmin("127.0.0.1:1", config=settings)
    admin.close()
    with pytest.raises(ConfigError) as e:
        librdkafka_settings({"socket.timeout.ms": "soon"}, "admin")
    assert str(e.value).startswith(
        "Config 'admin.socket.timeout.ms' is refused by librdkafka, the Kafka client of "
        "streamtable's own admin clients: "
    )
    assert str(e.value).endswith(". Set a value that librdkafka accepts, or leave the key out")


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


@pytest.fixture(scope="module")
def keystores(tmp_path_factory):
    """A PKCS#12 and a JKS keystore (password ``storepass1``), made by the JDK's keytool (the
    one beside the tests' Kafka broker's java), and the certificate as PEM text."""
    folder = tmp_path_factory.mktemp("keystores")
    passwords = ("-storepass:env", "STREAMTABLE_KEYTOOL_PASSWORD")  # as _keytool passes them
    stores = {}
    for kind in ("PKCS12", "JKS"):
        path = folder / f"client.{kind.lower()}"
        _keytool(
            "storepass1", "-genkeypair", "-alias", "client", "-keyalg", "RSA",
            "-keysize", "2048", "-dname", "CN=client", "-validity", "2", "-storetype", kind,
            "-keystore", str(path), *passwords, "-keypass:env", "STREAMTABLE_KEYTOOL_PASSWORD",
        )  # fmt: skip
        stores[kind] = str(path)
    pem = folder / "client.pem"  # the certificate alone, as PEM
    _keytool("storepass1", "-exportcert", "-rfc", "-alias", "client",
             "-keystore", stores["PKCS12"], *passwords, "-file", str(pem))  # fmt: skip
    stores["PEM"] = pem.read_text()
    return stores


@pytest.mark.parametrize("kind", ["consumer", "producer"])
def test_tls_settings_librdkafka_can_load_are_accepted(keystores, kind):
    settings = {
        "security.protocol": "SSL",
        "ssl.keystore.location": keystores["PKCS12"],
        "ssl.keystore.password": "storepass1",
    }
    assert librdkafka_settings(settings, kind).accepted == settings
    # files are loaded for a TLS connection only, by either client
    plaintext = {**settings, "security.protocol": "PLAINTEXT", "ssl.keystore.password": "x"}
    assert librdkafka_settings(plaintext, kind).accepted == plaintext


def test_a_keystore_with_the_wrong_password_is_refused_at_start_without_the_password(keystores):
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "ssl.keystore.location": keystores["PKCS12"],
        "ssl.keystore.password": "not-the-password",
    }
    message = refusal(settings, "producer")
    assert message.startswith(
        "The 'producer.ssl.*' settings cannot build a librdkafka producer "
        "(security.protocol=SASL_SSL): Failed to parse ssl.keystore.location PKCS#12 file: "
        f"{keystores['PKCS12']}: "
    )
    assert message.endswith(". Fix the ssl.* setting librdkafka names")
    assert "not-the-password" not in message


def test_a_java_keystore_is_named_with_how_to_convert_it(keystores):
    jks = keystores["JKS"]
    settings = {
        "security.protocol": "SSL",
        "ssl.keystore.location": jks,
        "ssl.keystore.password": "storepass1",
    }
    message = refusal(settings, "consumer")
    assert message.startswith(
        "The 'consumer.ssl.*' settings cannot build a librdkafka consumer (security.protocol=SSL): "
    )
    assert message.endswith(
        f". 'consumer.ssl.keystore.location' is a Java KeyStore (JKS) file, which librdkafka "
        f"cannot read: convert it to PKCS#12 (keytool -importkeystore -srckeystore {jks} "
        f"-destkeystore {jks}.p12 -deststoretype PKCS12) and name the new file; Spark's Java "
        f"client reads PKCS#12 too (ssl.keystore.type=PKCS12)"
    )


@pytest.mark.parametrize(("kind", "client"), [("producer", "producer"), ("admin", "admin client")])
def test_a_missing_ca_file_is_named(tmp_path, kind, client):
    missing = str(tmp_path / "ca.pem")
    with pytest.raises(ConfigError) as e:
        librdkafka_settings({"security.protocol": "ssl", "ssl.ca.location": missing}, kind)
    assert str(e.value) == (
        f"The '{kind}.ssl.*' settings cannot build a librdkafka {client} (security.protocol=SSL): "
        "ssl.ca.location failed: error:05880020:x509 certificate routines::BIO lib. "
        f"'{kind}.ssl.ca.location' names {missing!r}, which does not exist here"
    )


def test_key_material_given_where_a_path_goes_is_not_shown():
    pem = (
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    )
    message = refusal({"security.protocol": "SSL", "ssl.key.location": pem}, "consumer")
    assert message.startswith("The 'consumer.ssl.*' settings cannot build a librdkafka consumer")
    assert message.endswith(". Fix the ssl.* setting librdkafka names")
    assert "MIIE" not in message


def test_javas_empty_hostname_check_algorithm_is_librdkafkas_none():
    settings = {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""}
    assert librdkafka_settings(settings, "consumer").accepted == {
        "security.protocol": "SSL",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_a_java_truststore_without_a_ca_file_warns_that_librdkafka_uses_the_system_cas(
    caplog, keystores
):
    settings = {"security.protocol": "SSL", "ssl.truststore.location": keystores["JKS"]}
    with caplog.at_level(logging.WARNING, logger="streamtable"):
        split = librdkafka_settings(settings, "consumer")
    assert split.accepted == {"security.protocol": "SSL"}
    assert [r.getMessage() for r in caplog.records] == [
        "'consumer.ssl.truststore.location' is a Java setting, which librdkafka leaves out: "
        "streamtable's own consumers verify the brokers against the system's CA certificates. If "
        "the brokers' certificates are signed by another CA, set 'consumer.ssl.ca.location' to "
        "its certificate (PEM)"
    ]
    for ca in ({"ssl.ca.location": "probe"}, {"ssl.ca.pem": keystores["PEM"]}):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="streamtable"):
            librdkafka_settings({**settings, **ca}, "consumer")
        assert caplog.records == []


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
