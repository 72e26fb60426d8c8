"""The data-loss audit's queries of an application (``streamtable.audit.topic``).

For every source topic, a light Spark query reads the topic as the application's sources do
(same bootstrap servers, ``consumer.*`` options and starting offsets, ``read_committed``) and
publishes, per micro-batch, how many records it read per partition and one-minute window of
event time: role ``consumed``, reporter ``application.id``.  For every sink topic, a query
reads the topic ``read_committed`` from its end offsets at the application's first start with
the audit, and publishes role ``produced``: what the topic committed since then, which is what
the application's sinks wrote when nothing else writes to the topic.

Each query has its own checkpoint under ``state.dir/application.id/audit/``, so a restart
continues where it stopped and a replayed micro-batch publishes the same keys again (the
audit keeps the last value per key: counted once).  The ``batch`` of a record is
``<run>-<batch id>``, ``run`` being an id stored beside those checkpoints: after
``streamtable reset`` (which deletes them) a reprocessing is counted again, as a new run.

An audit query that fails is logged and restarted from its checkpoint every
:data:`RESTART_INTERVAL_S` seconds; it never stops the application (as Kafka's client
interceptors, whose errors are logged and ignored).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from streamtable.config import StreamsConfig
from streamtable.platform.audit import CONSUMED, PRODUCED, WINDOW_MS, AuditRecord, publish_audit
from streamtable.runtime.kafka_source_options import kafka_source_options
from streamtable.runtime.librdkafka_config import librdkafka_settings
from streamtable.runtime.starting_offsets import spark_starting_offsets

__all__ = ["AUDIT_DIR", "RESTART_INTERVAL_S", "AuditQueries"]

log = logging.getLogger("streamtable")

#: Folder of the audit queries' checkpoints, inside ``state.dir/application.id``.
AUDIT_DIR = "audit"
#: Least ms between two micro-batches of an audit query: counts are published at this cadence
#: (Confluent's monitoring interceptors publish every 15 s), which keeps the audit's queries
#: out of the way of the application's own.
MIN_INTERVAL_MS = 10_000
#: Seconds between restarts of a failed audit query.
RESTART_INTERVAL_S = 5.0


class _Publisher:
    """``foreachBatch`` function: count a micro-batch per window and publish the counts."""

    def __init__(self, cfg: StreamsConfig, role: str, run: str) -> None:
        self._cfg = cfg
        self._role = role
        self._run = run

    def __call__(self, df: Any, batch_id: int) -> None:
        cfg = self._cfg
        rows = df.groupBy("topic", "partition", "window_start").count().collect()
        records = [
            AuditRecord(
                self._role,
                cfg.application_id,
                r["topic"],
                int(r["partition"]),
                int(r["window_start"]),
                int(r["count"]),
                f"{self._run}-{batch_id}",
            )
            for r in rows
        ]
        assert cfg.audit_topic is not None
        publish_audit(
            cfg.bootstrap_servers,
            cfg.audit_topic,
            records,
            producer_config=librdkafka_settings(cfg.producer_config, "producer").accepted,
            timeout_s=cfg.request_timeout_ms / 1000,
        )


class AuditQueries:
    """Starts, watches and stops the audit queries of one application.

    Parameters
    ----------
    spark : SparkSession
    config : StreamsConfig
        With ``audit_topic`` set.
    source_topics, sink_topics : sequence of str
        The topology's user topics.
    partitions : Mapping[str, int]
        Partition counts of those topics.
    sink_ends : Mapping[tuple[str, int], int]
        End offsets of the sink topics before the application's queries start: where a sink
        topic's audit query starts the first time.
    offset_reset : Callable[[str], str]
        ``auto.offset.reset`` of the source reading a topic (the source's own, else the
        config's).
    """

    def __init__(
        self,
        spark: Any,
        config: StreamsConfig,
        source_topics: list[str] | tuple[str, ...],
        sink_topics: list[str] | tuple[str, ...],
        partitions: Mapping[str, int],
        sink_ends: Mapping[tuple[str, int], int],
        offset_reset: Callable[[str], str],
    ) -> None:
        if config.audit_topic is None:
            raise ValueError("AuditQueries needs a config with 'streamtable.audit.topic' set")
        self._spark = spark
        self._cfg = config
        self._root = Path(config.checkpoint_dir) / AUDIT_DIR
        self._specs: list[tuple[str, str, str]] = []  # (name, role, topic)
        self._starts: dict[str, str] = {}
        for t in dict.fromkeys(source_topics):
            name = f"{CONSUMED}-{t}"
            self._specs.append((name, CONSUMED, t))
            self._starts[name] = spark_starting_offsets(
                config.checkpoint_dir, [t], partitions, offset_reset(t)
            )
        for t in dict.fromkeys(sink_topics):
            name = f"{PRODUCED}-{t}"
            self._specs.append((name, PRODUCED, t))
            ends = {str(p): off for (topic, p), off in sink_ends.items() if topic == t}
            self._starts[name] = _json({t: ends}) if ends else "latest"
        self._queries: list[Any] = []
        self._failed_at: dict[int, float] = {}
        self._run = ""
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def queries(self) -> list[Any]:
        """The running audit queries (Spark ``StreamingQuery``)."""
        return list(self._queries)

    def start(self) -> None:
        """Start one query per source and sink topic.

        Raises
        ------
        Exception
            Spark's error if a query cannot start (the queries started are stopped).
        """
        self._root.mkdir(parents=True, exist_ok=True)
        self._run = _run_id(self._root)
        try:
            for i in range(len(self._specs)):
                self._queries.append(self._start_one(i))
        except BaseException:
            self.stop()
            raise

    def _start_one(self, index: int) -> Any:
        from pyspark.sql import functions as F

        cfg = self._cfg
        name, role, topic = self._specs[index]
        reader = (
            self._spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", self._starts[name])
            .option("includeHeaders", "false")
        )
        if cfg.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
        for k, v in kafka_source_options(cfg.consumer_config).items():
            reader = reader.option(k, v)
        reader = reader.option("kafka.isolation.level", "read_committed")
        ms = F.unix_millis(F.col("timestamp"))
        df = reader.load().select(
            F.col("topic"),
            F.col("partition"),
            (ms - F.pmod(ms, F.lit(WINDOW_MS))).alias("window_start"),
        )
        writer = (
            df.writeStream.queryName(f"{cfg.application_id}-audit-{name}")
            .option("checkpointLocation", str(self._root / name))
            .foreachBatch(_Publisher(cfg, role, self._run))
        )
        if cfg.trigger == "available_now":
            writer = writer.trigger(availableNow=True)
        else:
            interval = max(cfg.commit_interval_ms, MIN_INTERVAL_MS)
            writer = writer.trigger(processingTime=f"{interval} milliseconds")
        log.info("[%s] starting audit query %s", cfg.application_id, name)
        return writer.start()

    def await_caught_up(self, end_offsets: Callable[[list[str]], dict], deadline: float) -> bool:
        """Wait until every audit query has read its topic up to the end offsets now.

        Parameters
        ----------
        end_offsets : Callable
            ``end_offsets(topics) -> {(topic, partition): offset}`` (the admin client's).
        deadline : float
            ``time.monotonic()`` value to give up at.

        Returns
        -------
        bool
            True when caught up (under ``available_now``: when the queries have stopped);
            False at the deadline.
        """
        from streamtable.runtime.progress import caught_up

        targets = end_offsets(sorted({topic for _, _, topic in self._specs}))
        while True:
            queries = self.queries
            pending = [q for q in queries if not caught_up(q, targets)]
            if not pending:
                return True
            if self._cfg.trigger == "available_now" and not any(q.isActive for q in pending):
                return True  # they processed what was there when they started
            if time.monotonic() >= deadline:
                return False  # a failed query is restarted by update() meanwhile
            time.sleep(0.1)

    def update(self) -> None:
        """Restart (from its checkpoint) an audit query that failed, at most every
        :data:`RESTART_INTERVAL_S` seconds; log its error.
        """
        with self._lock:
            if not self._stopped:
                self._restart_failed()

    def _restart_failed(self) -> None:
        now = time.monotonic()
        for i, q in enumerate(list(self._queries)):
            exc = q.exception()
            if exc is None:
                continue
            first = i not in self._failed_at
            if not first and now - self._failed_at[i] < RESTART_INTERVAL_S:
                continue
            self._failed_at[i] = now
            log.warning(
                "[%s] audit query %s failed; restarting it from its checkpoint (no count is "
                "lost): %s",
                self._cfg.application_id,
                self._specs[i][0],
                str(exc).splitlines()[0][:300],
            )
            try:
                self._queries[i] = self._start_one(i)
            except Exception as e:  # try again at the next interval
                log.warning("[%s] audit restart failed: %s", self._cfg.application_id, e)

    def stop(self, let_finish: Callable[[Any], None] | None = None) -> None:
        """Stop every audit query (after ``let_finish(query)``, e.g. waiting for a running
        micro-batch to commit).
        """
        with self._lock:
            self._stopped = True
            queries, self._queries = self._queries, []
        for q in queries:
            try:
                if let_finish is not None:
                    let_finish(q)
                q.stop()
            except Exception:  # a failed query raises again on stop
                pass


def _json(value: object) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def _run_id(root: Path) -> str:
    """The audit run id stored in ``root/run-id`` (created on first use)."""
    path = root / "run-id"
    if path.exists():
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return text
    run = uuid.uuid4().hex[:12]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(run + "\n", encoding="utf-8")
    tmp.replace(path)
    return run
