"""Which ``consumer.*``/``producer.*``/``admin.*`` keys streamtable's librdkafka clients take.

An application's ``consumer.*`` keys reach two kinds of Kafka client: Spark's Kafka source (the
Java client) and streamtable's own consumers (confluent-kafka, i.e. librdkafka: the client that
commits processed offsets to the group ``application.id``, the store replica behind interactive
queries). ``producer.*`` keys reach Spark's Kafka sink and streamtable's producers (the
exactly-once writer, changelogs, late records, dead letters, the audit). The two clients do not
know the same keys: ``default.api.timeout.ms`` or ``buffer.memory`` exist only in Java, and
``request.timeout.ms`` is a producer-only key in librdkafka. librdkafka refuses a key it does not
know, so one such key used to break every offset commit, the store replica or the writers.

Kafka's Java clients ignore a key they do not know (with the warning "The configuration ... was
supplied but isn't a known config"). streamtable's librdkafka clients do the same: a key
librdkafka does not know, knows only for the other client kind, or knows only to refuse it as a
Java setting (``sasl.jaas.config``, ``ssl.truststore.location``) is left out of them (logged at
INFO, once per set of settings) and still reaches Spark's Java client. A value librdkafka
refuses for a key it takes is a :class:`~streamtable.errors.ConfigError`, as it would be for the
client itself.

``admin.*`` keys reach only streamtable's admin client (librdkafka): Kafka Streams hands them to
Java's admin client, which ignores unknown keys, so they are split the same way. A security
setup written once for the three prefixes (``ssl.truststore.location`` included) therefore works.

librdkafka has no list of its keys that Python can read, so :func:`librdkafka_settings` asks it:
it builds a client that is never connected and reads librdkafka's refusals and configuration
warnings. The probe leaves out what could make a client act at build time (reach a network,
run ``kinit``, fetch an OAuth token, call back into Python): ``bootstrap.servers``,
``security.protocol`` (checked against its four values instead), ``sasl.mechanism(s)``,
``group.id`` and callables. A probe takes about half a millisecond; results are cached.

Under ``security.protocol`` ``SSL`` or ``SASL_SSL`` a client loads its TLS files when it is
built, so the ``ssl.*`` settings are probed once more with ``security.protocol=SSL`` (still no
``bootstrap.servers``, no SASL): a keystore librdkafka cannot open or decrypt, or a certificate
or CA file it cannot read, is a :class:`~streamtable.errors.ConfigError` at start instead of a
failed commit or task later. A Java KeyStore (JKS) file is named as such: librdkafka reads
PKCS#12 only. Java's truststore (``ssl.truststore.location``) is left out; without
``ssl.ca.location`` (or ``ssl.ca.pem``) librdkafka verifies the brokers against the system's CA
certificates, and a warning says so. Java's empty ``ssl.endpoint.identification.algorithm`` (no
hostname check) is given to librdkafka as its ``none``. The check is cached with the settings: a
file changed later is read by the real clients only.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from streamtable.errors import ConfigError

__all__ = ["LibrdkafkaSettings", "librdkafka_settings"]

log = logging.getLogger("streamtable")

ClientKind = Literal["consumer", "producer", "admin"]

#: librdkafka's refusal of a key it does not know
_UNKNOWN = re.compile(r'No such configuration property: "(?P<key>[^"]+)"')
#: librdkafka's refusal of a Java client key it knows only to point to its own
#: (``sasl.jaas.config``, ``ssl.truststore.location``: "Java ... are not supported, ...")
_JAVA_ONLY = re.compile(r"^Java .* (?:is|are) not supported")
#: librdkafka's CONFWARN for a key of the other client kind (named by its canonical name:
#: ``linger.ms`` is ``queue.buffering.max.ms``), which that client then ignores
_OTHER_KIND = re.compile(
    r"Configuration property (?P<key>\S+) is a (?P<kind>\w+) property "
    r"and will be ignored by this \w+ instance"
)
#: keys the probe does not pass (see the module docstring); they are kept as given
_NOT_PROBED = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "logger",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
    }
)
#: ``security.protocol``'s values, in both clients (librdkafka ignores their case)
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: settings naming a file (or folder) librdkafka loads when it builds a TLS client
_SSL_FILES = (
    "ssl.keystore.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.ca.location",
    "ssl.crl.location",
)
#: librdkafka's ways to name the CA certificates it verifies the brokers with
_CA_KEYS = ("ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores")
#: Java values librdkafka spells differently: ``""`` disables the hostname check in Java
_JAVA_VALUES = {("ssl.endpoint.identification.algorithm", ""): "none"}
#: the first bytes of Java's own keystore formats, which librdkafka cannot read
_JAVA_KEYSTORE_MAGIC = {b"\xfe\xed\xfe\xed": "JKS", b"\xce\xce\xce\xce": "JCEKS"}

#: how messages name each client kind (librdkafka builds an admin client as a producer)
_CLIENT = {"consumer": "consumer", "producer": "producer", "admin": "admin client"}

_lock = threading.Lock()


@dataclass(frozen=True)
class LibrdkafkaSettings:
    """The settings split by whether streamtable's librdkafka clients take them.

    Attributes
    ----------
    accepted : dict[str, Any]
        Keys librdkafka takes for this client kind, with the application's values.
    ignored : dict[str, str]
        Keys left out, each with the reason: ``"unknown to librdkafka"``, ``"a producer
        property in librdkafka"`` (or ``consumer``), or ``"a Java setting librdkafka does not
        support"``.
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
    """Build and close a never-connected client of ``kind``; librdkafka's log messages.

    librdkafka builds an admin client as a producer: consumer keys draw the same warning.
    """
    from confluent_kafka import Consumer, Producer

    capture = _Capture()
    logger = logging.Logger("streamtable.librdkafka_probe")  # not registered: one per probe
    logger.addHandler(capture)
    logger.propagate = False
    if kind == "consumer":
        consumer = Consumer({**conf, "group.id": "streamtable-config-probe", "logger": logger})
        consumer.poll(0)  # delivers the messages logged while it was built
        consumer.close()
    elif kind == "admin":
        from confluent_kafka.admin import AdminClient

        AdminClient({**conf, "logger": logger}).poll(0)
    else:
        producer = Producer({**conf, "logger": logger})
        producer.poll(0)
        producer.flush(0)
    return capture.messages


def _try_build(kind: ClientKind, conf: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The refusal librdkafka gives ``conf`` (None if it builds a client) and its log lines."""
    from confluent_kafka import KafkaException

    try:
        return None, _build(kind, conf)
    except KafkaException as e:
        error = e.args[0] if e.args else None
        return (error.str() if hasattr(error, "str") else str(e)).strip(), []
    except (TypeError, ValueError) as e:  # the binding's own checks of a value's type
        return str(e).strip(), []


def _refusal(kind: ClientKind, conf: dict[str, Any]) -> str | None:
    """The refusal librdkafka gives ``conf`` (None if it builds a client from it)."""
    return _try_build(kind, conf)[0]


def _other_kind(messages: list[str]) -> str | None:
    """The other client kind a CONFWARN in ``messages`` names, if any."""
    for message in messages:
        match = _OTHER_KIND.search(message)
        if match:
            return match["kind"]
    return None


def _check_security_protocol(prefix: str, settings: Mapping[str, Any]) -> None:
    value = settings.get("security.protocol")
    if value is None:
        return
    if not isinstance(value, str) or value.strip().upper() not in _SECURITY_PROTOCOLS:
        raise ConfigError(
            f"Config '{prefix}security.protocol' expects one of "
            f"{' | '.join(map(repr, _SECURITY_PROTOCOLS))}, got {value!r}"
        )


def _java_keystore_format(path: Any) -> str | None:
    """``"JKS"`` or ``"JCEKS"`` if the file at ``path`` is one of Java's keystore formats."""
    try:
        with open(path, "rb") as f:
            return _JAVA_KEYSTORE_MAGIC.get(f.read(4))
    except (OSError, TypeError, ValueError):
        return None


def _looks_like_a_path(value: Any) -> bool:
    """Whether ``value`` may be shown as a path (a key's PEM text pasted there may not)."""
    return isinstance(value, str) and 0 < len(value) < 4096 and "\n" not in value


def _tls_protocol(settings: Mapping[str, Any]) -> str | None:
    """``SSL`` or ``SASL_SSL`` when ``settings`` connect over TLS, else None."""
    protocol = str(settings.get("security.protocol", "")).strip().upper()
    return protocol if protocol in ("SSL", "SASL_SSL") else None


def _check_ssl_files(kind: ClientKind, prefix: str, accepted: Mapping[str, Any]) -> None:
    """Build a TLS client from the ``ssl.*`` settings, as the real clients will (see module)."""
    protocol = _tls_protocol(accepted)
    if protocol is None:
        return
    ssl = {k: v for k, v in accepted.items() if k.startswith("ssl.") and not callable(v)}
    text = _refusal(kind, {**ssl, "security.protocol": "SSL"})
    if text is None:
        return
    text = re.sub(r"^Failed to create [\w ]+?: ", "", text)
    hints = []
    for key in _SSL_FILES:
        path = ssl.get(key)
        if not _looks_like_a_path(path) or key == "ssl.ca.location" and path == "probe":
            continue  # e.g. a PEM key pasted where a path goes: never echoed
        java_format = _java_keystore_format(path) if key == "ssl.keystore.location" else None
        if java_format is not None:
            quoted = shlex.quote(str(path))
            hints.append(
                f"'{prefix}{key}' is a Java KeyStore ({java_format}) file, which librdkafka "
                f"cannot read: convert it to PKCS#12 (keytool -importkeystore -srckeystore "
                f"{quoted} -destkeystore {shlex.quote(f'{path}.p12')} -deststoretype PKCS12) and "
                f"name the new file; Spark's Java client reads PKCS#12 too "
                f"(ssl.keystore.type=PKCS12)"
            )
        elif not os.path.exists(str(path)):
            hints.append(f"'{prefix}{key}' names {str(path)!r}, which does not exist here")
    hint = "; ".join(hints) if hints else "fix the ssl.* setting librdkafka names"
    raise ConfigError(  # librdkafka's text names the key and the file, never a password
        f"The '{prefix}ssl.*' settings cannot build a librdkafka {_CLIENT[kind]} "
        f"(security.protocol={protocol}): {text}. {hint[0].upper()}{hint[1:]}"
    )


def _warn_without_ca(kind: ClientKind, prefix: str, settings: Mapping[str, Any]) -> None:
    """Warn when Java's truststore is set but librdkafka's CA file is not (see module)."""
    if _tls_protocol(settings) and not any(key in settings for key in _CA_KEYS):
        log.warning(
            "'%sssl.truststore.location' is a Java setting, which librdkafka leaves out: "
            "streamtable's own %ss verify the brokers against the system's CA certificates. If "
            "the brokers' certificates are signed by another CA, set '%sssl.ca.location' to its "
            "certificate (PEM)",
            prefix,
            _CLIENT[kind],
            prefix,
        )


def _split(kind: ClientKind, prefix: str, settings: dict[str, Any]) -> LibrdkafkaSettings:
    _check_security_protocol(prefix, settings)
    settings = {
        k: _JAVA_VALUES.get((k, v), v) if isinstance(v, str) else v for k, v in settings.items()
    }
    probe = {k: v for k, v in settings.items() if k not in _NOT_PROBED and not callable(v)}
    ignored: dict[str, str] = {}
    while True:
        text, messages = _try_build(kind, probe)
        if text is None:
            break
        unknown = _UNKNOWN.search(text)
        key = unknown["key"] if unknown and unknown["key"] in probe else None
        if key is not None:
            ignored[key] = "unknown to librdkafka"
        else:
            # librdkafka may name a key by its canonical name (linger.ms is
            # queue.buffering.max.ms): find the setting that alone is refused the same way
            key = next((k for k in probe if _refusal(kind, {k: probe[k]}) == text), None)
            if key is not None and _JAVA_ONLY.search(text):
                ignored[key] = "a Java setting librdkafka does not support"
            elif key is not None:
                accept = (
                    "librdkafka accepts"
                    if kind == "admin"
                    else "both librdkafka and Spark's Java client accept"
                )
                raise ConfigError(  # no value shown: it may be a secret
                    f"Config '{prefix}{key}' is refused by librdkafka, the Kafka client of "
                    f"streamtable's own {_CLIENT[kind]}s: {text}. Set a value that {accept}, "
                    f"or leave the key out"
                )
            else:
                raise ConfigError(
                    f"The '{prefix}*' settings cannot build a librdkafka {_CLIENT[kind]}: "
                    f"{text}. Fix or leave out the settings it names"
                )
        del probe[key]
    # a CONFWARN names the canonical key: build each setting alone to find the user's keys
    if _other_kind(messages) is not None:
        for key in list(probe):
            other = _other_kind(_build(kind, {key: probe[key]}))
            if other is not None:
                ignored[key] = f"a {other} property in librdkafka"
                del probe[key]
    accepted = {k: v for k, v in settings.items() if k not in ignored}
    _check_ssl_files(kind, prefix, accepted)
    if "ssl.truststore.location" in ignored:
        _warn_without_ca(kind, prefix, settings)
    if ignored:
        log.info(
            "Left out of streamtable's librdkafka %ss%s: %s",
            _CLIENT[kind],
            "" if kind == "admin" else " (Spark's Java client still gets them)",
            ", ".join(f"{prefix}{k} ({why})" for k, why in ignored.items()),
        )
    return LibrdkafkaSettings(accepted, ignored)


@functools.lru_cache(maxsize=64)
def _split_cached(
    kind: ClientKind, prefix: str, typed_items: tuple[tuple[str, str, Any], ...]
) -> LibrdkafkaSettings:
    return _split(kind, prefix, {k: v for k, _type, v in typed_items})


def librdkafka_settings(
    settings: Mapping[str, Any], kind: ClientKind, *, prefix: str | None = None
) -> LibrdkafkaSettings:
    """Split ``settings`` into what a librdkafka client of ``kind`` takes and what it ignores.

    Follows the Java Kafka clients, which ignore a key they do not know: a key librdkafka does
    not know, knows only for the other client kind (for which librdkafka itself would log a
    warning and ignore it), or knows only to refuse it as a Java setting is left out; Spark's
    Kafka source and sink, which use the Java client, still get every key.

    Parameters
    ----------
    settings : Mapping[str, Any]
        Client settings without their prefix (``StreamsConfig.consumer_config`` or
        ``producer_config``). ``None`` values are dropped (unset).
    kind : {"consumer", "producer", "admin"}
        The librdkafka client kind the settings are for (``admin``: streamtable's admin
        client, which only librdkafka gets: Kafka Streams' Java admin client ignores unknown
        keys too).
    prefix : str, optional
        How the keys are named in the application's config, for messages; default
        ``"<kind>."``.

    Returns
    -------
    LibrdkafkaSettings
        A fresh object: ``accepted`` keeps the application's order and values.
        ``bootstrap.servers``, ``group.id``, ``sasl.mechanism(s)`` and callables are kept
        without being probed; ``security.protocol`` is kept once it is one of its values.

    Raises
    ------
    ConfigError
        If librdkafka refuses the value of a key it takes (the message names the key and
        librdkafka's reason, not the value), cannot build a client from the settings, or
        ``security.protocol`` is not one of its four values.

    Examples
    --------
    >>> s = librdkafka_settings(
    ...     {"default.api.timeout.ms": 30000, "session.timeout.ms": 45000}, "consumer"
    ... )
    >>> s.accepted
    {'session.timeout.ms': 45000}
    >>> s.ignored
    {'default.api.timeout.ms': 'unknown to librdkafka'}
    >>> librdkafka_settings({"linger.ms": 5}, "consumer").ignored
    {'linger.ms': 'a producer property in librdkafka'}
    """
    prefix = f"{kind}." if prefix is None else prefix
    # the type is part of the key: True == 1, but librdkafka refuses True for a number
    typed = tuple((k, type(v).__qualname__, v) for k, v in settings.items() if v is not None)
    with _lock:  # one probe per set of settings, and one log line
        try:
            split = _split_cached(kind, prefix, typed)
        except TypeError:  # an unhashable value
            split = _split(kind, prefix, {k: v for k, _type, v in typed})
    return LibrdkafkaSettings(dict(split.accepted), dict(split.ignored))
