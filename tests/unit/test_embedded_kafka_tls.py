"""EmbeddedKafka's TLS listener: the generated node configuration and the refusals (no JVM)."""

from pathlib import Path

import pytest

from streamtable.broker import EmbeddedKafka
from streamtable.broker._node import KafkaNode
from streamtable.errors import BrokerError

pytestmark = pytest.mark.unit


def properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_a_node_with_an_ssl_port_listens_for_tls_clients_too(tmp_path):
    node = KafkaNode(0, tmp_path / "node-0", 9092, 9093, ssl_port=9094)
    node.write_config("0@127.0.0.1:9093", {"ssl.client.auth": "required"})
    props = properties(node.properties_path)
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,SSL://127.0.0.1:9094"
    )
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094"
    assert props["listener.security.protocol.map"] == (
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL"
    )
    assert props["ssl.client.auth"] == "required"

    plain = KafkaNode(1, tmp_path / "node-1", 9192, 9193)
    plain.write_config("1@127.0.0.1:9193", {})
    props = properties(plain.properties_path)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9193"
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"


@pytest.mark.parametrize("tls", [False, True])
def test_tls_settings_of_a_cluster_without_a_tls_listener_are_refused(tls):
    kafka = EmbeddedKafka(tls=tls)  # never started
    message = (
        "EmbeddedKafka has no TLS listener: create it with EmbeddedKafka(tls=True) and start it"
    )
    with pytest.raises(BrokerError) as e:
        kafka.ssl_bootstrap_servers  # noqa: B018
    assert str(e.value) == message
    with pytest.raises(BrokerError) as e:
        kafka.tls_client_config()
    assert str(e.value) == message
