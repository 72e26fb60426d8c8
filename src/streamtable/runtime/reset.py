"""``streamtable reset``: make the next start of an application recompute from its input.

streamtable's counterpart of Kafka's ``kafka-streams-application-reset``. An application's
positions and state live in its Spark checkpoints under ``state.dir/application.id`` (one
folder per query, plus the topology fingerprint); the reset

1. reads the positions the checkpoints committed, to keep those of the topics that are *not*
   among the input topics to rewind;
2. computes the new positions of the input topics (their earliest offsets, or the first offset
   at or after ``--to-datetime``);
3. commits all positions to the consumer group ``application.id`` (so Kafka's tools show them);
4. deletes the application's internal topics (``<application.id>-...-repartition``,
   ``-changelog``, ``-streamtable-internal``) and the exactly-once writer's consumer groups
   (``<application.id>-eos-...``);
5. deletes the checkpoints (and with them the local state and the fingerprint) and writes the
   positions to ``state.dir/application.id/starting-offsets.json``, where the next start reads
   them (see :mod:`streamtable.runtime.starting_offsets`).

The reset refuses to run while an instance of the application holds the state directory's lock
(:mod:`streamtable.runtime.state_lock`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka.admin import OffsetSpec

from streamtable._millis import epoch_ms
from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError, MissingSourceTopicError, StateDirLockedError
from streamtable.runtime.checkpoint import FINGERPRINT_FILE
from streamtable.runtime.internal_topics import is_eos_group, is_internal_topic
from streamtable.runtime.kafka_admin import KafkaAdmin
from streamtable.runtime.starting_offsets import (
    STARTING_OFFSETS_FILE,
    Positions,
    checkpoint_positions,
    read_starting_offsets,
    write_starting_offsets,
)
from streamtable.runtime.state_lock import LOCK_FILE, StateDirLock

__all__ = ["ResetResult", "parse_reset_datetime", "reset_application", "parse_input_topics"]


@dataclass(frozen=True)
class ResetResult:
    """What :func:`reset_application` did (or, with ``dry_run``, would do).

    Attributes
    ----------
    application_id : str
        The application reset.
    checkpoint_dir : str
        ``state.dir/application.id``.
    deleted_entries : list of str
        Names deleted from ``checkpoint_dir`` (query checkpoint folders, ``topology.json``, an
        old ``starting-offsets.json``); empty when there was nothing.
    deleted_topics : list of str
        Internal topics deleted.
    deleted_groups : list of str
        Consumer groups deleted (the exactly-once writer's).
    positions : dict
        The new starting positions ``{topic: {partition: offset}}``.
    rewound_topics : list of str
        The input topics (their positions are the earliest offsets or those at ``to_datetime``).
    kept_topics : list of str
        Topics read by the application, not among the input topics, whose committed position
        was kept.
    unpositioned_topics : list of str
        Source topics of the checkpoint's topology with no known position: they start from
        ``auto.offset.reset``.
    to_datetime : datetime or None
        The time the input topics were rewound to (None: to the earliest offsets).
    group_id : str
        The consumer group the positions were committed to.
    dry_run : bool
        Nothing was changed.
    """

    application_id: str
    checkpoint_dir: str
    deleted_entries: list[str] = field(default_factory=list)
    deleted_topics: list[str] = field(default_factory=list)
    deleted_groups: list[str] = field(default_factory=list)
    positions: Positions = field(default_factory=dict)
    rewound_topics: list[str] = field(default_factory=list)
    kept_topics: list[str] = field(default_factory=list)
    unpositioned_topics: list[str] = field(default_factory=list)
    to_datetime: datetime | None = None
    group_id: str = ""
    dry_run: bool = False

    def describe(self) -> str:
        """A human-readable report, one item per line."""
        would = "would delete" if self.dry_run else "deleted"
        lines = [
            f"{'Dry run: nothing changed. ' if self.dry_run else ''}"
            f"Reset of application {self.application_id!r}:"
        ]
        if self.deleted_entries:
            lines.append(
                f"  {would} checkpoints and local state in {self.checkpoint_dir}: "
                + ", ".join(self.deleted_entries)
            )
        else:
            lines.append(f"  no checkpoints in {self.checkpoint_dir}")
        lines.append(f"  {would} internal topics: {', '.join(self.deleted_topics) or 'none'}")
        lines.append(f"  {would} consumer groups: {', '.join(self.deleted_groups) or 'none'}")
        target = (
            "earliest offsets"
            if self.to_datetime is None
            else f"first offsets at or after {self.to_datetime.isoformat()}"
        )
        where = (
            f"{Path(self.checkpoint_dir) / STARTING_OFFSETS_FILE} and consumer group "
            f"{self.group_id!r}"
        )
        lines.append(
            f"  starting positions ({'to be ' if self.dry_run else ''}written to {where}):"
        )
        for topic in sorted(self.positions):
            how = (
                f"rewound to the {target}"
                if topic in self.rewound_topics
                else "kept from the checkpoint"
            )
            parts = " ".join(f"{p}:{o}" for p, o in sorted(self.positions[topic].items()))
            lines.append(f"    {topic} ({how}): {parts}")
        for topic in self.unpositioned_topics:
            lines.append(f"    {topic}: no committed position, starts from 'auto.offset.reset'")
        if not self.dry_run:
            lines.append("The next start of the application recomputes from these positions.")
        return "\n".join(lines)


def parse_reset_datetime(text: str | datetime) -> datetime:
    """Parse ``--to-datetime``: an ISO-8601 date-time, UTC when it has no offset.

    Parameters
    ----------
    text : str or datetime
        E.g. ``"2024-05-01T12:00:00Z"``, ``"2024-05-01T14:00:00.250+02:00"``,
        ``"2024-05-01T12:00"`` (UTC) or ``"2024-05-01"`` (midnight UTC). A naive ``datetime``
        is taken as UTC.

    Returns
    -------
    datetime
        Timezone-aware.

    Raises
    ------
    ConfigError
        If ``text`` is not an ISO-8601 date-time, or is before 1970-01-01 UTC.

    Examples
    --------
    >>> parse_reset_datetime("2024-05-01T14:00:00+02:00").isoformat()
    '2024-05-01T14:00:00+02:00'
    >>> parse_reset_datetime("2024-05-01").isoformat()
    '2024-05-01T00:00:00+00:00'
    """
    if isinstance(text, datetime):
        dt = text
    else:
        try:
            dt = datetime.fromisoformat(str(text).strip())
        except ValueError:
            raise ConfigError(
                f"--to-datetime {text!r} is not an ISO-8601 date-time; use e.g. "
                "'2024-05-01T12:00:00Z', '2024-05-01T14:00:00.000+02:00' or '2024-05-01' "
                "(UTC when no offset is given)."
            ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    if dt.timestamp() < 0:
        raise ConfigError(
            f"--to-datetime {dt.isoformat()!r} is before 1970-01-01T00:00:00Z; Kafka record "
            "timestamps start there."
        )
    return dt


def parse_input_topics(values: str | Iterable[str]) -> list[str]:
    """Split ``--input-topics`` values (comma-separated, repeatable) into topic names.

    Raises
    ------
    ConfigError
        If no topic name is given.
    """
    items = [values] if isinstance(values, str) else list(values)
    topics = [t.strip() for item in items for t in item.split(",") if t.strip()]
    if not topics:
        raise ConfigError(
            "--input-topics names no topic; give the application's input topics to rewind, "
            "comma-separated (e.g. --input-topics orders,customers)."
        )
    return list(dict.fromkeys(topics))


def reset_application(
    config: Mapping[str, object] | StreamsConfig,
    input_topics: Iterable[str],
    *,
    to_datetime: str | datetime | None = None,
    dry_run: bool = False,
) -> ResetResult:
    """Reset an application so that its next start recomputes from its input.

    Parameters
    ----------
    config : Mapping or StreamsConfig
        At least ``application.id`` and ``bootstrap.servers``; ``state.dir`` (default
        ``<tempdir>/streamtable``), ``request.timeout.ms`` (timeout of each admin call) and
        ``admin.*`` client configs (e.g. security) are used.
    input_topics : iterable of str
        The topics to rewind. Other topics the application reads keep their committed position.
    to_datetime : str or datetime, optional
        Rewind to the first offset whose timestamp is at or after this time (ISO-8601, UTC when
        no offset is given; a partition with no such record gets its end offset). Default: the
        earliest offsets.
    dry_run : bool
        Only compute and report; change nothing.

    Returns
    -------
    ResetResult
        What was deleted and the new positions (:meth:`ResetResult.describe` prints them).

    Raises
    ------
    ConfigError
        For a bad configuration, no input topic, or an unparsable ``to_datetime``.
    StateDirLockedError
        If an instance of the application is running with this state directory.
    BrokerUnreachableError
        If no broker answers within ``request.timeout.ms``.
    MissingSourceTopicError
        If an input topic does not exist (naming it).
    StreamtableError
        If Kafka refuses to delete a topic or group, or to commit the group offsets.
    """
    cfg = StreamsConfig.from_mapping(config)
    topics = parse_input_topics(list(input_topics))
    when = None if to_datetime is None else parse_reset_datetime(to_datetime)
    app_id = cfg.application_id
    checkpoint_dir = Path(cfg.checkpoint_dir)
    lock = StateDirLock(checkpoint_dir)
    running = (
        f"Application {app_id!r} is still running: its state directory {str(checkpoint_dir)!r} "
        "is locked by process {pid}. Stop the application first (Ctrl-C on `streamtable run`, "
        "or KafkaStreams.close()), then run `streamtable reset` again."
    )
    if dry_run:
        if lock.is_locked():
            raise StateDirLockedError(running.replace("{pid}", "(see the .lock file)"))
    else:
        lock.acquire(app_id, message=running)
    try:
        return _reset(cfg, topics, when, dry_run)
    finally:
        lock.release()


def _reset(
    cfg: StreamsConfig, topics: list[str], when: datetime | None, dry_run: bool
) -> ResetResult:
    app_id = cfg.application_id
    checkpoint_dir = Path(cfg.checkpoint_dir)
    admin = KafkaAdmin(
        cfg.bootstrap_servers, timeout_ms=cfg.request_timeout_ms, config=cfg.admin_config
    )
    existing = admin.topic_partitions()  # raises BrokerUnreachableError
    missing = [t for t in topics if t not in existing]
    if missing:
        raise MissingSourceTopicError(
            f"Input topic(s) {missing} given to --input-topics do not exist on "
            f"{cfg.bootstrap_servers}. Check the names (they are the topics the application "
            "reads and should reprocess), then run `streamtable reset` again."
        )

    # the application's internal topics, deleted below; never a topic it reads, even one named
    # like an internal topic by chance (StreamsResetter leaves input topics out, KAFKA-7930)
    sources = _fingerprint_sources(checkpoint_dir)
    internal = sorted(
        t for t in existing if is_internal_topic(app_id, t) and t not in topics and t not in sources
    )

    # positions to keep: the checkpoints' (or an earlier reset's) for topics not rewound
    committed = checkpoint_positions(checkpoint_dir)
    for topic, parts in read_starting_offsets(checkpoint_dir).items():
        committed.setdefault(topic, parts)
    positions: Positions = {
        t: {p: off for p, off in parts.items() if p < existing[t]}
        for t, parts in committed.items()
        if t not in topics
        and t in existing  # a deleted topic has no position to keep
        # repartition topics are deleted and start empty: their readers start at 0
        and t not in internal
    }
    kept = sorted(positions)

    wanted = {t: existing[t] for t in topics}
    if when is None:
        rewound = admin.list_offsets(wanted, OffsetSpec.earliest(), "earliest")
    else:
        ms = epoch_ms(when)
        rewound = admin.list_offsets(wanted, OffsetSpec.for_timestamp(ms), "by-timestamp")
        if any(off < 0 for off in rewound.values()):
            ends = admin.list_offsets(wanted, OffsetSpec.latest(), "end")
            rewound = {tp: off if off >= 0 else ends[tp] for tp, off in rewound.items()}
    for (topic, part), off in rewound.items():
        positions.setdefault(topic, {})[part] = off

    unpositioned = [t for t in sources if t not in positions]
    groups = [g for g in admin.consumer_groups() if is_eos_group(app_id, g)]
    entries = (
        sorted(p.name for p in checkpoint_dir.iterdir() if p.name != LOCK_FILE)
        if checkpoint_dir.is_dir()
        else []
    )
    result = ResetResult(
        application_id=app_id,
        checkpoint_dir=str(checkpoint_dir),
        deleted_entries=entries,
        deleted_topics=internal,
        deleted_groups=groups,
        positions=positions,
        rewound_topics=sorted(topics),
        kept_topics=kept,
        unpositioned_topics=unpositioned,
        to_datetime=when,
        group_id=app_id,
        dry_run=dry_run,
    )
    if dry_run:
        return result
    # the group first: it fails (before anything is deleted) when the group has active members
    admin.alter_group_offsets(
        app_id, {(t, p): off for t, parts in positions.items() for p, off in parts.items()}
    )
    admin.delete_topics(internal)
    admin.delete_consumer_groups(groups)
    for name in entries:
        path = checkpoint_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    write_starting_offsets(checkpoint_dir, positions)
    return result


def _fingerprint_sources(checkpoint_dir: Path) -> list[str]:
    path = checkpoint_dir / FINGERPRINT_FILE
    try:
        sources = json.loads(path.read_text(encoding="utf-8")).get("sources", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [str(t) for t in sources] if isinstance(sources, list) else []
