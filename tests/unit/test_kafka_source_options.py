"""The client options every Kafka source gets (a dead source leader must not stall a query 60 s)."""

from streamtable.runtime.kafka_source_options import (
    OFFSET_FETCH_BUDGET_MS,
    SOURCE_REQUEST_TIMEOUT_MS,
    kafka_source_options,
)


def _ms(options, key):
    return int(options[f"kafka.{key}"])


def test_defaults_bound_each_request_and_keep_sparks_retry_budget():
    opts = kafka_source_options({})
    assert _ms(opts, "request.timeout.ms") == SOURCE_REQUEST_TIMEOUT_MS < 60_000
    assert _ms(opts, "default.api.timeout.ms") == SOURCE_REQUEST_TIMEOUT_MS
    attempts = int(opts["fetchOffset.numRetries"])
    assert attempts * SOURCE_REQUEST_TIMEOUT_MS >= OFFSET_FETCH_BUDGET_MS == 3 * 60_000


def test_consumer_settings_win_and_the_api_timeout_never_falls_below_the_request_timeout():
    # Kafka refuses default.api.timeout.ms < request.timeout.ms (ConfigException at start)
    for consumer in (
        {"request.timeout.ms": 45_000},
        {"default.api.timeout.ms": 4_000},
        {"request.timeout.ms": 20_000, "default.api.timeout.ms": 90_000},
    ):
        opts = kafka_source_options(consumer)
        for key, value in consumer.items():
            assert _ms(opts, key) == value
        assert _ms(opts, "default.api.timeout.ms") >= _ms(opts, "request.timeout.ms"), consumer
        assert int(opts["fetchOffset.numRetries"]) >= 3


def test_every_consumer_setting_is_passed_with_the_kafka_prefix():
    opts = kafka_source_options({"security.protocol": "SSL", "max.poll.records": 100})
    assert opts["kafka.security.protocol"] == "SSL"
    assert opts["kafka.max.poll.records"] == "100"
