"""Changelog topics of queryable key-value stores: every update, as Kafka Streams logs it.

Kafka Streams backs each state store with a compacted changelog topic
``<application.id>-<store>-changelog`` and writes every update to it (with the record cache: the
last update per key and commit). streamtable's state lives in Spark's checkpoint, which
restores it after a failure; the changelog serves the stores of the DSL that the user named
(``count(name=...)``, ``StreamsBuilder.table(name=...)``, Kafka Streams' queryable stores):
interactive queries read it into a local replica (:mod:`streamtable.state`).

The stage runs right after the store's stateful operator: it produces each output row of the
operator (one per updated key and micro-batch, ``None`` value for a deletion) to the changelog
and passes every row on unchanged. Keys are the store's key bytes (its key serde), values are
re-encoded with the store's value serde, so the topic reads like Kafka Streams' changelog.
Records are partitioned by murmur2 of the key, like Java's producer. Under ``exactly_once_v2``
each task's changelog records are one Kafka transaction per micro-batch
(:mod:`streamtable.runtime.task_output`); ``read_committed`` readers see each batch whole or
not at all.

When the rows are already the changelog's bytes (a native count or Long reduction, or values
in the store's serde) and go straight to a Kafka sink, the sink writes the changelog rows itself
and the stage is left out (:class:`streamtable.compiler.frame.FusedChangelog`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from streamtable.compiler.codecs import Codec, SerdeCodec
from streamtable.compiler.frame import FusedChangelog
from streamtable.errors import StreamsError
from streamtable.runtime.task_output import OutputSpec, TaskOutput

if TYPE_CHECKING:
    from streamtable.compiler.frame import CompileContext, Frame
    from streamtable.serde.base import Serde

__all__ = [
    "CHANGELOG_TOPIC_CONFIG",
    "StoreUpdatesWriter",
    "ChangelogInfo",
    "ChangelogWriter",
    "changelog_topic",
    "logged",
]

#: Kafka Streams' configuration of key-value changelog topics (``UnwindowedChangelogTopicConfig``):
#: compacted, so the topic keeps the latest value of every key.
CHANGELOG_TOPIC_CONFIG = {"cleanup.policy": "compact"}


def changelog_topic(application_id: str, store: str) -> str:
    """Kafka Streams' name of a store's changelog topic.

    >>> changelog_topic("clicks-app", "clicks-per-user")
    'clicks-app-clicks-per-user-changelog'
    """
    return f"{application_id}-{store}-changelog"


@dataclass(frozen=True)
class ChangelogInfo:
    """A queryable store's changelog, as compiled (metadata for the runtime and the replicas).

    Attributes
    ----------
    store : str
        The store's name.
    topic : str
        Its changelog topic.
    partitions : int
        The topic's partition count: the most partitions of the topics the store's
        sub-topology reads (Kafka Streams: one changelog partition per task).
    kind : str
        ``"key_value"``, ``"window"`` or ``"session"``.
    key_serde, value_serde : Serde
        How the changelog's keys and values are encoded (the store's serdes).
    query : str
        The query whose micro-batches write the changelog.
    window_size_ms : int or None
        Window stores of time windows: the window size (a window's end is start + size).
    retention_ms : int or None
        Window and session stores: how long the store keeps a window after its start (a
        session after its end); queries find nothing older, as in Kafka Streams.
    """

    store: str
    topic: str
    partitions: int
    kind: str
    key_serde: Serde
    value_serde: Serde
    query: str
    window_size_ms: int | None = None
    retention_ms: int | None = None


def _long_bytes(v: int | None) -> bytes | None:
    return None if v is None else struct.pack(">q", v)


@dataclass(frozen=True)
class ChangelogWriter:
    """``Iterator[RecordBatch] -> Iterator[RecordBatch]`` for ``mapInArrow`` (see module).

    Parameters
    ----------
    topic : str
        The changelog topic.
    value_codec : Codec
        How the operator's ``value`` column holds the values.
    value_serde : Serde
        The store's value serde (the changelog's encoding).
    spec : OutputSpec
        The output stage (transactions under exactly-once).
    """

    topic: str
    value_codec: Codec
    value_serde: Serde
    spec: OutputSpec
    #: appended to every key: a window store's sequence number (Kafka Streams'
    #: ``WindowKeySchema``: key + start + seqnum)
    key_suffix: bytes = b""

    def encode(self, values: list[object]) -> list[bytes | None]:
        """The changelog bytes of a column of values (``None`` stays a tombstone)."""
        codec = self.value_codec
        if codec.native_long and self.value_serde.kind == "long":
            return [_long_bytes(v) for v in values]  # type: ignore[arg-type]
        if isinstance(codec, SerdeCodec) and codec.serde() == self.value_serde:
            return values  # type: ignore[return-value]
        return self.value_serde.serialize_many(codec.decode_many(values))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Produce every row of each batch to the changelog; yield the batch unchanged."""
        out = TaskOutput(self.spec)
        try:
            for batch in batches:
                if batch.num_rows and not out.replayed:
                    names = batch.schema.names
                    keys = batch.column(names.index("key")).to_pylist()
                    values = self.encode(batch.column(names.index("value")).to_pylist())
                    ts = batch.column(names.index("ts")).to_pylist()
                    if None in keys:  # Kafka Streams' stores take no null key
                        kept = [i for i, k in enumerate(keys) if k is not None]
                        keys, values, ts = ([c[i] for i in kept] for c in (keys, values, ts))
                    if self.key_suffix:
                        suffix = self.key_suffix
                        keys = [k + suffix for k in keys]
                    out.produce_many(self.topic, keys, values, ts)
                yield batch
            out.close()
        except StreamsError as e:
            out.abort()
            raise StreamsError(
                f"Could not write changelog topic {self.topic!r}: {e} Check that the topic "
                "exists (the application creates it on start) and the broker is reachable."
            ) from e
        except BaseException:
            out.abort()
            raise


@dataclass(frozen=True)
class StoreUpdatesWriter:
    """``mapInArrow`` after a ``KStream.process`` operator: produces its store-update rows
    (``reason`` ``"changelog"``, ``topic`` = the store's name, key and value already in the
    store's serdes) to the stores' changelog topics, and yields every other row.

    Parameters
    ----------
    topics : dict
        Store name -> changelog topic (logged stores only; updates of others are dropped).
    spec : OutputSpec
        The output stage (transactions under exactly-once).
    """

    topics: dict[str, str]
    spec: OutputSpec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Produce the update rows of each batch; yield the batch without them."""
        import pyarrow.compute as pc

        out = TaskOutput(self.spec)
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                reason = batch.column(batch.schema.names.index("reason"))
                is_update = pc.fill_null(pc.equal(reason, "changelog"), False)
                updates = batch.filter(is_update)
                if updates.num_rows and not out.replayed:
                    cols = {
                        n: updates.column(i).to_pylist() for i, n in enumerate(updates.schema.names)
                    }
                    for store, key, value, t in zip(
                        cols["topic"], cols["key"], cols["value"], cols["ts"], strict=True
                    ):
                        topic = self.topics.get(store)
                        if topic is not None:
                            out.produce(topic, key, value, timestamp=t)
                yield batch.filter(pc.invert(is_update))
            out.close()
        except StreamsError as e:
            out.abort()
            raise StreamsError(
                f"Could not write changelog topics {sorted(self.topics.values())}: {e} Check "
                "that the topics exist (the application creates them on start) and the broker "
                "is reachable."
            ) from e
        except BaseException:
            out.abort()
            raise


def logged_windows(
    ctx: CompileContext,
    frame: Frame,
    node_name: str,
    store: str,
    value_serde: Serde | None,
    window_size_ms: int | None,
    retention_ms: int | None = None,
) -> Frame:
    """``frame`` (a windowed aggregation's updates, keys in windowed bytes) with a changelog
    writer for window store ``store`` (``window_size_ms`` set: time windows) or session store,
    which keeps windows for ``retention_ms``.

    The changelog keys are Kafka Streams' store key binaries: key + start + 4-byte sequence
    number 0 for windows, key + end + start for sessions (which is the windowed key the
    frame already holds). Unchanged when :func:`logged` would not log either.
    """
    from streamtable.compiler.codecs import SessionWindowedCodec, WindowedCodec

    codec = frame.key_codec
    assert isinstance(codec, WindowedCodec | SessionWindowedCodec)
    kind = "session" if window_size_ms is None else "window"
    suffix = b"" if window_size_ms is None else b"\x00\x00\x00\x00"
    return _with_changelog(
        ctx,
        frame,
        node_name,
        store,
        codec.inner.serde(),
        value_serde,
        kind,
        window_size_ms,
        suffix,
        retention_ms,
    )


def logged(
    ctx: CompileContext, frame: Frame, node_name: str, store: str, value_serde: Serde | None
) -> Frame:
    """``frame`` (the updates of key-value store ``store``, produced by node ``node_name``) with
    a :class:`ChangelogWriter` after it.

    Nothing changes when the store is logged already (a table lowered in a second query), in
    the TopologyTestDriver (which reads stores from the checkpoint), or when the store has no
    key or value serde (``value_serde``, else ``default.value.serde``): the reason is kept in
    ``ctx.unlogged`` for the error of a query of that store.
    """
    key_serde = frame.key_codec.serde()
    return _with_changelog(ctx, frame, node_name, store, key_serde, value_serde, "key_value")


def _with_changelog(
    ctx: CompileContext,
    frame: Frame,
    node_name: str,
    store: str,
    key_serde: Serde | None,
    value_serde: Serde | None,
    kind: str,
    window_size_ms: int | None = None,
    key_suffix: bytes = b"",
    retention_ms: int | None = None,
) -> Frame:
    """Register store ``store``'s changelog and add its writer after ``frame`` (see
    :func:`logged`).
    """
    info = register_changelog(
        ctx, node_name, store, key_serde, value_serde, kind, window_size_ms, retention_ms
    )
    if info is None:
        return frame
    spec = ctx.output_spec(f"changelog-{store}")
    writer = ChangelogWriter(info.topic, frame.value_codec, info.value_serde, spec, key_suffix)
    staged = frame.with_(df=frame.df.mapInArrow(writer, frame.df.schema))
    if key_suffix or not _bytes_as_they_are(frame.value_codec, info.value_serde):
        return staged
    return staged.with_(fused_changelog=FusedChangelog(frame.df, info.topic))


def _bytes_as_they_are(codec: Codec, value_serde: Serde) -> bool:
    """Whether the changelog's values are the ``value`` column as Spark can write it:
    a native ``bigint`` (a count or a Long reduction) going to a store whose serde is Kafka's
    ``Long`` (as :meth:`ChangelogWriter.encode` writes it), or bytes already in the store's
    value serde.
    """
    if codec.native_long:
        return value_serde.kind == "long"
    return isinstance(codec, SerdeCodec) and codec.serde() == value_serde


def register_changelog(
    ctx: CompileContext,
    node_name: str,
    store: str,
    key_serde: Serde | None,
    value_serde: Serde | None,
    kind: str,
    window_size_ms: int | None = None,
    retention_ms: int | None = None,
) -> ChangelogInfo | None:
    """Record store ``store``'s changelog in ``ctx.changelogs`` (its partitions: the most of
    the topics node ``node_name`` reads, one per Kafka Streams task); ``None`` when the store
    is logged already, in the TopologyTestDriver, or without a serde (the reason then goes to
    ``ctx.unlogged``).
    """
    from streamtable.compiler.subtopologies import read_topics

    if not store or store in ctx.changelogs or ctx.capture_dir is not None:
        return None
    value_serde = value_serde or ctx.config.default_value_serde
    if key_serde is None or value_serde is None:
        what = "key" if key_serde is None else "value"
        ctx.unlogged[store] = (
            f"it has no {what} serde to encode its changelog: give the grouping's "
            f"{what}_serde= (or Materialized.with_{what}_serde) or set 'default.{what}.serde'"
        )
        return None
    partitions = max(
        (ctx.topic_partitions.get(t, 1) for t in read_topics(ctx.graph, node_name)), default=1
    )
    topic = changelog_topic(ctx.config.application_id, store)
    info = ChangelogInfo(
        store,
        topic,
        partitions,
        kind,
        key_serde,
        value_serde,
        ctx.query,
        window_size_ms,
        retention_ms,
    )
    ctx.changelogs[store] = info
    return info
