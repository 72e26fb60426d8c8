"""Which ``consumer.*`` and ``producer.*`` settings streamtable's librdkafka clients take.

An application's ``consumer.*`` keys reach two kinds of Kafka client: Spark's Kafka source (the
Java client) and streamtable's own consumers (confluent-kafka, i.e. librdkafka: the client that
commits processed offsets to the group ``application.id``, the store replica behind interactive
queries). ``producer.*`` keys reach Spark's Kafka sink and streamtable's producers (the
exactly-once writer, changelogs, late records, dead letters, the audit). The two clients do not
know the same keys: ``default.api.timeout.ms`` or ``buffer.memory`` exist only in Java, and
``request.timeout.ms`` is a producer-only key in librdkafka. librdkafka refuses a key it does not
know, so one such key used to break every offset commit or the store replica.

Kafka's Java clients ignore a key they do not know (with the warning "The configuration ... was
supplied but isn't a known config"). streamtable's librdkafka clients do the same: a key
librdkafka does not know, or knows only for the other client kind, is left out of them (logged at
INFO, once per set of settings) and still reaches Spark's Java client. A value librdkafka rejects
for a key it knows is an error, as it would be for the client itself.

librdkafka has no list of its keys that Python can read, so :func:`librdkafka_settings` asks it:
it builds a client that is never connected (no ``bootstrap.servers``) and reads librdkafka's
refusals and configuration warnings. A probe takes about half a millisecond; results are cached.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from streamtable.errors import ConfigError

__all__ = ["LibrdkafkaSettings", "librdkafka_settings"]

log = logging.getLogger("streamtable")

ClientKind = Literal["consumer", "producer"]

#: librdkafka's refusals when a client is built (``KafkaError._INVALID_ARG``)
_UNKNOWN = re.compile(r'No such configuration property: "(?P<key>[^"]+)"')
_INVALID = re.compile(r'Invalid value for configuration property "(?P<key>[^"]+)"')
#: librdkafka's CONFWARN for a key of the other client kind, which that client then ignores
_OTHER_KIND = re.compile(
    r"Configuration property (?P<key>\S+) is a (?P<kind>\w+) property "
    r"and will be ignored by this \w+ instance"
)
#: keys the probe never passes: streamtable sets them on every real client, and a
#: ``bootstrap.servers`` would let the probe connect
_NOT_PROBED = frozenset({"bootstrap.servers", "logger"})


@dataclass(frozen=True)
class LibrdkafkaSettings:
    """The settings split by whether streamtable's librdkafka clients take them.

    Attributes
    ----------
    accepted : dict[str, Any]
        Keys librdkafka knows for this client kind, with the application's values.
    ignored : dict[str, str]
        Keys left out, each with the reason (``"unknown to librdkafka"`` or ``"a producer
        property in librdkafka"``).
    """

    accepted: dict[str, Any] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)


class _Capture(logging.Handler):
    """Collects the messages librdkafka logs while a probe client is built."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _build(kind: ClientKind, conf: dict[str, Any]) -> list[str]:
    """Build and close a never-connected client of ``kind``; librdkafka's log messages."""
    from confluent_kafka import Consumer, Producer

    capture = _Capture()
    logger = logging.Logger("streamtable.librdkafka_probe")  # not registered: one per probe
    logger.addHandler(capture)
    logger.propagate = False
    if kind == "consumer":
        consumer = Consumer({"group.id": "streamtable-config-probe", **conf, "logger": logger})
        consumer.poll(0)  # delivers the messages logged while it was built
        consumer.close()
    else:
        producer = Producer({**conf, "logger": logger})
        producer.poll(0)
        producer.flush(0)
    return capture.messages


def _error_text(e: Exception) -> str:
    error = e.args[0] if e.args else None
    return error.str() if hasattr(error, "str") else str(e)


def _culprit(kind: ClientKind, settings: dict[str, Any], text: str) -> str | None:
    """The one key of ``settings`` that alone makes librdkafka refuse with ``text``."""
    from confluent_kafka import KafkaException

    for key, value in settings.items():
        try:
            _build(kind, {key: value})
        except KafkaException as e:
            if _error_text(e) == text:
                return key
    return None


def _split(kind: ClientKind, prefix: str, items: tuple[tuple[str, Any], ...]) -> LibrdkafkaSettings:
    from confluent_kafka import KafkaException

    settings = dict(items)
    accepted = {k: v for k, v in settings.items() if k not in _NOT_PROBED}
    ignored: dict[str, str] = {}
    while True:
        try:
            messages = _build(kind, accepted)
            break
        except KafkaException as e:
            text = _error_text(e)
            unknown = _UNKNOWN.search(text)
            if unknown and unknown["key"] in accepted:
                del accepted[unknown["key"]]
                ignored[unknown["key"]] = "unknown to librdkafka"
                continue
            invalid = _INVALID.search(text)
            if invalid and invalid["key"] in accepted:
                key = invalid["key"]
                raise ConfigError(  # no value shown: it may be a secret
                    f"Config '{prefix}{key}' is refused by librdkafka, the "
                    f"Kafka client of streamtable's own {kind}s ({text}); set a value that both "
                    f"librdkafka and Spark's Java client accept"
                ) from None
            java_only = (
                None if text.startswith("Failed to create") else _culprit(kind, accepted, text)
            )
            if java_only is not None:
                # librdkafka knows a few Java keys only to refuse them with a pointer to its
                # own (sasl.jaas.config, ssl.truststore.location)
                del accepted[java_only]
                ignored[java_only] = "a Java setting librdkafka does not support"
                continue
            raise ConfigError(
                f"The '{prefix}*' settings cannot build a librdkafka {kind}: {text}; fix the "
                f"setting it names"
            ) from None
    for message in messages:
        other = _OTHER_KIND.search(message)
        if other and other["key"] in accepted:
            del accepted[other["key"]]
            ignored[other["key"]] = f"a {other['kind']} property in librdkafka"
    for key in _NOT_PROBED & settings.keys():
        accepted[key] = settings[key]
    # keep the application's order
    accepted = {k: settings[k] for k in settings if k in accepted}
    if ignored:
        log.info(
            "Left out of streamtable's librdkafka %ss (Spark's Java client still gets them): %s",
            kind,
            ", ".join(f"{prefix}{k} ({why})" for k, why in ignored.items()),
        )
    return LibrdkafkaSettings(accepted, ignored)


@functools.lru_cache(maxsize=64)
def _split_cached(
    kind: ClientKind, prefix: str, items: tuple[tuple[str, Any], ...]
) -> LibrdkafkaSettings:
    return _split(kind, prefix, items)


def librdkafka_settings(
    settings: Mapping[str, Any], kind: ClientKind, *, prefix: str | None = None
) -> LibrdkafkaSettings:
    """Split ``settings`` into what a librdkafka client of ``kind`` takes and what it ignores.

    Follows the Java Kafka clients, which ignore a key they do not know: a key librdkafka does
    not know, or knows only for the other client kind (for which librdkafka itself would log a
    warning and ignore it), is left out; Spark's Kafka source and sink, which use the Java
    client, still get every key.

    Parameters
    ----------
    settings : Mapping[str, Any]
        Client settings without their prefix (``StreamsConfig.consumer_config`` or
        ``producer_config``). ``None`` values are dropped (unset).
    kind : {"consumer", "producer"}
        The librdkafka client kind the settings are for.
    prefix : str, optional
        How the keys are named in the application's config, for messages; default
        ``"<kind>."``.

    Returns
    -------
    LibrdkafkaSettings
        ``accepted`` keeps the application's order and values; ``bootstrap.servers`` is kept
        without being checked.

    Raises
    ------
    ConfigError
        If librdkafka refuses the value of a key it knows (the message names the key and
        librdkafka's reason), or cannot build a client from the settings.

    Examples
    --------
    >>> s = librdkafka_settings(
    ...     {"default.api.timeout.ms": 30000, "session.timeout.ms": 45000}, "consumer"
    ... )
    >>> s.accepted
    {'session.timeout.ms': 45000}
    >>> s.ignored
    {'default.api.timeout.ms': 'unknown to librdkafka'}
    >>> librdkafka_settings({"request.timeout.ms": 10000}, "consumer").ignored
    {'request.timeout.ms': 'a producer property in librdkafka'}
    """
    prefix = f"{kind}." if prefix is None else prefix
    items = tuple((k, v) for k, v in settings.items() if v is not None)
    try:
        hash(items)
    except TypeError:
        return _split(kind, prefix, items)
    return _split_cached(kind, prefix, items)
