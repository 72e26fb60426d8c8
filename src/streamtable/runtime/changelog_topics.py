"""Creating the changelog topics of queryable stores on start.

Kafka Streams creates each store's changelog (``<application.id>-<store>-changelog``,
compacted, one partition per task) when the application starts, and refuses to start when an
existing one has another partition count. streamtable does the same for the topics
:mod:`streamtable.compiler.changelog` writes.
"""

from __future__ import annotations

from collections.abc import Mapping

from streamtable.compiler.changelog import CHANGELOG_TOPIC_CONFIG, ChangelogInfo
from streamtable.errors import TopologyError
from streamtable.runtime.kafka_admin import KafkaAdmin

__all__ = ["ensure_changelog_topics"]


def ensure_changelog_topics(admin: KafkaAdmin, changelogs: Mapping[str, ChangelogInfo]) -> None:
    """Create the changelog topics of ``changelogs`` that do not exist yet.

    Raises
    ------
    TopologyError
        If one exists with another partition count (Kafka Streams refuses to start then too):
        the message says to run ``streamtable reset``, which deletes internal topics.
    StreamtableError
        If a topic cannot be created.
    """
    if not changelogs:
        return
    by_topic = {c.topic: c for c in changelogs.values()}
    topics = {c.topic: c.partitions for c in changelogs.values()}
    for topic, have in admin.ensure_internal_topics(topics, CHANGELOG_TOPIC_CONFIG).items():
        c = by_topic[topic]
        raise TopologyError(
            f"Changelog topic {c.topic!r} of store {c.store!r} has {have} partitions, but "
            f"the topology needs {c.partitions} (the most partitions of the topics its "
            "sub-topology reads). Kafka Streams refuses such a topic too: reset the "
            "application (`streamtable reset`, which deletes its internal topics) or "
            "restore the partition counts."
        )
