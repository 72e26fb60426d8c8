"""The ``transformWithState`` processor behind Python ``aggregate``/``reduce`` (unwindowed;
windowed aggregations run window kernels, see ``paged.window_kernels``).

Follows Kafka Streams' ``KStreamAggregate``:
- records of one key are folded in (timestamp, topic, partition, offset, sequence) order, so the
  result does not depend on the order Spark's shuffle delivers them in;
- the first record of a key starts from ``initializer()``; an aggregator (or reducer) that
  returns ``None`` deletes the key's aggregate, a tombstone is emitted (nothing for a key that
  had no aggregate before the micro-batch either, as Kafka Streams' caching store skips such a
  flush), and the key's next record starts from ``initializer()`` again;
- the output timestamp is the largest timestamp that contributed;
- one update per key is emitted per micro-batch, as Kafka Streams' record cache coalesces
  updates; with ``AggregateSpec.with_old`` it carries the key's aggregate before the
  micro-batch too (``old``, ``None`` for a new key), as the cache forwards the store's value
  with each flushed update (for a table filter after the aggregation, see
  ``streamtable.topology.old_values``);
- the updates' values are encoded with ``AggregateSpec.out_codec``: pickled for a Python
  consumer, or in the serde a sink right after the aggregation writes (then neither the sink
  nor a changelog in the same serde needs a Python stage of its own).

State is paged (see ``pack_stage``): the group is a page of keys and its ``ValueState`` holds
``{"entries": {group key bytes: (aggregate, ts)}}``, pickled. Per micro-batch a page costs one
state read and one write however many of its keys changed.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import TimerValues

from streamtable.compiler.codecs import Codec, PickleCodec
from streamtable.compiler.flat_row import FlatRow, ddl_columns
from streamtable.compiler.paged.user_code import user_code_error
from streamtable.errors import SerializationError
from streamtable.topology.nodes import Aggregation

#: Output schema of the processor: one row per updated key.
OUTPUT_DDL = "key binary, value binary, ts bigint"
#: :data:`OUTPUT_DDL` with the key's aggregate before the micro-batch (``with_old``).
OUTPUT_OLD_DDL = OUTPUT_DDL + ", old binary"
_STATE_DDL = "page binary"


class _UpdateRow(FlatRow):
    __fields__ = ddl_columns(OUTPUT_DDL)


class _UpdateOldRow(FlatRow):
    __fields__ = ddl_columns(OUTPUT_OLD_DDL)


@dataclass(frozen=True)
class AggregateSpec:
    """What the processor needs: the fold, how to decode keys and values, how to encode
    the aggregates it emits (``out_codec``), and whether it emits each key's aggregate before
    the micro-batch too (``with_old``: :data:`OUTPUT_OLD_DDL`).
    """

    node_name: str
    aggregation: Aggregation
    key_codec: Codec
    value_codec: Codec
    out_codec: Codec = PickleCodec()
    with_old: bool = False


class AggregateProcessor(StatefulProcessor):
    """Folds the records of each key of a page into its aggregate; see the module doc."""

    def __init__(self, spec: AggregateSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: D102
        self.handle = handle
        self.state = handle.getValueState("page", _STATE_DDL)

    def handleInputRows(  # noqa: D102, N802
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        groups: dict[bytes, list[tuple[Any, ...]]] = {}
        for row in rows:
            for gk, recs in pickle.loads(row.value).items():
                groups.setdefault(gk, []).extend(recs)
        stored = self.state.get()  # one round trip to the state store; None when absent
        page = pickle.loads(stored[0]) if stored is not None else {"entries": {}}
        entries = page["entries"]
        updates: list[tuple[bytes, Any, int]] = []
        olds: list[Any] = []
        for gk, records in groups.items():
            records.sort(key=lambda r: r[1:])
            entry = entries.get(gk)
            old = None
            if self.spec.with_old and entry is not None:  # before the fold (may change it)
                old = self._encode([entry[0]])[0]
            agg, ts = self._fold(gk, records, entry)
            if agg is None:
                entries.pop(gk, None)  # deleted: a tombstone goes out
                if entry is None:  # none before either: the record cache forwards nothing
                    continue
            else:
                entries[gk] = (agg, ts)
            updates.append((gk, agg, ts))
            olds.append(old)
        self.state.update((pickle.dumps(page, protocol=5),))
        values = self._encode([agg for _, agg, _ in updates])
        if self.spec.with_old:
            return iter(
                [
                    _UpdateOldRow(gk, v, ts, old)
                    for (gk, _, ts), v, old in zip(updates, values, olds, strict=True)
                ]
            )
        return iter([_UpdateRow(gk, v, ts) for (gk, _, ts), v in zip(updates, values, strict=True)])

    def _encode(self, aggregates: list[Any]) -> list[Any]:
        """The emitted values: ``aggregates`` in ``out_codec``.

        Raises
        ------
        SerializationError
            If the serde of the sink the updates go to cannot serialize an aggregate (Kafka
            Streams fails likewise when its sink's serializer rejects the record).
        """
        try:
            return self.spec.out_codec.encode_many(aggregates)
        except SerializationError as e:
            raise SerializationError(
                f"Failed to serialize an aggregate of {self.spec.node_name!r} for the sink it "
                f"is written to: {e}. Give that sink a value serde that fits the aggregate's "
                "type (KStream.to(value_serde=...), to_files(value_serde=...), or the "
                "grouping's value_serde= for a repartition)."
            ) from e

    def _fold(
        self, group_key: bytes, records: list[tuple[Any, ...]], stored: tuple[Any, int] | None
    ) -> tuple[Any, int]:
        """The key's aggregate and timestamp after ``records``: ``None`` when the aggregator
        (or reducer) returned ``None`` last. As in ``KStreamAggregate``/``KStreamReduce``, a
        ``None`` aggregate deletes the key's entry, and the next record starts afresh from
        ``initializer()`` (a reduce: from its value) with its own timestamp. A deletion's
        timestamp is the deleting record's, as Kafka Streams' record cache forwards it.
        """
        spec = self.spec
        k = spec.key_codec.decode_many([group_key])[0]
        values = spec.value_codec.decode_many([r[0] for r in records])
        agg, ts = (None, None) if stored is None else stored
        present = stored is not None
        fold = spec.aggregation.aggregator
        for rec, v in zip(records, values, strict=True):
            if not present:
                agg, ts = spec.aggregation.initializer(), None
            try:
                agg = fold(k, v, agg)
            except Exception as e:
                raise user_code_error(e, spec.node_name, "aggregator", *rec[2:5]) from e
            # a deletion's tombstone carries the deleting record's timestamp (the record
            # cache's flush: TimestampedCacheFlushListener)
            ts = rec[1] if ts is None or agg is None else max(ts, rec[1])
            present = agg is not None
        return agg, ts

    def close(self) -> None:  # noqa: D102
        pass
