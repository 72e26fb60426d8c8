"""Typed, immutable configuration with Kafka Streams' key names."""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from streamtable.errors import ConfigError
from streamtable.serde import Serde, Serdes

__all__ = ["StreamsConfig", "KNOWN_KEYS", "CLIENT_PREFIXES", "is_loopback", "split_host_port"]

ProcessingGuarantee = Literal["at_least_once", "exactly_once_v2"]
DeserializationHandler = Literal["log_and_fail", "log_and_continue"]
ProcessingHandler = Literal["log_and_fail", "log_and_continue"]
ProductionHandler = Literal["fail", "continue"]
Trigger = Literal["processing_time", "available_now", "real_time"]
OffsetReset = Literal["earliest", "latest"]
InvalidTimestampPolicy = Literal["skip", "fail"]

#: Prefixes of Kafka client configs passed through (prefix stripped) to the matching client.
CLIENT_PREFIXES = ("consumer.", "producer.", "admin.")
#: ``consumer.*`` keys parsed as ints: the Kafka source's options are computed from them
_SOURCE_TIMEOUTS = frozenset({"request.timeout.ms", "default.api.timeout.ms"})

_APP_ID_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
_MAX_APP_ID_LEN = 249  # Kafka's maximum topic-name length; internal topics are prefixed with it


def _default_state_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "streamtable")


# ------------------------------------------------------------------------------------------------
# Value parsers: each takes (key, raw value) and returns the typed value or raises ConfigError.
# ------------------------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return type(value).__name__


def _str(key: str, value: object, *, non_empty: bool = True) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ConfigError(f"Config {key!r} expects a str, got {_type_name(value)} {value!r}")
    if non_empty and not value.strip():
        raise ConfigError(f"Config {key!r} expects a non-empty str, got {value!r}")
    return value


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"Config {key!r} expects true or false, got {_type_name(value)} {value!r}")


def _int(
    key: str, value: object, *, minimum: int | None = None, allowed: tuple[int, ...] = ()
) -> int:
    parsed: int
    if isinstance(value, bool):
        raise ConfigError(f"Config {key!r} expects an int, got bool {value!r}")
    if isinstance(value, int):
        parsed = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
        parsed = int(value)  # Kafka's ConfigDef also parses ints given as strings
    else:
        raise ConfigError(f"Config {key!r} expects an int, got {_type_name(value)} {value!r}")
    if minimum is not None and parsed < minimum and parsed not in allowed:
        extra = f" (or {' or '.join(map(str, allowed))})" if allowed else ""
        raise ConfigError(f"Config {key!r} must be >= {minimum}{extra}, got {parsed}")
    return parsed


def _choice(key: str, value: object, choices: Mapping[str, str], hint: str = "") -> str:
    """Map ``value`` (case-insensitive) through ``choices`` (accepted spelling -> canonical)."""
    if isinstance(value, str):
        norm = value.strip()
        for spelled, canonical in choices.items():
            if norm.lower() == spelled.lower():
                return canonical
    canonical_values = list(dict.fromkeys(choices.values()))
    expected = " | ".join(repr(c) for c in canonical_values)
    raise ConfigError(f"Config {key!r} expects one of {expected}, got {value!r}.{hint}")


def _bootstrap_servers(key: str, value: object) -> str:
    if isinstance(value, list | tuple):
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(f"Config {key!r} expects 'host:port[,host:port...]', got {value!r}")
        value = ",".join(value)
    text = _str(key, value)
    entries = [e.strip() for e in text.split(",")]
    for entry in entries:
        host, sep, port = entry.rpartition(":")
        if "://" in host:
            host = host.split("://", 1)[1]
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"Config {key!r} expects 'host:port[,host:port...]', got {text!r} "
                f"(invalid entry {entry!r})"
            )
    return ",".join(entries)


def _application_id(key: str, value: object) -> str:
    text = _str(key, value)
    if not _APP_ID_RE.match(text) or len(text) > _MAX_APP_ID_LEN:
        raise ConfigError(
            f"Config {key!r} must be 1-{_MAX_APP_ID_LEN} characters from [a-zA-Z0-9._-] "
            f"(it prefixes Kafka topic names and the consumer group id), got {text!r}"
        )
    if text in (".", ".."):
        raise ConfigError(
            f"Config {key!r} must not be {text!r}: it names the application's folder under "
            "'state.dir', and this would be 'state.dir' itself or its parent"
        )
    return text


def _serde(key: str, value: object) -> Serde:
    if isinstance(value, Serde):
        return value
    if isinstance(value, str):
        try:
            return Serdes.from_name(value)
        except ConfigError as e:
            raise ConfigError(f"Config {key!r}: {e}") from None
    raise ConfigError(
        f"Config {key!r} expects a Serde or a serde name such as 'String' or "
        f"'org.apache.kafka.common.serialization.Serdes$StringSerde', "
        f"got {_type_name(value)} {value!r}"
    )


_GUARANTEES = {"at_least_once": "at_least_once", "exactly_once_v2": "exactly_once_v2"}
_HANDLERS = {
    "log_and_fail": "log_and_fail",
    "log_and_continue": "log_and_continue",
    "LogAndFailExceptionHandler": "log_and_fail",
    "LogAndContinueExceptionHandler": "log_and_continue",
    "org.apache.kafka.streams.errors.LogAndFailExceptionHandler": "log_and_fail",
    "org.apache.kafka.streams.errors.LogAndContinueExceptionHandler": "log_and_continue",
}
_KAFKA_ERRORS = "org.apache.kafka.streams.errors."
_PROCESSING_HANDLERS = {
    "log_and_fail": "log_and_fail",
    "log_and_continue": "log_and_continue",
    "LogAndFailProcessingExceptionHandler": "log_and_fail",
    "LogAndContinueProcessingExceptionHandler": "log_and_continue",
    _KAFKA_ERRORS + "LogAndFailProcessingExceptionHandler": "log_and_fail",
    _KAFKA_ERRORS + "LogAndContinueProcessingExceptionHandler": "log_and_continue",
}
_PRODUCTION_HANDLERS = {
    "fail": "fail",
    "continue": "continue",
    "DefaultProductionExceptionHandler": "fail",
    _KAFKA_ERRORS + "DefaultProductionExceptionHandler": "fail",
}
_TRIGGERS = {
    "processing_time": "processing_time",
    "available_now": "available_now",
    "real_time": "real_time",
}
_OFFSET_RESETS = {"earliest": "earliest", "latest": "latest"}
_TIMESTAMP_POLICIES = {
    "skip": "skip",
    "fail": "fail",
    "LogAndSkipOnInvalidTimestamp": "skip",
    "FailOnInvalidTimestamp": "fail",
    "org.apache.kafka.streams.processor.LogAndSkipOnInvalidTimestamp": "skip",
    "org.apache.kafka.streams.processor.FailOnInvalidTimestamp": "fail",
}


def _guarantee(key: str, value: object) -> str:
    hint = ""
    if isinstance(value, str) and value.strip().lower() in ("exactly_once", "exactly_once_beta"):
        hint = (
            " 'exactly_once' and 'exactly_once_beta' were removed in Kafka 4.0;"
            " use 'exactly_once_v2'."
        )
    return _choice(key, value, _GUARANTEES, hint)


def _offset_reset(key: str, value: object) -> str:
    hint = " Kafka's 'none' and 'by_duration:...' are not supported."
    return _choice(key, value, _OFFSET_RESETS, hint)


def _timestamp_policy(key: str, value: object) -> str:
    hint = ""
    if isinstance(value, str) and "UsePartitionTimeOnInvalidTimestamp" in value:
        hint = (
            " Kafka Streams' UsePartitionTimeOnInvalidTimestamp is not supported (it needs each"
            " partition's stream time across micro-batches)."
        )
    return _choice(key, value, _TIMESTAMP_POLICIES, hint)


def _processing_handler(key: str, value: object) -> str:
    hint = ""
    if isinstance(value, str) and value.strip().endswith(
        ("LogAndFailExceptionHandler", "LogAndContinueExceptionHandler")
    ):
        hint = (
            " That is a deserialization handler; the processing handlers are"
            " LogAndFailProcessingExceptionHandler and LogAndContinueProcessingExceptionHandler."
        )
    return _choice(key, value, _PROCESSING_HANDLERS, hint)


def _production_handler(key: str, value: object) -> str:
    hint = (
        " Kafka's DefaultProductionExceptionHandler is 'fail'; custom handler classes are not"
        " supported."
    )
    return _choice(key, value, _PRODUCTION_HANDLERS, hint)


#: Kafka's rule for topic names (``org.apache.kafka.common.internals.Topic``).
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def _topic(key: str, value: object) -> str:
    text = _str(key, value)
    if not _TOPIC_RE.match(text) or text in (".", ".."):
        raise ConfigError(
            f"Config {key!r} expects a Kafka topic name: 1-249 characters from "
            f"[a-zA-Z0-9._-], not '.' or '..'; got {text!r}"
        )
    return text


def _http_url(key: str, value: object) -> str:
    text = _str(key, value)
    if not text.startswith(("http://", "https://")):
        raise ConfigError(
            f"Config {key!r} expects Kafka Connect's REST URL (http://host:port), got {text!r}"
        )
    return text


def _names(key: str, value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ConfigError(
            f"Config {key!r} expects names as a comma-separated str or a list of str, "
            f"got {_type_name(value)} {value!r}"
        )
    return tuple(i.strip() for i in items if i.strip())


def split_host_port(address: str) -> tuple[str, int]:
    """``(host, port)`` of a ``host:port`` address (an IPv6 host in brackets: ``[::1]:8080``).

    Raises
    ------
    ValueError
        When ``address`` is not ``host:port`` with a port in 1-65535.

    Examples
    --------
    >>> split_host_port("127.0.0.1:8080")
    ('127.0.0.1', 8080)
    >>> split_host_port("[::1]:8080")
    ('::1', 8080)
    """
    host, sep, port = address.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected 'host:port' with a port in 1-65535, got {address!r}")
    if ":" in host and not address.strip().startswith("["):
        raise ValueError(f"write an IPv6 host in brackets ('[::1]:8080'), got {address!r}")
    if any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"invalid host {host!r} in {address!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only: ``localhost``, ``127.0.0.0/8`` or ``::1``.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost
        return False


def _application_server(key: str, value: object) -> str:
    text = _str(key, value).strip()
    try:
        split_host_port(text)
    except ValueError as e:
        raise ConfigError(
            f"Config {key!r} expects 'host:port' where the HTTP query service listens "
            f"(e.g. '127.0.0.1:8080'): {e}"
        ) from None
    return text


def _metrics_address(key: str, value: object) -> str:
    """``host:port`` of the Prometheus endpoint; a bare port (``9400``, ``":9400"``) is
    loopback (``127.0.0.1``).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    text = _str(key, value).strip()
    if text.isdigit() or (text.startswith(":") and text[1:].isdigit()):
        text = "127.0.0.1:" + text.lstrip(":")
    try:
        host, port = split_host_port(text)
    except ValueError as e:
        raise ConfigError(
            f"Config {key!r} expects 'host:port' or a port where the Prometheus metrics "
            f"endpoint listens (e.g. '127.0.0.1:9400' or 9400): {e}"
        ) from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _max_offsets(key: str, value: object) -> int | None:
    return None if value is None else _int(key, value, minimum=1)


# key -> (attribute name, parser, default). A default of _REQUIRED means the key is required.
_REQUIRED = object()
_Parser = Callable[[str, object], Any]

_KEYS: dict[str, tuple[str, _Parser, Any]] = {
    "application.id": ("application_id", _application_id, _REQUIRED),
    "bootstrap.servers": ("bootstrap_servers", _bootstrap_servers, _REQUIRED),
    "processing.guarantee": ("processing_guarantee", _guarantee, "at_least_once"),
    "state.dir": ("state_dir", _str, None),  # None -> <tempdir>/streamtable
    "commit.interval.ms": ("commit_interval_ms", lambda k, v: _int(k, v, minimum=0), 1000),
    "default.key.serde": ("default_key_serde", _serde, None),
    "default.value.serde": ("default_value_serde", _serde, None),
    "deserialization.exception.handler": (
        "deserialization_handler",
        lambda k, v: _choice(k, v, _HANDLERS),
        None,
    ),
    "default.deserialization.exception.handler": (
        "deserialization_handler",
        lambda k, v: _choice(k, v, _HANDLERS),
        None,
    ),
    "processing.exception.handler": (
        "processing_exception_handler",
        _processing_handler,
        "log_and_fail",
    ),
    "production.exception.handler": (
        "production_exception_handler",
        _production_handler,
        "fail",
    ),
    "default.production.exception.handler": (
        "production_exception_handler",
        _production_handler,
        "fail",
    ),
    "errors.dead.letter.queue.topic.name": ("dead_letter_queue_topic", _topic, None),
    "num.stream.threads": ("num_stream_threads", lambda k, v: _int(k, v, minimum=1), 1),
    "auto.offset.reset": ("auto_offset_reset", _offset_reset, "earliest"),
    "max.task.idle.ms": ("max_task_idle_ms", lambda k, v: _int(k, v, minimum=0, allowed=(-1,)), 0),
    "replication.factor": (
        "replication_factor",
        lambda k, v: _int(k, v, minimum=1, allowed=(-1,)),
        -1,
    ),
    "client.id": ("client_id", lambda k, v: _str(k, v, non_empty=False), ""),
    "statestore.cache.max.bytes": (
        "statestore_cache_max_bytes",
        lambda k, v: _int(k, v, minimum=0),
        10 * 1024 * 1024,
    ),
    "request.timeout.ms": ("request_timeout_ms", lambda k, v: _int(k, v, minimum=1), 30000),
    "task.timeout.ms": ("task_timeout_ms", lambda k, v: _int(k, v, minimum=0), 300000),
    "repartition.purge.interval.ms": (
        "repartition_purge_interval_ms",
        lambda k, v: _int(k, v, minimum=0),
        30000,
    ),
    "application.server": ("application_server", _application_server, None),
    "streamtable.query.token": ("query_token", _str, None),
    "streamtable.metrics.address": ("metrics_address", _metrics_address, None),
    "streamtable.trigger": ("trigger", lambda k, v: _choice(k, v, _TRIGGERS), "processing_time"),
    "streamtable.shuffle.partitions": ("shuffle_partitions", lambda k, v: _int(k, v, minimum=1), 4),
    "streamtable.max.offsets.per.trigger": ("max_offsets_per_trigger", _max_offsets, None),
    "streamtable.invalid.timestamp.policy": (
        "invalid_timestamp_policy",
        _timestamp_policy,
        "skip",
    ),
    "streamtable.audit.topic": ("audit_topic", _topic, None),
    "streamtable.spark.log": ("spark_log", _str, None),  # None -> <state.dir>/logs/spark.log
    "streamtable.connect.url": ("connect_url", _http_url, None),
    "streamtable.connect.connectors": ("connect_connectors", _names, ()),
    "streamtable.jvm.class.data.sharing": ("class_data_sharing", _bool, True),
}

#: Attributes set by a key and by its deprecated ``default.``-prefixed twin -> the key to use.
_DEPRECATED_TWINS = {
    "deserialization_handler": "deserialization.exception.handler",
    "production_exception_handler": "production.exception.handler",
}

#: Every exact key :meth:`StreamsConfig.from_mapping` accepts (besides ``spark.*`` and
#: the client prefixes).
KNOWN_KEYS: tuple[str, ...] = tuple(_KEYS)


def _spark_value(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(
        f"Config {key!r} (passed to Spark) expects a str, int, float or bool, "
        f"got {_type_name(value)} {value!r}"
    )


#: Kafka Streams keys streamtable does not take, and what to do instead.
_UNSUPPORTED = {
    "default.timestamp.extractor": (
        "Pass timestamp_extractor= (e.g. streamtable.WallclockTimestamp() or "
        "streamtable.FieldTimestamp('field')) to StreamsBuilder.stream(), and choose what "
        "happens to records with invalid timestamps with 'streamtable.invalid.timestamp.policy' "
        "('skip' | 'fail')."
    ),
    "topology.optimization": (
        "streamtable compiles every topology one way and has no optimizations to switch "
        "(repartitions within a query are Spark shuffles already); drop the key."
    ),
    "cache.max.bytes.buffering": (
        "It is Kafka Streams' deprecated name of 'statestore.cache.max.bytes', which "
        "streamtable accepts (and does not use: updates coalesce per key and micro-batch)."
    ),
    "security.protocol": (
        "Give it to each Kafka client streamtable runs: 'consumer.security.protocol', "
        "'producer.security.protocol' and 'admin.security.protocol' (with the matching "
        "sasl./ssl. keys under the same prefixes)."
    ),
}

#: Kafka Streams' other client prefixes, and the prefix streamtable takes for them.
_OTHER_CLIENT_PREFIXES = {
    "main.consumer.": "consumer.",
    "restore.consumer.": "consumer.",
    "global.consumer.": "consumer.",
}

#: Consumer settings Spark's Kafka source refuses (it manages offsets itself), and the key
#: that does the same here.
_SOURCE_REFUSED = {
    "auto.offset.reset": "Use 'auto.offset.reset' without the prefix (Kafka Streams' key).",
    "enable.auto.commit": (
        "streamtable commits the processed offsets to the consumer group itself after each "
        "micro-batch, as Kafka Streams does; drop the key."
    ),
}


def _unknown_key(key: str) -> ConfigError:
    if key in _UNSUPPORTED:
        return ConfigError(f"Config {key!r} is not supported. {_UNSUPPORTED[key]}")
    for other, ours in _OTHER_CLIENT_PREFIXES.items():
        if key.startswith(other) and key[len(other) :] in _SOURCE_REFUSED:
            return ConfigError(f"Config {key!r} is not taken. {_SOURCE_REFUSED[key[len(other) :]]}")
        if key.startswith(other):
            return ConfigError(
                f"Config {key!r} is not supported: streamtable has one consumer prefix, "
                f"{ours!r}, for all the consumers it runs; use {ours + key[len(other) :]!r}."
            )
    close = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ConfigError(
        f"Unknown config key {key!r}.{hint} Known keys: {', '.join(KNOWN_KEYS)}; "
        f"keys starting with 'spark.' are passed to Spark and keys starting with "
        f"{', '.join(repr(p) for p in CLIENT_PREFIXES)} to the Kafka clients."
    )


@dataclass(frozen=True, slots=True)
class StreamsConfig:
    """Configuration of a streamtable application, with Kafka Streams' key names.

    Build it with :meth:`from_mapping`; read it through the snake_case attributes. Instances are
    immutable; dict-valued attributes return fresh copies.

    Keys
    ----
    - ``application.id`` (required, str):
      Identifies the application: consumer group id, prefix of internal topics, and the name of
      the checkpoint folder. 1-249 characters from ``[a-zA-Z0-9._-]``.
    - ``bootstrap.servers`` (required, str or list of str):
      ``host:port[,host:port...]`` of the Kafka brokers.
    - ``processing.guarantee`` (``"at_least_once"`` default | ``"exactly_once_v2"``):
      ``exactly_once_v2``: every result reaches ``read_committed`` consumers exactly once
      (one Kafka transaction per Spark task and micro-batch; see ``docs/exactly-once.md``).
    - ``state.dir`` (str or path; default ``<tempdir>/streamtable``):
      Root of local state; checkpoints go to ``state.dir/application.id``.
    - ``commit.interval.ms`` (int >= 0; default **1000**):
      In streamtable this is the micro-batch trigger interval: each batch commits its offsets
      and state. Kafka Streams' default is 30000; we choose 1000 for lower latency.
    - ``default.key.serde``, ``default.value.serde`` (Serde or name; default None):
      Serde objects, or names such as ``"String"``, ``"Long"`` or
      ``"org.apache.kafka.common.serialization.Serdes$StringSerde"``.
    - ``deserialization.exception.handler`` (``"log_and_fail"`` default | ``"log_and_continue"``):
      Also accepts Kafka's class names ``LogAndFailExceptionHandler`` and
      ``LogAndContinueExceptionHandler`` (short or fully qualified). The deprecated
      ``default.deserialization.exception.handler`` is accepted too; giving both with different
      values is an error. ``log_and_continue`` skips a record whose key or value its source
      serde cannot read, logs a warning naming topic, partition and offset, and counts it as
      dropped ``deserialization``; ``log_and_fail`` stops the application with that error.
      Every path from a topic (streams, tables, join and aggregation inputs) deserializes
      key and value in the first Python stage after the source; a source read by several
      sinks' queries is reported (counted, logged, dead-lettered) by the first one only.
    - ``processing.exception.handler`` (``"log_and_fail"`` default | ``"log_and_continue"``):
      What happens when user code of a stateless operator raises (``filter``, ``map``,
      ``map_values``, ``flat_map``, ``flat_map_values``, ``select_key``, ``peek``,
      ``foreach``, ``split`` predicates, KTable ``filter``/``map_values`` read as upserts,
      and timestamp extractors that raise):
      stop the application with an error naming the operator and the record (Kafka Streams'
      ``LogAndFailProcessingExceptionHandler``), or skip only that record, log a warning and
      count it as dropped ``processing`` (``LogAndContinueProcessingExceptionHandler``).
      Kafka's class names are accepted (short or fully qualified). User code inside stateful
      operators (aggregators, reducers, joiners, initializers, group-by selectors, GlobalKTable
      key selectors, foreign-key extractors) always fails the application; see
      ``docs/error-handling.md``.
    - ``production.exception.handler`` (``"fail"`` default | ``"continue"``):
      What happens when the producer or the broker rejects a record streamtable writes (too
      large, invalid, ...): stop the application (Kafka Streams'
      ``DefaultProductionExceptionHandler``, also accepted as a spelling) or skip the record
      with a warning. Under ``exactly_once_v2`` a record the broker rejects after it was sent
      aborts its task's transaction whatever the handler; one the producer refuses before
      sending it (too large) is skipped under ``continue`` and the transaction commits. The
      deprecated ``default.production.exception.handler`` is accepted too.
    - ``errors.dead.letter.queue.topic.name`` (str or None; default None):
      Kafka Streams' dead-letter queue (KIP-1034): records a handler skips or fails on
      (deserialization and processing errors) are also written to this topic, with the
      original key and value bytes of the source record, its timestamp, and headers
      ``__streams.errors.exception`` / ``.message`` / ``.stacktrace`` / ``.topic`` /
      ``.partition`` / ``.offset`` plus ``streamtable.errors.operator`` and
      ``streamtable.errors.reason``. The topic must exist (``start()`` fails naming it).
      Writes are transactional under ``exactly_once_v2``, at-least-once otherwise.
    - ``num.stream.threads`` (int >= 1; default 1):
      Accepted for compatibility and ignored: Spark decides parallelism
      (see ``streamtable.shuffle.partitions`` and the topic partitions).
    - ``auto.offset.reset`` (``"earliest"`` default | ``"latest"``):
      Where to start when the application has no committed offsets (Kafka Streams' default).
    - ``max.task.idle.ms`` (int >= 0 or -1; default 0): accepted for compatibility; not
      used by this version (Spark has no idle-partition synchronisation).
    - ``replication.factor`` (int >= 1 or -1 = broker default; default -1): the replication
      factor of the internal topics the application creates (changelog and repartition
      topics, the exactly-once markers), as in Kafka Streams.
    - ``client.id`` (str; default ``""``): accepted for compatibility; not used.
    - ``statestore.cache.max.bytes`` (int >= 0; default 10485760): accepted for
      compatibility; not used (updates are coalesced per key and micro-batch instead).
    - ``request.timeout.ms`` (int >= 1; default 30000):
      Timeout of admin calls and of the broker reachability check.
    - ``task.timeout.ms`` (int >= 0; default 300000):
      As in Kafka Streams: how long a query failing with transient Kafka errors (timeouts, a
      partition without a leader, a moving coordinator) is restarted from its checkpoint
      before the application goes to ``ERROR``. ``0`` fails at the first error.
    - ``repartition.purge.interval.ms`` (int >= 0; default 30000): as in Kafka Streams: how
      often records of internal repartition topics that every reading query has processed
      and committed are deleted (``DeleteRecords``).
    - ``application.server`` (``"host:port"`` or None; default None):
      As in Kafka Streams, where this instance answers interactive queries: when set,
      ``KafkaStreams.start()`` serves the queryable stores over HTTP on that address
      (``docs/interactive-queries.md``, "Over HTTP") and ``close()`` stops the server. An IPv6
      host is written in brackets (``[::1]:8080``). A host other than ``localhost``,
      ``127.0.0.0/8`` or ``::1`` needs ``streamtable.query.token``.
    - ``streamtable.query.token`` (str or None; default None):
      The bearer token of the HTTP query service: with it, every request must carry
      ``Authorization: Bearer <token>`` (else 401). Required to bind ``application.server``
      to an address other than loopback. Not shown by ``repr()``.
    - ``streamtable.metrics.address`` (``"host:port"``, a port, or None; default None):
      Where ``KafkaStreams.start()`` serves the application's metrics
      (``KafkaStreams.metrics()``) in Prometheus' text format, at ``/metrics``, until
      ``close()`` (``docs/metrics.md``). A bare port (``9400`` or ``":9400"``) means
      ``127.0.0.1``. Any host is accepted: ``0.0.0.0:9400`` lets every machine that reaches
      this one read the metrics (topic and query names, record counts), without
      authentication. A port in use makes ``start()`` fail, naming the address and this key.
    - ``streamtable.trigger`` (``"processing_time"`` default | ``"available_now"`` |
      ``"real_time"``): Spark trigger: periodic micro-batches every ``commit.interval.ms``,
      or process what is available then stop. ``"real_time"``: Spark's real-time mode, each
      record processed as it arrives (milliseconds), progress checkpointed every
      ``commit.interval.ms`` (at least 5 s); for stateless topologies of column expressions
      (``streamtable.functions``) under ``at_least_once``; others are refused by ``start()``
      with what stands in the way (``docs/guides/stateless.md``).
    - ``streamtable.shuffle.partitions`` (int >= 1; default 4):
      ``spark.sql.shuffle.partitions`` for the streaming query (the number of state partitions;
      fixed once a checkpoint exists).
    - ``streamtable.max.offsets.per.trigger`` (int >= 1 or None; default None = no limit):
      Upper bound of records read per micro-batch (Spark's ``maxOffsetsPerTrigger``), per
      source; a GlobalKTable's topic is read without it (Kafka Streams loads a global
      table in full before processing).
    - ``streamtable.invalid.timestamp.policy`` (``"skip"`` default | ``"fail"``):
      What happens to a record whose timestamp extractor returns no valid timestamp (not an
      int >= 0): skip it and count it as dropped ``invalid_timestamp`` (Kafka Streams'
      ``LogAndSkipOnInvalidTimestamp``), or stop the application with an error naming the
      record (``FailOnInvalidTimestamp``, Kafka Streams' default). Without an extractor,
      a negative Kafka timestamp fails the application under ``"fail"``; under ``"skip"``
      windowed aggregations drop it (counted as ``negative_timestamp``). Kafka's class
      names are accepted as spellings. An extractor's ``on_invalid=`` overrides the key for
      its source (see :mod:`streamtable.dsl.timestamps`).
      Kafka Streams' ``default.timestamp.extractor`` is not taken: pass
      ``timestamp_extractor=`` to ``StreamsBuilder.stream()``.
    - ``streamtable.audit.topic`` (topic name or None; default None = no audit):
      The data-loss audit (``docs/audit.md``): ``KafkaStreams.start()`` also starts one light
      query per source topic, counting the committed records it reads per partition and
      one-minute window of event time (role ``consumed``, reporter ``application.id``), and
      one per sink topic, counting what the topic committed since the application first
      started with the audit (role ``produced``); the counts go to this topic, which must
      exist (``start()`` fails naming it; create it with
      ``streamtable.platform.create_audit_topic``). Unset, nothing changes.
    - ``streamtable.connect.url`` (str or None; default None) and
      ``streamtable.connect.connectors`` (comma-separated names or a list; default none):
      Kafka Connect connectors the application depends on (e.g. the Debezium connector of a
      CDC-fed table). The application polls their status every 2 s and fails, state
      ``ERROR``, with a message naming a connector or task that is ``FAILED``
      (:mod:`streamtable.platform.connector_watch`). Connectors without a URL are refused.
    - ``streamtable.spark.log`` (path, ``"stderr"`` or None; default None =
      ``<state.dir>/logs/spark.log``): where the output of the Spark JVM this process starts
      goes — Spark's log lines (``spark.log.level``, default ``WARN``), the JVM's own
      warnings and the Python workers' output (librdkafka lines of the task producers,
      PySpark's worker messages). The file is appended to. ``"stderr"`` shows it all on the
      console, as plain PySpark does (``streamtable run --log-level``). Applies when this
      process creates the Spark session; a session that already exists keeps its output.
    - ``streamtable.jvm.class.data.sharing`` (bool; default True): the driver JVM this
      process starts maps its classes from an archive recorded by an earlier run (HotSpot's
      class data sharing; a restart's Spark session is up seconds sooner), or records it
      (:mod:`streamtable.runtime.class_data_sharing`).
    - ``spark.*``:
      Passed to the Spark session as strings (booleans as ``"true"``/``"false"``).
    - ``consumer.*``, ``producer.*``, ``admin.*``:
      Kafka client configs, stored with the prefix removed in :attr:`consumer_config`,
      :attr:`producer_config` and :attr:`admin_config`. ``consumer.request.timeout.ms`` and
      ``consumer.default.api.timeout.ms`` must be ints >= 1 (ms): streamtable derives its
      Kafka source's retry count from them
      (:func:`~streamtable.runtime.kafka_source_options.kafka_source_options`).

    Raises
    ------
    ConfigError
        From :meth:`from_mapping`, for a missing required key, an unknown key (with the closest
        known key suggested) or an ill-typed or out-of-range value (naming the key).

    Examples
    --------
    >>> cfg = StreamsConfig.from_mapping({
    ...     "application.id": "wordcount",
    ...     "bootstrap.servers": "localhost:9092",
    ...     "default.key.serde": "String",
    ...     "spark.sql.adaptive.enabled": False,
    ... })
    >>> cfg.commit_interval_ms, cfg.default_key_serde, cfg.spark_conf
    (1000, Serdes.string(), {'spark.sql.adaptive.enabled': 'false'})
    >>> StreamsConfig.from_mapping({"application.id": "a", "bootstrap.server": "x:1"})
    Traceback (most recent call last):
    ...
    streamtable.errors.ConfigError: Unknown config key 'bootstrap.server'. Did you mean ...
    """

    application_id: str
    bootstrap_servers: str
    processing_guarantee: ProcessingGuarantee = "at_least_once"
    state_dir: str = field(default_factory=_default_state_dir)
    commit_interval_ms: int = 1000
    default_key_serde: Serde | None = None
    default_value_serde: Serde | None = None
    deserialization_handler: DeserializationHandler = "log_and_fail"
    processing_exception_handler: ProcessingHandler = "log_and_fail"
    production_exception_handler: ProductionHandler = "fail"
    dead_letter_queue_topic: str | None = None
    num_stream_threads: int = 1
    auto_offset_reset: OffsetReset = "earliest"
    max_task_idle_ms: int = 0
    replication_factor: int = -1
    client_id: str = ""
    statestore_cache_max_bytes: int = 10 * 1024 * 1024
    request_timeout_ms: int = 30000
    task_timeout_ms: int = 300000
    repartition_purge_interval_ms: int = 30000
    application_server: str | None = None
    query_token: str | None = field(default=None, repr=False)
    metrics_address: str | None = None
    trigger: Trigger = "processing_time"
    shuffle_partitions: int = 4
    max_offsets_per_trigger: int | None = None
    invalid_timestamp_policy: InvalidTimestampPolicy = "skip"
    audit_topic: str | None = None
    connect_url: str | None = None
    connect_connectors: tuple[str, ...] = ()
    spark_log: str | None = None
    class_data_sharing: bool = True
    _spark_conf: tuple[tuple[str, str], ...] = ()
    _consumer_config: tuple[tuple[str, Any], ...] = ()
    _producer_config: tuple[tuple[str, Any], ...] = ()
    _admin_config: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object] | StreamsConfig) -> StreamsConfig:
        """Validate ``mapping`` (Kafka Streams' dotted keys) into a :class:`StreamsConfig`.

        A value of ``None`` means "use the default" for optional keys. A ``StreamsConfig`` is
        returned unchanged.

        Raises
        ------
        ConfigError
            Missing required key, unknown key, or ill-typed/out-of-range value.
        """
        if isinstance(mapping, StreamsConfig):
            return mapping
        if not isinstance(mapping, Mapping):
            raise ConfigError(
                "StreamsConfig expects a mapping of config keys to values, "
                f"got {_type_name(mapping)}"
            )
        values: dict[str, Any] = {}
        handler_source: dict[str, str] = {}
        spark: dict[str, str] = {}
        clients: dict[str, dict[str, Any]] = {p: {} for p in CLIENT_PREFIXES}
        for key, raw in mapping.items():
            if not isinstance(key, str):
                raise ConfigError(f"Config keys must be str, got {_type_name(key)} {key!r}")
            if key in _KEYS:
                attr, parser, default = _KEYS[key]
                if raw is None:
                    if default is _REQUIRED:
                        raise ConfigError(f"Config {key!r} is required and must not be None")
                    continue
                value = parser(key, raw)
                if attr in _DEPRECATED_TWINS:
                    if attr in values and values[attr] != value:
                        other = handler_source[attr]
                        raise ConfigError(
                            f"Config {key!r} ({value!r}) conflicts with {other!r} "
                            f"({values[attr]!r}); set only {_DEPRECATED_TWINS[attr]!r}"
                        )
                    handler_source[attr] = key
                values[attr] = value
            elif key.startswith("spark."):
                if raw is None:
                    raise ConfigError(f"Config {key!r} (passed to Spark) must not be None")
                spark[key] = _spark_value(key, raw)
            elif key.startswith(CLIENT_PREFIXES):
                prefix = next(p for p in CLIENT_PREFIXES if key.startswith(p))
                sub = key[len(prefix) :]
                if not sub:
                    raise ConfigError(
                        f"Config {key!r} has an empty client config name after the prefix"
                    )
                if prefix == "consumer." and sub in _SOURCE_REFUSED:
                    raise ConfigError(
                        f"Config {key!r} is not taken: Spark's Kafka source manages its "
                        f"offsets itself and refuses it. {_SOURCE_REFUSED[sub]}"
                    )
                if prefix == "consumer." and sub in _SOURCE_TIMEOUTS and raw is not None:
                    raw = _int(key, raw, minimum=1)  # streamtable derives Spark options from it
                clients[prefix][sub] = raw
            else:
                raise _unknown_key(key)
        for key, (attr, _parser, default) in _KEYS.items():
            if default is _REQUIRED and attr not in values:
                raise ConfigError(f"Config {key!r} is required (e.g. {_EXAMPLES[key]!r})")
        if values.get("state_dir") is None:
            values.pop("state_dir", None)
        if values.get("connect_connectors") and values.get("connect_url") is None:
            raise ConfigError(
                "Config 'streamtable.connect.connectors' names connectors to watch, but "
                "'streamtable.connect.url' (Kafka Connect's REST URL, e.g. "
                "'http://127.0.0.1:8083') is not set."
            )
        return cls(
            **values,
            _spark_conf=tuple(sorted(spark.items())),
            _consumer_config=tuple(clients["consumer."].items()),
            _producer_config=tuple(clients["producer."].items()),
            _admin_config=tuple(clients["admin."].items()),
        )

    @property
    def spark_conf(self) -> dict[str, str]:
        """``spark.*`` keys and their values as strings (a fresh dict)."""
        return dict(self._spark_conf)

    @property
    def consumer_config(self) -> dict[str, Any]:
        """``consumer.*`` configs with the prefix removed (a fresh dict)."""
        return dict(self._consumer_config)

    @property
    def producer_config(self) -> dict[str, Any]:
        """``producer.*`` configs with the prefix removed (a fresh dict)."""
        return dict(self._producer_config)

    @property
    def admin_config(self) -> dict[str, Any]:
        """``admin.*`` configs with the prefix removed (a fresh dict)."""
        return dict(self._admin_config)

    @property
    def spark_log_target(self) -> str:
        """Where the Spark JVM's output goes: ``streamtable.spark.log``, or
        ``state.dir/logs/spark.log`` when unset (``"stderr"`` means the console).
        """
        if self.spark_log is not None:
            return self.spark_log
        return os.path.join(self.state_dir, "logs", "spark.log")

    @property
    def checkpoint_dir(self) -> str:
        """``state.dir/application.id``: where the query's checkpoint and local state live."""
        return os.path.join(self.state_dir, self.application_id)

    def to_mapping(self) -> dict[str, Any]:
        """Return the full configuration with dotted keys (defaults filled in; serdes as objects).

        ``from_mapping(cfg.to_mapping()) == cfg`` holds.
        """
        out: dict[str, Any] = {}
        for key, (attr, _parser, _default) in _KEYS.items():
            if key in (
                "default.deserialization.exception.handler",
                "default.production.exception.handler",
            ):
                continue
            out[key] = getattr(self, attr)
        out.update(self._spark_conf)
        for prefix, items in (
            ("consumer.", self._consumer_config),
            ("producer.", self._producer_config),
            ("admin.", self._admin_config),
        ):
            out.update({prefix + k: v for k, v in items})
        return out


_EXAMPLES = {"application.id": "wordcount", "bootstrap.servers": "localhost:9092"}
