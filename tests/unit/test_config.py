# ruff: noqa: E501 — tables of (input, expected message) read best on one line
import os
import pathlib
import tempfile

import pytest

from streamtable.config import KNOWN_KEYS, StreamsConfig
from streamtable.errors import ConfigError
from streamtable.serde import Serdes

pytestmark = pytest.mark.unit

BASE = {"application.id": "app-1", "bootstrap.servers": "localhost:9092"}


def cfg(extra):
    return StreamsConfig.from_mapping({**BASE, **extra})


def test_defaults():
    c = StreamsConfig.from_mapping(BASE)
    assert c.application_id == "app-1"
    assert c.bootstrap_servers == "localhost:9092"
    assert c.processing_guarantee == "at_least_once"
    assert c.state_dir == os.path.join(tempfile.gettempdir(), "streamtable")
    assert c.checkpoint_dir == os.path.join(tempfile.gettempdir(), "streamtable", "app-1")
    assert c.commit_interval_ms == 1000
    assert c.default_key_serde is None and c.default_value_serde is None
    assert c.deserialization_handler == "log_and_fail"
    assert c.num_stream_threads == 1
    assert c.auto_offset_reset == "earliest"
    assert c.max_task_idle_ms == 0
    assert c.replication_factor == -1
    assert c.client_id == ""
    assert c.statestore_cache_max_bytes == 10485760
    assert c.request_timeout_ms == 30000
    assert c.trigger == "processing_time"
    assert c.shuffle_partitions == 4
    assert c.max_offsets_per_trigger is None
    assert c.spark_conf == {} and c.consumer_config == {} and c.producer_config == {}
    assert c.admin_config == {}


def test_all_keys_set():
    c = cfg(
        {
            "processing.guarantee": "exactly_once_v2",
            "state.dir": pathlib.Path("/var/lib/st"),
            "commit.interval.ms": "250",
            "default.key.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
            "default.value.serde": Serdes.json({"a": "long"}),
            "deserialization.exception.handler": "LogAndContinueExceptionHandler",
            "num.stream.threads": 8,
            "auto.offset.reset": "latest",
            "max.task.idle.ms": -1,
            "replication.factor": 3,
            "client.id": "me",
            "statestore.cache.max.bytes": 0,
            "request.timeout.ms": 5000,
            "streamtable.trigger": "available_now",
            "streamtable.shuffle.partitions": 12,
            "streamtable.max.offsets.per.trigger": 100000,
            "spark.sql.adaptive.enabled": True,
            "spark.driver.memory": "2g",
            "spark.sql.shuffle.partitions": 8,
            "consumer.max.poll.records": 500,
            "producer.linger.ms": 5,
            "admin.retries": 3,
        }
    )
    assert c.processing_guarantee == "exactly_once_v2"
    assert c.state_dir == "/var/lib/st"
    assert c.checkpoint_dir == os.path.join("/var/lib/st", "app-1")
    assert c.commit_interval_ms == 250
    assert c.default_key_serde == Serdes.string()
    assert c.default_value_serde == Serdes.json({"a": "long"})
    assert c.deserialization_handler == "log_and_continue"
    assert c.num_stream_threads == 8
    assert c.auto_offset_reset == "latest"
    assert c.max_task_idle_ms == -1
    assert c.replication_factor == 3
    assert c.client_id == "me"
    assert c.statestore_cache_max_bytes == 0
    assert c.request_timeout_ms == 5000
    assert c.trigger == "available_now"
    assert c.shuffle_partitions == 12
    assert c.max_offsets_per_trigger == 100000
    assert c.spark_conf == {
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.memory": "2g",
        "spark.sql.shuffle.partitions": "8",
    }
    assert c.consumer_config == {"max.poll.records": 500}
    assert c.producer_config == {"linger.ms": 5}
    assert c.admin_config == {"retries": 3}
    assert StreamsConfig.from_mapping(c.to_mapping()) == c


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("log_and_fail", "log_and_fail"),
        ("log_and_continue", "log_and_continue"),
        ("LogAndFailExceptionHandler", "log_and_fail"),
        ("org.apache.kafka.streams.errors.LogAndContinueExceptionHandler", "log_and_continue"),
        ("org.apache.kafka.streams.errors.LogAndFailExceptionHandler", "log_and_fail"),
    ],
)
@pytest.mark.parametrize(
    "key", ["deserialization.exception.handler", "default.deserialization.exception.handler"]
)
def test_deserialization_handler_spellings(key, value, expected):
    assert cfg({key: value}).deserialization_handler == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("localhost:9092", "localhost:9092"),
        ("a:1, b:2", "a:1,b:2"),
        (["a:1", "b:2"], "a:1,b:2"),
        ("[::1]:9092", "[::1]:9092"),
        ("PLAINTEXT://broker:9092", "PLAINTEXT://broker:9092"),
    ],
)
def test_bootstrap_servers_forms(value, expected):
    assert cfg({"bootstrap.servers": value}).bootstrap_servers == expected


def test_none_means_default_and_instance_passthrough():
    c = cfg({"commit.interval.ms": None, "state.dir": None, "default.key.serde": None})
    assert c.commit_interval_ms == 1000
    assert c.state_dir == os.path.join(tempfile.gettempdir(), "streamtable")
    assert StreamsConfig.from_mapping(c) is c


def test_immutable():
    c = StreamsConfig.from_mapping(BASE)
    with pytest.raises(AttributeError):
        c.application_id = "x"  # type: ignore[misc]
    c.spark_conf["spark.x"] = "y"
    assert c.spark_conf == {}


def test_known_keys_documented():
    doc = StreamsConfig.__doc__
    for key in KNOWN_KEYS:
        assert f"``{key}``" in doc, key


@pytest.mark.parametrize(
    ("mapping", "match"),
    [
        ({"bootstrap.servers": "x:1"}, r"Config 'application.id' is required \(e.g. 'wordcount'\)"),
        (
            {"application.id": "a"},
            r"Config 'bootstrap.servers' is required \(e.g. 'localhost:9092'\)",
        ),
        (
            {"application.id": None, "bootstrap.servers": "x:1"},
            r"Config 'application.id' is required and must not be None",
        ),
        (
            {**BASE, "application.id": "my app"},
            r"Config 'application.id' must be 1-249 characters from \[a-zA-Z0-9._-\].*got 'my app'",
        ),
        (
            {**BASE, "application.id": "a" * 250},
            r"Config 'application.id' must be 1-249 characters",
        ),
        (
            {**BASE, "application.id": ".."},
            r"Config 'application.id' must not be '\.\.': .* 'state.dir' itself or its parent",
        ),
        ({**BASE, "application.id": 5}, r"Config 'application.id' expects a str, got int 5"),
        ({**BASE, "application.id": ""}, r"Config 'application.id' expects a non-empty str"),
        (
            {**BASE, "bootstrap.servers": "localhost"},
            r"Config 'bootstrap.servers' expects 'host:port\[,host:port...\]', got 'localhost' \(invalid entry 'localhost'\)",
        ),
        ({**BASE, "bootstrap.servers": "a:1,b:x"}, r"invalid entry 'b:x'"),
        ({**BASE, "bootstrap.servers": "a:99999"}, r"invalid entry 'a:99999'"),
        ({**BASE, "bootstrap.servers": [1]}, r"Config 'bootstrap.servers' expects 'host:port"),
        (
            {**BASE, "bootstrap.server": "x:1"},
            r"Unknown config key 'bootstrap.server'. Did you mean 'bootstrap.servers'\? Known keys: application.id, ",
        ),
        (
            {**BASE, "commit.interval": 5},
            r"Unknown config key 'commit.interval'. Did you mean 'commit.interval.ms'\?",
        ),
        ({**BASE, "streamtable.triger": "x"}, r"Did you mean 'streamtable.trigger'\?"),
        (
            {**BASE, "totally.unrelated": 1},
            r"Unknown config key 'totally.unrelated'. Known keys: .*'spark.' are passed to Spark.*'consumer.', 'producer.', 'admin.'",
        ),
        ({**BASE, 5: 1}, r"Config keys must be str, got int 5"),
        (
            {**BASE, "processing.guarantee": "exactly_once"},
            r"Config 'processing.guarantee' expects one of 'at_least_once' \| 'exactly_once_v2', got 'exactly_once'. 'exactly_once' and 'exactly_once_beta' were removed in Kafka 4.0; use 'exactly_once_v2'.",
        ),
        (
            {**BASE, "processing.guarantee": "none"},
            r"Config 'processing.guarantee' expects one of 'at_least_once' \| 'exactly_once_v2', got 'none'.$",
        ),
        ({**BASE, "commit.interval.ms": -1}, r"Config 'commit.interval.ms' must be >= 0, got -1"),
        (
            {**BASE, "commit.interval.ms": 1.5},
            r"Config 'commit.interval.ms' expects an int, got float 1.5",
        ),
        (
            {**BASE, "commit.interval.ms": True},
            r"Config 'commit.interval.ms' expects an int, got bool True",
        ),
        (
            {**BASE, "commit.interval.ms": "1s"},
            r"Config 'commit.interval.ms' expects an int, got str '1s'",
        ),
        (
            {**BASE, "default.key.serde": "Strin"},
            r"Config 'default.key.serde': Unknown serde name 'Strin'. Did you mean 'String'\?",
        ),
        (
            {**BASE, "default.value.serde": 5},
            r"Config 'default.value.serde' expects a Serde or a serde name such as 'String'",
        ),
        (
            {**BASE, "deserialization.exception.handler": "skip"},
            r"Config 'deserialization.exception.handler' expects one of 'log_and_fail' \| 'log_and_continue', got 'skip'",
        ),
        (
            {
                **BASE,
                "deserialization.exception.handler": "log_and_fail",
                "default.deserialization.exception.handler": "log_and_continue",
            },
            r"Config 'default.deserialization.exception.handler' \('log_and_continue'\) conflicts with 'deserialization.exception.handler' \('log_and_fail'\)",
        ),
        ({**BASE, "num.stream.threads": 0}, r"Config 'num.stream.threads' must be >= 1, got 0"),
        (
            {**BASE, "auto.offset.reset": "none"},
            r"Config 'auto.offset.reset' expects one of 'earliest' \| 'latest', got 'none'. Kafka's 'none' and 'by_duration:...' are not supported.",
        ),
        (
            {**BASE, "max.task.idle.ms": -2},
            r"Config 'max.task.idle.ms' must be >= 0 \(or -1\), got -2",
        ),
        (
            {**BASE, "replication.factor": 0},
            r"Config 'replication.factor' must be >= 1 \(or -1\), got 0",
        ),
        ({**BASE, "client.id": 3}, r"Config 'client.id' expects a str, got int 3"),
        (
            {**BASE, "statestore.cache.max.bytes": -5},
            r"Config 'statestore.cache.max.bytes' must be >= 0, got -5",
        ),
        ({**BASE, "request.timeout.ms": 0}, r"Config 'request.timeout.ms' must be >= 1, got 0"),
        ({**BASE, "state.dir": 3}, r"Config 'state.dir' expects a str, got int 3"),
        (
            {**BASE, "streamtable.trigger": "once"},
            r"Config 'streamtable.trigger' expects one of 'processing_time' \| 'available_now' \| 'real_time', got 'once'",
        ),
        (
            {**BASE, "streamtable.shuffle.partitions": 0},
            r"Config 'streamtable.shuffle.partitions' must be >= 1, got 0",
        ),
        (
            {**BASE, "streamtable.max.offsets.per.trigger": 0},
            r"Config 'streamtable.max.offsets.per.trigger' must be >= 1, got 0",
        ),
        (
            {**BASE, "spark.driver.memory": None},
            r"Config 'spark.driver.memory' \(passed to Spark\) must not be None",
        ),
        (
            {**BASE, "spark.jars": ["a"]},
            r"Config 'spark.jars' \(passed to Spark\) expects a str, int, float or bool, got list",
        ),
        (
            {**BASE, "consumer.": 1},
            r"Config 'consumer.' has an empty client config name after the prefix",
        ),
    ],
)
def test_errors(mapping, match):
    with pytest.raises(ConfigError, match=match):
        StreamsConfig.from_mapping(mapping)


def test_not_a_mapping():
    with pytest.raises(
        ConfigError, match=r"StreamsConfig expects a mapping of config keys to values, got list"
    ):
        StreamsConfig.from_mapping([("application.id", "a")])  # type: ignore[arg-type]


def test_config_error_is_value_error():
    with pytest.raises(ValueError):
        StreamsConfig.from_mapping({})


@pytest.mark.parametrize(
    "key, message",
    [
        ("consumer.auto.offset.reset", r"Spark's Kafka source .* Use 'auto.offset.reset'"),
        ("consumer.enable.auto.commit", r"commits the processed offsets .* itself"),
        ("main.consumer.max.poll.records", r"use 'consumer.max.poll.records'"),
        ("restore.consumer.fetch.min.bytes", r"use 'consumer.fetch.min.bytes'"),
        ("global.consumer.auto.offset.reset", r"Use 'auto.offset.reset' without the prefix"),
        ("topology.optimization", r"no optimizations to switch"),
        ("cache.max.bytes.buffering", r"deprecated name of 'statestore.cache.max.bytes'"),
        ("security.protocol", r"'consumer.security.protocol', 'producer.security.protocol'"),
    ],
)
def test_kafka_streams_keys_streamtable_takes_otherwise_say_what_to_use(key, message):
    """A properties file carried over from Kafka Streams fails on these keys with the key to
    use instead (they used to get the generic unknown-key message, or a raw Spark error).
    """
    with pytest.raises(ConfigError, match=message):
        StreamsConfig.from_mapping({"application.id": "a", "bootstrap.servers": "b:9092", key: "x"})
