"""The client options every Kafka source gets (a dead source leader must not stall a query 60 s)."""

import pytest

from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError
from streamtable.runtime.kafka_source_options import (
    OFFSET_FETCH_BUDGET_MS,
    SOURCE_API_TIMEOUT_MS,
    SOURCE_REQUEST_TIMEOUT_MS,
    kafka_source_options,
)


def _ms(options, key):
    return int(options[f"kafka.{key}"])


def test_defaults_bound_each_call_and_keep_sparks_retry_budget():
    opts = kafka_source_options({})
    assert _ms(opts, "request.timeout.ms") == SOURCE_REQUEST_TIMEOUT_MS
    assert _ms(opts, "default.api.timeout.ms") == SOURCE_API_TIMEOUT_MS < 60_000
    # Spark sleeps 1 s between attempts
    attempts = int(opts["fetchOffset.numRetries"])
    assert attempts * (SOURCE_API_TIMEOUT_MS + 1000) >= OFFSET_FETCH_BUDGET_MS == 3 * 60_000


def test_consumer_settings_win_and_the_api_timeout_never_falls_below_the_request_timeout():
    # Kafka's admin client refuses default.api.timeout.ms < request.timeout.ms at start
    for consumer in (
        {"request.timeout.ms": 45_000},
        {"request.timeout.ms": "45000"},  # StreamsConfig keeps consumer.* values as given
        {"default.api.timeout.ms": 4_000},
        {"request.timeout.ms": 20_000, "default.api.timeout.ms": 90_000},
    ):
        opts = kafka_source_options(consumer)
        for key, value in consumer.items():
            assert _ms(opts, key) == int(value)
        assert _ms(opts, "default.api.timeout.ms") >= _ms(opts, "request.timeout.ms"), consumer
        assert int(opts["fetchOffset.numRetries"]) >= 3


def test_every_consumer_setting_is_passed_with_the_kafka_prefix_and_none_is_unset():
    opts = kafka_source_options(
        {"security.protocol": "SSL", "max.poll.records": 100, "request.timeout.ms": None}
    )
    assert opts["kafka.security.protocol"] == "SSL"
    assert opts["kafka.max.poll.records"] == "100"
    assert _ms(opts, "request.timeout.ms") == SOURCE_REQUEST_TIMEOUT_MS


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("request.timeout.ms", "30s", "expects an int, got str '30s'"),
        ("default.api.timeout.ms", 0, "must be >= 1, got 0"),
        ("default.api.timeout.ms", True, "expects an int, got bool True"),
        ("request.timeout.ms", 4.9, "expects an int, got float 4.9"),
    ],
)
def test_a_source_timeout_that_is_not_a_positive_int_is_refused_naming_its_key(
    key, value, expected
):
    with pytest.raises(ConfigError) as e:
        StreamsConfig.from_mapping(
            {"application.id": "a", "bootstrap.servers": "b:1", f"consumer.{key}": value}
        )
    assert str(e.value) == f"Config 'consumer.{key}' {expected}"


def test_a_source_timeout_given_as_a_string_is_an_int_in_the_consumer_config():
    cfg = StreamsConfig.from_mapping(
        {"application.id": "a", "bootstrap.servers": "b:1", "consumer.request.timeout.ms": "40000"}
    )
    assert cfg.consumer_config == {"request.timeout.ms": 40000}
    assert kafka_source_options(cfg.consumer_config)["kafka.default.api.timeout.ms"] == "40000"
