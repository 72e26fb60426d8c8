"""EmbeddedKafka's secured listener: node configuration, SASL settings, refusals (no JVM)."""

from pathlib import Path

import pytest

from streamtable.broker import EmbeddedKafka
from streamtable.broker._node import KafkaNode
from streamtable.broker._security import ListenerSecurity, TlsMaterial
from streamtable.errors import BrokerError

pytestmark = pytest.mark.unit


def properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_a_node_with_a_secure_port_has_a_listener_named_after_its_protocol(tmp_path, protocol):
    node = KafkaNode(0, tmp_path / "node-0", 9092, 9093, secure_port=9094, secure_protocol=protocol)
    node.write_config("0@127.0.0.1:9093", {"sasl.enabled.mechanisms": "PLAIN"})
    props = properties(node.properties_path)
    assert props["listeners"] == (
        f"PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,{protocol}://127.0.0.1:9094"
    )
    assert (
        props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:9092,{protocol}://127.0.0.1:9094"
    )
    assert props["listener.security.protocol.map"] == (
        f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{protocol}:{protocol}"
    )
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "PLAIN"  # the settings given, as given

    plain = KafkaNode(1, tmp_path / "node-1", 9192, 9193)
    plain.write_config("1@127.0.0.1:9193", {})
    props = properties(plain.properties_path)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9193"
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"


def test_sasl_plain_users_reach_the_broker_and_both_clients_names():
    security = ListenerSecurity("SASL_PLAINTEXT", {"app": "pw1", "ops": "pw2"}, None)
    assert security.broker_settings() == {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_app="pw1" user_ops="pw2";'
        ),
    }
    assert security.client_settings("ops") == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="ops" password="pw2";'
        ),
        "sasl.username": "ops",
        "sasl.password": "pw2",
    }
    assert security.client_settings()["sasl.username"] == "app"  # the first user
    with pytest.raises(KeyError, match=r"no SASL user 'eve': the cluster has \['app', 'ops'\]"):
        security.client_settings("eve")


def dummy_tls():
    return TlsMaterial(
        "pw", Path("/k/ca.pem"), Path("/k/trust.p12"), Path("/k/broker.p12"), Path("/k/client.p12")
    )


def test_only_an_ssl_listener_asks_for_client_certificates():
    """Kafka applies the unprefixed ssl.client.auth to SSL listeners only (KIP-684)."""
    ssl = ListenerSecurity("SSL", {}, dummy_tls()).broker_settings()
    assert ssl["ssl.client.auth"] == "required"
    assert ssl["ssl.keystore.location"] == "/k/broker.p12"
    assert "sasl.enabled.mechanisms" not in ssl
    sasl_ssl = ListenerSecurity("SASL_SSL", {"app": "pw1"}, dummy_tls()).broker_settings()
    assert "ssl.client.auth" not in sasl_ssl
    assert sasl_ssl["ssl.truststore.location"] == "/k/trust.p12"
    assert sasl_ssl["sasl.enabled.mechanisms"] == "PLAIN"


def test_a_tls_client_gets_the_ca_in_both_clients_terms_and_its_certificate():
    assert ListenerSecurity("SSL", {}, dummy_tls()).client_settings() == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/k/ca.pem",
        "ssl.truststore.location": "/k/trust.p12",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.password": "pw",
        "ssl.keystore.location": "/k/client.p12",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": "pw",
    }


@pytest.mark.parametrize(
    ("users", "message"),
    [
        ({}, "sasl_users is empty: give at least one user and password"),
        (
            {"bad name": "pw"},
            "SASL user name 'bad name': use letters, digits, '_', '.' and '-' only",
        ),
        (
            {"app": 'p"w'},
            "The password of SASL user 'app' must be a non-empty string without '\"', '\\' or "
            "line breaks",
        ),
        (
            {"app": ""},
            "The password of SASL user 'app' must be a non-empty string without '\"', '\\' or "
            "line breaks",
        ),
    ],
)
def test_sasl_users_a_jaas_line_cannot_hold_are_refused(users, message):
    with pytest.raises(ValueError) as e:
        EmbeddedKafka(security_protocol="SASL_SSL", sasl_users=users)
    assert str(e.value) == message


def test_security_arguments_are_checked_when_the_cluster_is_made():
    with pytest.raises(ValueError) as e:
        EmbeddedKafka(security_protocol="TLS")
    assert str(e.value) == (
        "security_protocol must be one of SSL, SASL_SSL, SASL_PLAINTEXT, got 'TLS'"
    )
    with pytest.raises(ValueError) as e:
        EmbeddedKafka(security_protocol="SSL", sasl_users={"app": "pw"})
    assert str(e.value) == (
        "sasl_users needs security_protocol='SASL_SSL' or 'SASL_PLAINTEXT', got 'SSL'"
    )


@pytest.mark.parametrize("protocol", [None, "SSL"])
def test_security_settings_of_a_cluster_without_a_secured_listener_are_refused(protocol):
    kafka = EmbeddedKafka(security_protocol=protocol)  # never started
    message = (
        "EmbeddedKafka has no secured listener: create it with "
        "EmbeddedKafka(security_protocol='SSL' | 'SASL_SSL' | 'SASL_PLAINTEXT') and start it"
    )
    with pytest.raises(BrokerError) as e:
        kafka.secure_bootstrap_servers  # noqa: B018
    assert str(e.value) == message
    with pytest.raises(BrokerError) as e:
        kafka.client_security_config()
    assert str(e.value) == message
