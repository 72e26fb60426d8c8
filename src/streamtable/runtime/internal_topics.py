"""Names of the Kafka topics and consumer groups an application owns.

Kafka Streams prefixes every internal topic with ``application.id`` and ends it with a kind
(``-repartition``, ``-changelog``); ``kafka-streams-application-reset`` finds them by that
pattern. streamtable follows it, and names its own internal topics (e.g. the exactly-once
writer's markers) ``<application.id>-<name>-streamtable-internal`` so that
``streamtable reset`` deletes them too. Consumer groups the exactly-once writer uses are
named ``<application.id>-eos-...``.
"""

from __future__ import annotations

__all__ = [
    "INTERNAL_TOPIC_SUFFIXES",
    "STREAMTABLE_INTERNAL_SUFFIX",
    "internal_topic_name",
    "is_internal_topic",
    "eos_group_prefix",
    "is_eos_group",
]

#: Suffix of the internal topics only streamtable creates (Kafka Streams has no such topics).
STREAMTABLE_INTERNAL_SUFFIX = "-streamtable-internal"

#: Every topic named ``<application.id>-...<suffix>`` with one of these suffixes belongs to the
#: application and is deleted by ``streamtable reset``.
INTERNAL_TOPIC_SUFFIXES: tuple[str, ...] = (
    "-repartition",
    "-changelog",
    STREAMTABLE_INTERNAL_SUFFIX,
)


def internal_topic_name(application_id: str, suffix: str) -> str:
    """The name of an internal topic of ``application_id``: ``<application_id>-<suffix>``.

    Parameters
    ----------
    application_id : str
        The application's ``application.id``.
    suffix : str
        The rest of the name, without the leading dash; it must end with one of
        :data:`INTERNAL_TOPIC_SUFFIXES` (without their leading dash), e.g.
        ``"eos-markers-streamtable-internal"`` or ``"counts-changelog"``, so that
        ``streamtable reset`` recognises the topic.

    Returns
    -------
    str
        E.g. ``internal_topic_name("wc", "eos-markers-streamtable-internal")`` is
        ``"wc-eos-markers-streamtable-internal"``.

    Raises
    ------
    ValueError
        If ``application_id`` or ``suffix`` is empty, or ``suffix`` does not end with a known
        internal suffix (the message lists them).

    Examples
    --------
    >>> internal_topic_name("wc", "eos-markers-streamtable-internal")
    'wc-eos-markers-streamtable-internal'
    >>> is_internal_topic("wc", "wc-eos-markers-streamtable-internal")
    True
    """
    if not application_id:
        raise ValueError("internal_topic_name: application_id must not be empty.")
    name = f"{application_id}-{suffix.lstrip('-')}"
    if not suffix.strip("-") or not is_internal_topic(application_id, name):
        raise ValueError(
            f"internal_topic_name: suffix {suffix!r} must be a name ending with one of "
            f"{[s.lstrip('-') for s in INTERNAL_TOPIC_SUFFIXES]}, e.g. "
            f"'eos-markers{STREAMTABLE_INTERNAL_SUFFIX}', so that `streamtable reset` finds it."
        )
    return name


def is_internal_topic(application_id: str, topic: str) -> bool:
    """True when ``topic`` is an internal topic of ``application_id`` (see the module doc).

    Parameters
    ----------
    application_id : str
        The application's ``application.id``.
    topic : str
        A topic name.

    Returns
    -------
    bool
        ``topic`` is ``<application_id>-<name><suffix>`` with a non-empty ``name`` and a
        suffix from :data:`INTERNAL_TOPIC_SUFFIXES`.
    """
    prefix = f"{application_id}-"
    if not topic.startswith(prefix):
        return False
    rest = topic[len(prefix) :]
    return any(rest.endswith(s) and len(rest) > len(s) for s in INTERNAL_TOPIC_SUFFIXES)


def eos_group_prefix(application_id: str) -> str:
    """The prefix of the exactly-once writer's consumer groups: ``<application_id>-eos-``."""
    return f"{application_id}-eos-"


def is_eos_group(application_id: str, group_id: str) -> bool:
    """True when ``group_id`` is one of the exactly-once writer's groups of ``application_id``."""
    return group_id.startswith(eos_group_prefix(application_id))
