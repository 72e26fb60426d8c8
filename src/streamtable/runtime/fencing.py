"""Start-up of an ``exactly_once_v2`` application: fence the producers of earlier runs.

A run killed mid-transaction leaves its transactions open until ``transaction.timeout.ms``,
and ``read_committed`` consumers of its topics wait for them. Kafka Streams initializes its
task producers on start, which aborts them; streamtable initializes a producer for every
``transactional.id`` its tasks may use (:func:`prepare_exactly_once`), in parallel, before
any query starts (a task's producer initialized first would be fenced by it).

The transactional ids are known once the topology is compiled, which needs the Spark session.
So that a restart does not wait for both in turn, each start records its ids beside the
checkpoint (``transactional-ids.json``) and the next start fences those
(:func:`fence_recorded`) while its Spark session starts; after compiling it fences only ids
the record lacked (a new sink, more source partitions).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamtable.platform._process import read_state, write_state
from streamtable.runtime.task_output import (
    OutputSpec,
    _transactional_config,
    initialized_producer,
    marker_topic,
    output_spec,
    transactional_id,
)

if TYPE_CHECKING:
    from streamtable.config import StreamsConfig
    from streamtable.runtime.kafka_admin import KafkaAdmin

#: Beside the checkpoint: the (stage, slot) pairs of the last start's transactional ids.
RECORD_FILE = "transactional-ids.json"

Slot = int | str


def fencing_config(spec: OutputSpec, tid: str) -> dict[str, Any]:
    """The config of the producer that fences ``tid``: the task's, but with librdkafka's
    warnings off unless ``producer.log_level`` sets them.

    Its warnings are retried steps of ``init_transactions`` (e.g. "Failed to acquire
    transactional PID ... Not coordinator: retrying" while a new broker loads its transaction
    coordinator), printed by librdkafka on the application's console; a fencing that does not
    succeed raises instead.
    """
    conf = _transactional_config(spec, tid)
    conf.setdefault("log_level", 3)
    return conf


def _fence(jobs: Sequence[tuple[OutputSpec, Slot]]) -> None:
    def fence(spec: OutputSpec, p: Slot) -> None:
        tid = transactional_id(spec.application_id, spec.stage, p)
        producer = initialized_producer(fencing_config(spec, tid), tid, spec.timeout_ms / 1000.0)
        producer.flush(0)

    if not jobs:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(jobs))) as pool:
        for f in [pool.submit(fence, s, p) for s, p in jobs]:
            f.result()


def recorded_ids(checkpoint_dir: Path) -> set[tuple[str, Slot]]:
    """The (stage, slot) pairs the last start recorded (empty: none, or unreadable)."""
    body = read_state(checkpoint_dir / RECORD_FILE) or {}
    try:
        return {
            (str(stage), slot) for stage, slot in body.get("ids", ()) if isinstance(slot, int | str)
        }
    except (ValueError, TypeError):
        return set()


def fence_recorded(config: StreamsConfig) -> set[tuple[str, Slot]]:
    """Fence the transactional ids the last start of ``config``'s application recorded.

    Returns
    -------
    set of (str, int or str)
        The (stage, slot) pairs fenced; pass them to :func:`prepare_exactly_once`.

    Raises
    ------
    StreamsError
        If a producer cannot be initialized within its timeout.
    """
    ids = recorded_ids(Path(config.checkpoint_dir))
    specs = {stage: output_spec(config, stage) for stage, _ in ids}
    _fence([(specs[stage], slot) for stage, slot in sorted(ids, key=str)])
    return ids


def prepare_exactly_once(
    admin: KafkaAdmin,
    config: StreamsConfig,
    stages: Sequence[str],
    source_partitions: Mapping[str, int],
    fenced: Collection[tuple[str, Slot]] = (),
) -> None:
    """Marker topic, then fencing of every task of every output stage in ``stages``.

    Creates the marker topic (compacted: it holds only the writers' epoch probes; the markers
    themselves are group offsets) and fences every task of every output stage in ``stages``:
    task numbers ``0 .. max(config.shuffle_partitions, source partitions) - 1`` (``start()``
    passes the state partitions the checkpoints keep when they are more) and the source
    partition names (``topic-p``) of tasks that read Kafka directly, except the pairs in
    ``fenced`` (from :func:`fence_recorded`). Records them for the next start.

    Raises
    ------
    StreamtableError
        If the marker topic cannot be created.
    StreamsError
        If a producer cannot be initialized.
    """
    admin.ensure_internal_topic(
        marker_topic(config.application_id), config={"cleanup.policy": "compact"}
    )
    numbered = max(config.shuffle_partitions, sum(source_partitions.values()))
    slots: list[Slot] = list(range(numbered))
    slots += [f"{t}-{p}" for t, n in source_partitions.items() for p in range(n)]
    ids = {(stage, slot) for stage in stages for slot in slots}
    done = set(fenced)
    specs = {stage: output_spec(config, stage) for stage in stages}
    _fence([(specs[s], p) for s, p in sorted(ids - done, key=str) if specs[s].exactly_once])
    with contextlib.suppress(OSError):
        write_state(Path(config.checkpoint_dir) / RECORD_FILE, {"ids": sorted(ids, key=str)})
