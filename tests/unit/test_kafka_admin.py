"""streamtable's admin client facade, without a broker."""

import pytest

from streamtable.errors import StreamtableError
from streamtable.runtime.kafka_admin import KafkaAdmin


def test_a_closed_admin_client_says_so():
    admin = KafkaAdmin("127.0.0.1:1", timeout_ms=1000)
    admin.close()
    with pytest.raises(StreamtableError, match=r"admin client of '127.0.0.1:1' is closed"):
        admin.topic_partitions(["t"])


def test_an_internal_topic_that_cannot_be_created_is_named_with_its_partition_count(
    monkeypatch,
):
    from confluent_kafka import KafkaError, KafkaException

    class Refused:
        def result(self):
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    class Client:
        def create_topics(self, topics, request_timeout):
            return {t.topic: Refused() for t in topics}

    admin = KafkaAdmin("127.0.0.1:1", timeout_ms=1000)
    try:
        monkeypatch.setattr(admin, "topic_partitions", lambda topics: {})
        monkeypatch.setattr(admin, "_client", lambda: Client())
        with pytest.raises(
            StreamtableError,
            match=r"Could not create the internal topic 'app-by-product-repartition': .*Create "
            r"it yourself \(3 partitions\) or grant the application CREATE on topics prefixed",
        ):
            admin.ensure_internal_topic("app-by-product-repartition", 3)
    finally:
        admin.close()
