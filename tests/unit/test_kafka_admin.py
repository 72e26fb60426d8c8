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


def test_internal_topics_are_created_with_the_configured_replication_factor(monkeypatch):
    """``replication.factor`` applies to the internal topics (Kafka Streams:
    changelog and repartition topics); it was ignored, -1 (the broker's default) always.
    """
    created = []

    class Done:
        def result(self):
            return None

    class Client:
        def create_topics(self, topics, request_timeout):
            created.extend((t.topic, t.replication_factor) for t in topics)
            return {t.topic: Done() for t in topics}

    for rf in (-1, 3):
        admin = KafkaAdmin("127.0.0.1:1", timeout_ms=1000, replication_factor=rf)
        try:
            monkeypatch.setattr(admin, "topic_partitions", lambda topics: {})
            monkeypatch.setattr(admin, "_client", lambda: Client())
            admin.ensure_internal_topics({f"app-s{rf}-changelog": 2}, {})
        finally:
            admin.close()
    assert created == [("app-s-1-changelog", -1), ("app-s3-changelog", 3)]


class _Metadata:
    """What ``AdminClient.list_topics`` returns, for the topics a test names."""

    def __init__(self, topics):
        self.topics = topics


class _Topic:
    def __init__(self, partitions, error=None):
        self.partitions = dict.fromkeys(range(partitions))
        self.error = error


def _admin_listing(monkeypatch, listings):
    """A ``KafkaAdmin`` whose metadata requests answer ``listings`` in turn (the last repeats)."""

    class Client:
        calls = 0

        def list_topics(self, timeout):
            Client.calls += 1
            return _Metadata(listings[min(Client.calls, len(listings)) - 1])

    admin = KafkaAdmin("127.0.0.1:1", timeout_ms=1000)
    monkeypatch.setattr(admin, "_client", lambda: Client())
    return admin, Client


def test_a_topic_whose_metadata_reports_an_error_is_asked_again_not_taken_as_missing(
    monkeypatch,
):
    # LEADER_NOT_AVAILABLE while a broker restarts: the topic exists; read as missing, the
    # start would refuse a "deleted" repartition topic and tell the user to reset
    from confluent_kafka import KafkaError

    leaderless = _Topic(0, KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
    admin, client = _admin_listing(
        monkeypatch, [{"app-r-repartition": leaderless}, {"app-r-repartition": _Topic(3)}]
    )
    try:
        assert admin.topic_partitions(["app-r-repartition", "gone"]) == {"app-r-repartition": 3}
        assert client.calls == 2
    finally:
        admin.close()


def test_a_topic_whose_metadata_keeps_reporting_an_error_is_named(monkeypatch, tmp_path):
    from confluent_kafka import KafkaError

    from streamtable.runtime.repartition_topics import ensure_repartition_topics

    leaderless = _Topic(0, KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
    admin, _ = _admin_listing(monkeypatch, [{"app-r-repartition": leaderless, "other": _Topic(1)}])
    try:
        with pytest.raises(
            StreamtableError,
            match=r"The metadata of topic\(s\) \['app-r-repartition'\] on 127.0.0.1:1 still "
            r"reports an error after 1 s \(app-r-repartition: .*\): the topics exist",
        ):
            ensure_repartition_topics(admin, {"app-r-repartition": 3}, tmp_path)
        # listing every topic (reset), a topic with an error is left out, as before
        assert admin.topic_partitions() == {"other": 1}
    finally:
        admin.close()
