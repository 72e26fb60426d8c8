"""Committing processed offsets to the consumer group ``application.id``, for lag monitoring.

Spark keeps an application's positions in its checkpoints, which Kafka's tools cannot see.
Kafka Streams commits its positions to the consumer group named after ``application.id``;
streamtable does the same from the queries' progress, so ``kafka-consumer-groups --describe
--group <application.id>`` shows the application's lag. The checkpoint stays the source of
truth: these commits are informational and never read back.

Per topic-partition the committed offset is the smallest end offset over the queries that read
the topic (a record counts as processed once every query reading it has processed it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from streamtable.runtime.progress import end_offsets

__all__ = ["GroupOffsetCommitter", "processed_offsets"]

log = logging.getLogger("streamtable")

#: A commit failing with a retriable error is tried again this often, backing off 0.3, 0.6, ...
_COMMIT_ATTEMPTS = 5
_COMMIT_BACKOFF_S = 0.3

Offsets = dict[tuple[str, int], int]


def processed_offsets(progresses: list[Any]) -> Offsets | None:
    """The offsets every query has processed, from the queries' last progress.

    Parameters
    ----------
    progresses : list
        ``StreamingQuery.lastProgress`` of each query (objects with ``sources``, whose
        ``endOffset`` is Spark's JSON ``{topic: {partition: offset}}``); None for a query
        without a completed batch yet.

    Returns
    -------
    dict or None
        ``{(topic, partition): offset}``: per partition the minimum end offset over the queries
        reading its topic; None while some query has no progress yet (what it read is not
        known, so committing others' offsets could overstate its progress).
    """
    if any(p is None for p in progresses):
        return None
    out: Offsets = {}
    for progress in progresses:
        for tp, off in end_offsets(progress).items():
            out[tp] = min(off, out.get(tp, off))
    return out


class GroupOffsetCommitter:
    """Commits the queries' processed offsets to consumer group ``application.id``.

    Commits run on a background thread (a commit may block while the group coordinator is
    unreachable), only when an offset changed, and never raise: failures are logged as warnings.

    Parameters
    ----------
    application_id : str
        The group id.
    bootstrap_servers : str
        ``host:port[,host:port...]``.
    client_config : Mapping[str, Any], optional
        Extra librdkafka settings (e.g. ``security.protocol``); ``StreamsConfig.consumer_config``.
    consumer_factory : callable, optional
        ``factory(conf) -> consumer`` with ``commit(offsets=..., asynchronous=False)`` and
        ``close()``; default ``confluent_kafka.Consumer`` (tests pass a fake).
    """

    def __init__(
        self,
        application_id: str,
        bootstrap_servers: str,
        client_config: Mapping[str, Any] | None = None,
        *,
        consumer_factory: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self._conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            # librdkafka's own errors are not for the console: a failed commit is logged once
            # per distinct failure below (consumer.log_level shows them again)
            "log_level": 2,
            **(client_config or {}),
            "group.id": application_id,
            "enable.auto.commit": False,
        }
        self._factory = consumer_factory
        self._consumer: Any = None
        self._committed: Offsets = {}
        self._pending: Offsets = {}
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._last_warning = ""
        self._thread: threading.Thread | None = None

    @property
    def committed(self) -> Offsets:
        """The offsets committed so far (a copy)."""
        with self._cond:
            return dict(self._committed)

    def update(self, queries: list[Any]) -> None:
        """Queue a commit of the offsets ``queries`` have processed, if any changed.

        Parameters
        ----------
        queries : list of StreamingQuery
            Every query of the application.
        """
        try:
            offsets = processed_offsets([q.lastProgress for q in queries])
        except Exception as e:  # a query being torn down may fail to report
            self._warn(f"could not read the queries' progress: {e}")
            return
        if offsets:
            self.submit(offsets)

    def submit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Queue ``{(topic, partition): offset}`` for commit (only the changed entries)."""
        with self._cond:
            if self._closed:
                return
            changed = {
                tp: off
                for tp, off in offsets.items()
                if self._committed.get(tp) != off and self._pending.get(tp) != off
            }
            if not changed:
                return
            self._pending.update(changed)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="streamtable-group-offsets", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait up to ``timeout_s`` seconds for queued commits; True when none is left."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout_s)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Flush (up to ``timeout_s`` seconds), stop the thread and close the consumer.

        Returns
        -------
        bool
            True when every queued commit was attempted.
        """
        done = self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and done:
            self._thread.join(timeout_s)
        return done

    # -- worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if not self._pending:  # closed
                    break
                batch, self._pending = self._pending, {}
                self._busy = True
            try:
                self._commit(batch)
                with self._cond:
                    self._committed.update(batch)
            except Exception as e:
                self._warn(
                    f"could not commit offsets to consumer group {self._conf['group.id']!r}: {e}"
                )
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # pragma: no cover - best effort
                pass

    def _commit(self, batch: Offsets) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        if self._consumer is None:
            factory = self._factory
            if factory is None:
                from confluent_kafka import Consumer

                factory = Consumer
            self._consumer = factory(dict(self._conf))
        offsets = [TopicPartition(t, p, off) for (t, p), off in sorted(batch.items())]
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                self._consumer.commit(offsets=offsets, asynchronous=False)
                return
            except KafkaException as e:
                if not _retriable(e) or attempt == _COMMIT_ATTEMPTS - 1:
                    raise
                # e.g. COORDINATOR_LOAD_IN_PROGRESS on a broker that just (re)started
                time.sleep(_COMMIT_BACKOFF_S * (attempt + 1))

    def _warn(self, message: str) -> None:
        if message != self._last_warning:  # once per distinct failure, not every 0.2 s
            self._last_warning = message
            log.warning(
                "[%s] %s (lag shown by Kafka's tools may be stale)", self._conf["group.id"], message
            )


def _retriable(exc: Exception) -> bool:
    """A commit error worth trying again: librdkafka says so, or the group coordinator is
    loading or moving (librdkafka does not always flag these on a synchronous commit).
    """
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    return error.retriable() or error.code() in (
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
    )
