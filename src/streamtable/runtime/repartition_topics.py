"""Internal repartition topics between sub-topologies: creation on start, purging after commit.

Kafka Streams creates each repartition topic on start (``cleanup.policy=delete``, unlimited
retention, the partition count its ``RepartitionTopics`` chose) and deletes the records every
reading task has committed every ``repartition.purge.interval.ms``, so the topic holds only
what is still to be processed. streamtable does the same for the topics
:mod:`streamtable.compiler.subtopologies` adds.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streamtable.errors import StreamtableError, TopologyError
from streamtable.runtime.group_offsets import processed_offsets
from streamtable.runtime.kafka_admin import KafkaAdmin
from streamtable.runtime.starting_offsets import query_checkpoint_positions

__all__ = ["REPARTITION_TOPIC_CONFIG", "RepartitionPurger", "ensure_repartition_topics"]

log = logging.getLogger("streamtable")

#: Kafka Streams' configuration of repartition topics (``RepartitionTopicConfig``): records are
#: removed by the application's purges, never by time.
REPARTITION_TOPIC_CONFIG = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "segment.bytes": str(50 * 1024 * 1024),
}


def ensure_repartition_topics(
    admin: KafkaAdmin, topics: Mapping[str, int], checkpoint_dir: str | os.PathLike[str]
) -> None:
    """Create the repartition ``topics`` (``{name: partitions}``) that do not exist yet.

    Parameters
    ----------
    admin : KafkaAdmin
    topics : mapping
        ``{repartition topic: partitions}``.
    checkpoint_dir : str or os.PathLike
        The application's checkpoints (``state.dir/application.id``).

    Raises
    ------
    TopologyError
        If one exists with another partition count (Kafka Streams refuses to start then too),
        or is missing although a query's checkpoint has read it: it was deleted while the
        application was down, with records the reading sub-topology may not have processed,
        and that query would fail on the empty topic (Spark: "offset was changed"). Kafka
        Streams recreates such a topic and reads it from the start, losing those records
        silently. The message says to run ``streamtable reset``, which deletes internal
        topics and the checkpoints.
    StreamtableError
        If a topic cannot be created.
    """
    if not topics:
        return
    existing = admin.topic_partitions(list(topics))
    read = _checkpointed_reads(checkpoint_dir, [t for t in topics if t not in existing])
    for name, positions in read.items():
        raise TopologyError(
            f"Repartition topic {name!r} does not exist, but the application's checkpoint has "
            f"read it up to {_positions(positions)}: it was deleted while the application was "
            "down, with records the sub-topology reading it may not have processed. "
            "Recreating it empty would lose them (and Spark refuses an input whose offsets went "
            "back). Reset the application (`streamtable reset`, which deletes its internal "
            "topics and checkpoints) to recompute from the input topics."
        )
    for name, have in admin.ensure_internal_topics(topics, REPARTITION_TOPIC_CONFIG).items():
        raise TopologyError(
            f"Repartition topic {name!r} has {have} partitions, but the topology needs "
            f"{topics[name]} (the most partitions of the topics feeding it, or "
            "repartition(num_partitions=...)). Kafka Streams refuses such a topic too: "
            "reset the application (`streamtable reset`, which deletes its internal topics) "
            "or restore the partition counts."
        )


def _checkpointed_reads(
    checkpoint_dir: str | os.PathLike[str], topics: list[str]
) -> dict[str, dict[int, int]]:
    """``{topic: {partition: offset}}`` of ``topics`` that some query's checkpoint under
    ``checkpoint_dir`` has read past offset 0 (the largest offset over the queries).
    """
    root = Path(checkpoint_dir)
    if not topics or not root.is_dir():
        return {}
    out: dict[str, dict[int, int]] = {}
    for query_dir in sorted(p for p in root.iterdir() if (p / "offsets").is_dir()):
        for topic, parts in query_checkpoint_positions(query_dir).items():
            if topic in topics:
                for p, off in parts.items():
                    if off > 0:
                        known = out.setdefault(topic, {})
                        known[p] = max(off, known.get(p, off))
    return out


def _positions(positions: Mapping[int, int]) -> str:
    return ", ".join(f"partition {p}: offset {o}" for p, o in sorted(positions.items()))


class RepartitionPurger:
    """Deletes the records of repartition topics that every reading query has committed.

    Parameters
    ----------
    admin : KafkaAdmin
    readers : mapping
        ``{repartition topic: indexes of the queries reading it}``.
    interval_ms : int
        ``repartition.purge.interval.ms``; 0 purges at every :meth:`update`.
    """

    def __init__(self, admin: KafkaAdmin, readers: Mapping[str, list[int]], interval_ms: int):
        self.admin = admin
        self.readers = {t: list(r) for t, r in readers.items() if r}
        self.interval_s = interval_ms / 1000.0
        self._last = time.monotonic()
        #: {(topic, partition): offset} deleted up to so far
        self.purged: dict[tuple[str, int], int] = {}

    def update(self, queries: list[Any], *, force: bool = False) -> None:
        """Purge up to the offsets all queries reading each topic have committed.

        A query's last progress is posted after its micro-batch is committed, so its end
        offsets are committed positions. Called from the application's monitor thread;
        failures are logged, never raised (the next purge tries again).
        """
        if not self.readers:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        todo: dict[tuple[str, int], int] = {}
        for topic, indexes in self.readers.items():
            offsets = processed_offsets([queries[i].lastProgress for i in indexes])
            for tp, off in (offsets or {}).items():
                if tp[0] == topic and off > self.purged.get(tp, 0):
                    todo[tp] = off
        try:
            self.admin.delete_records(todo)
        except StreamtableError as e:
            if not self.admin.closed:  # closed: the application is closing
                log.warning("could not purge repartition topics: %s", e)
            return
        self.purged.update(todo)
