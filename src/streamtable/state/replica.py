"""A local replica of queryable stores, fed by their changelog topics.

Spark keeps an operator's state inside its micro-batch tasks, where nothing outside the batch
can read it in time (Spark's ``statestore`` data source takes seconds per lookup). Interactive
queries therefore read a replica that a consumer thread keeps from each store's changelog
(:mod:`streamtable.compiler.changelog`), like a Kafka Streams standby replica:

- records are read ``read_committed`` from the beginning of every changelog partition, so under
  ``exactly_once_v2`` the replica holds committed micro-batches only, each whole;
- each store is a sorted map of serialized key -> serialized value (Kafka Streams' stores order
  keys by their bytes too); a ``None`` value (tombstone) deletes the key;
- a store is **restoring** until the replica has read each of its changelog partitions up to
  the end it had when the replica started (after a restart, the whole store again): reads
  raise :class:`~streamtable.errors.InvalidStateStoreException` meanwhile, as Kafka Streams'
  stores of a task that is still restoring do, rather than answer from part of the store;
- the **position** is what Kafka Streams' IQv2 calls ``Position``: per source topic partition,
  the offset up to which the replica reflects the input. The runtime reports each committed
  micro-batch with its source end offsets (:meth:`StoreReplica.batch_committed`); the replica
  reads the changelog's end offsets at that moment, and once it has consumed up to them, it
  reflects that batch, and the batch's last source offsets join its position.

Memory: every key and value of the replicated stores, as bytes, plus a sorted index.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sortedcontainers import SortedDict

from streamtable.compiler.changelog import ChangelogInfo
from streamtable.errors import InvalidStateStoreException, StreamsError

__all__ = ["StoreReplica"]

log = logging.getLogger("streamtable")

T = TypeVar("T")

#: (topic, partition) -> offset
Offsets = dict[tuple[str, int], int]


@dataclass
class _Pending:
    """A committed micro-batch the replica has not reached yet."""

    query: str
    sources: Offsets
    #: changelog (topic, partition) -> end offset to reach; None until read
    targets: dict[tuple[str, int], int] | None = None


@dataclass
class _State:
    stores: dict[str, SortedDict] = field(default_factory=dict)
    #: changelog (topic, partition) -> next offset to read (consumed so far)
    consumed: dict[tuple[str, int], int] = field(default_factory=dict)
    #: query -> its position (the queries writing changelogs advance separately)
    positions: dict[str, Offsets] = field(default_factory=dict)
    pending: list[_Pending] = field(default_factory=list)
    #: store -> its changelog (topic, partition) -> end offset at start, until read up to it;
    #: None until those ends are known
    restoring: dict[str, dict[tuple[str, int], int] | None] = field(default_factory=dict)
    #: window store -> changelog partition -> the largest window start written (session
    #: store: the largest session end): Kafka Streams' observed stream time of a segmented
    #: store, one per task, which its retention is measured against (deletes count too, as in
    #: ``AbstractRocksDBSegmentedBytesStore``)
    observed: dict[str, dict[int, int]] = field(default_factory=dict)


class StoreReplica:
    """Replicas of the stores in ``changelogs``, kept by a background consumer thread.

    Parameters
    ----------
    bootstrap_servers : str
        The Kafka cluster.
    changelogs : Mapping[str, ChangelogInfo]
        The stores to replicate, by name.
    consumer_config : Mapping[str, Any], optional
        Extra librdkafka settings (``consumer.*`` keys of the application's config).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        changelogs: Mapping[str, ChangelogInfo],
        consumer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.changelogs = dict(changelogs)
        self._config = {
            # a read_committed fetch parked at the broker is not woken by newly committed
            # records: it returns after fetch.wait.max.ms (librdkafka: 500), which was the
            # replica's lag behind each batch; 50 ms keeps it near one fetch round trip
            "fetch.wait.max.ms": 50,
            **dict(consumer_config or {}),
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"streamtable-replica-{uuid.uuid4().hex}",  # never committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
        self._topic_store = {c.topic: c.store for c in self.changelogs.values()}
        self._state = _State(
            stores={name: SortedDict() for name in self.changelogs},
            restoring=dict.fromkeys(self.changelogs),
        )
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        #: why reads are refused (the application left RUNNING), see :meth:`refuse`
        self._refused: str | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the consumer thread (reading every changelog from its beginning)."""
        self._thread = threading.Thread(target=self._run, name="streamtable-replica", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the consumer thread; the replica keeps what it has read."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._cond:
            self._cond.notify_all()

    def refuse(self, reason: str) -> None:
        """Refuse every later read, saying ``reason``: the application is no longer
        RUNNING, and store views handed out before raise
        :class:`~streamtable.errors.InvalidStateStoreException` as Kafka Streams' do
        (``WrappingStoreProvider``) rather than answer from a replica that no longer moves.
        """
        with self._cond:
            self._refused = reason
            self._cond.notify_all()

    # -- fed by the runtime -------------------------------------------------------------

    def batch_committed(self, query: str, sources: Offsets) -> None:
        """Query ``query`` committed a micro-batch that read its sources up to ``sources``
        (Spark's end offsets: the next offset of each partition to read).
        """
        if not any(c.query == query for c in self.changelogs.values()):
            return
        # Spark reports the next offset to read; a Position holds the last one processed
        last = {tp: off - 1 for tp, off in sources.items() if off > 0}
        with self._cond:
            self._state.pending.append(_Pending(query, last))

    # -- reading ------------------------------------------------------------------------

    def read(self, store: str, fn: Callable[[SortedDict], T]) -> tuple[T, Offsets]:
        """``fn(the store's map)`` under the replica's lock, and the store's position then.

        ``fn`` must copy what it returns: the map changes as soon as the lock is released.

        Raises
        ------
        InvalidStateStoreException
            While the store is restoring (see the module doc), or once the application has
            left RUNNING (:meth:`refuse`).
        StreamsError
            If the replica stopped reading.
        """
        with self._cond:
            self._raise_if_refused(store)
            self._raise_if_failed()
            if store in self._state.restoring:
                raise InvalidStateStoreException(self._restoring_message(store))
            return fn(self._state.stores[store]), self.position(store)

    def observed_time(self, store: str) -> int | None:
        """A window store's largest window start (a session store's largest session end)
        written so far to any of its changelog partitions, the smallest over the partitions:
        Kafka Streams has one per task, and the replica does not know which task a key's
        windows belong to, so a query judges retention by the task furthest behind and hides
        nothing Kafka Streams returns. ``None``: nothing yet, or a key-value store.
        """
        with self._cond:
            times = self._state.observed.get(store)
            return min(times.values()) if times else None

    def position(self, store: str) -> Offsets:
        """The store's position (empty while it is restoring).

        Raises
        ------
        StreamsError
            If the replica stopped reading.
        """
        with self._cond:
            self._raise_if_refused(store)
            self._raise_if_failed()
            return dict(self._state.positions.get(self.changelogs[store].query, {}))

    def _restoring_message(self, store: str) -> str:
        ends = self._state.restoring[store]
        if ends is None:
            read = "its changelog's end offsets are not known yet"
        else:
            done = sum(min(self._state.consumed.get(tp, 0), end) for tp, end in ends.items())
            read = f"{done} of {sum(ends.values())} changelog offsets read"
        return (
            f"Store {store!r} is restoring from its changelog topic "
            f"{self.changelogs[store].topic!r} ({read}). Retry shortly, or wait for a "
            "position with wait_for() (Kafka Streams raises InvalidStateStoreException for a "
            "store that is still restoring too)."
        )

    def wait_for(self, store: str, bound: Offsets, timeout_s: float) -> Offsets:
        """Block until the position of ``store`` reaches ``bound`` on each of its partitions
        and the store is restored (see the module doc).

        Returns
        -------
        dict
            The position reached.

        Raises
        ------
        StreamsError
            After ``timeout_s`` seconds, naming the partitions still behind.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                self._raise_if_refused(store)
                self._raise_if_failed()
                pos = self._state.positions.get(self.changelogs[store].query, {})
                behind = {tp: o for tp, o in bound.items() if pos.get(tp, -1) < o}
                if not behind and store not in self._state.restoring:
                    return dict(pos)
                left = deadline - time.monotonic()
                if (left <= 0 or self._stop.is_set()) and not behind:
                    raise StreamsError(
                        f"{self._restoring_message(store)} Waited {timeout_s:g} s for it."
                    )
                if left <= 0 or self._stop.is_set():
                    raise StreamsError(
                        f"Store {store!r} did not reach position {_fmt(bound)} within "
                        f"{timeout_s:g} s; behind on {_fmt(behind)} (at "
                        f"{_fmt({tp: pos.get(tp) for tp in behind})}). The application may "
                        "not have processed those offsets yet: wait longer or check that it "
                        "is RUNNING."
                    )
                self._cond.wait(min(left, 0.5))

    def _raise_if_refused(self, store: str) -> None:
        if self._refused is not None:
            raise InvalidStateStoreException(
                f"Cannot query store {store!r}: {self._refused}. Kafka Streams' stores stop "
                "answering too; query the stores of a running application."
            )

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise StreamsError(
                f"The stores' replica stopped reading the changelog topics: {self._error}"
            ) from self._error

    # -- the consumer thread ------------------------------------------------------------

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = None
        try:
            consumer = Consumer(self._config)  # its refusal of a setting is surfaced too
            assignment = [
                TopicPartition(c.topic, p, OFFSET_BEGINNING)
                for c in self.changelogs.values()
                for p in range(c.partitions)
            ]
            consumer.assign(assignment)
            while not self._stop.is_set():
                msgs = consumer.consume(num_messages=5000, timeout=0.1)
                self._apply(msgs)
                if self._state.restoring:
                    self._restore(consumer, assignment)
                self._advance(consumer, assignment)
        except BaseException as e:  # surfaced to every reader
            log.error("streamtable: the stores' replica failed: %s", e)
            with self._cond:
                self._error = e
                self._cond.notify_all()
        finally:
            if consumer is not None:
                consumer.close()

    def _apply(self, msgs: list[Any]) -> None:
        if not msgs:
            return
        with self._cond:
            st = self._state
            for m in msgs:
                if m.error() is not None:
                    if m.error().fatal():
                        raise StreamsError(str(m.error()))
                    continue
                name = self._topic_store[m.topic()]
                store = st.stores[name]
                key, value = m.key(), m.value()
                at = _segment_time(self.changelogs[name].kind, key)
                if at is not None:
                    times = st.observed.setdefault(name, {})
                    times[m.partition()] = max(times.get(m.partition(), at), at)
                if value is None:
                    store.pop(key, None)
                else:
                    store[key] = value

    def _restore(self, consumer: Any, assignment: list[Any]) -> None:
        """Read the changelogs' end offsets once; end the stores' restoration as the replica
        reaches them.
        """
        from confluent_kafka import KafkaException

        st = self._state
        if any(ends is None for ends in st.restoring.values()):
            try:
                ends = {(tp.topic, tp.partition): _readable_end(consumer, tp) for tp in assignment}
            except KafkaException as e:
                if e.args[0].fatal():
                    raise
                log.info("streamtable: the stores' replica retries end offsets: %s", e)
                return
            with self._cond:
                for store in st.restoring:
                    topic = self.changelogs[store].topic
                    st.restoring[store] = {tp: o for tp, o in ends.items() if tp[0] == topic}
        positions = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.position(assignment)
            if tp.offset >= 0
        }
        with self._cond:
            for tp, off in positions.items():
                st.consumed[tp] = max(st.consumed.get(tp, 0), off)
            if self._end_restores():
                self._cond.notify_all()

    def _end_restores(self) -> bool:
        """End the restoration of the stores read up to their ends (under the lock); whether
        one ended.
        """
        st = self._state
        restored = [
            store
            for store, ends in st.restoring.items()
            if ends is not None and all(st.consumed.get(tp, 0) >= end for tp, end in ends.items())
        ]
        for store in restored:
            del st.restoring[store]
        return bool(restored)

    def _advance(self, consumer: Any, assignment: list[Any]) -> None:
        """Read the end offsets of newly committed batches; move the position past the
        batches the replica has caught up with.
        """
        from confluent_kafka import KafkaException

        with self._cond:
            pending = list(self._state.pending)
        if not pending:
            return
        for p in pending:
            if p.targets is None:
                try:
                    p.targets = self._ends(consumer, assignment, p.query)
                except KafkaException as e:
                    if e.args[0].fatal():
                        raise
                    # e.g. a partition leader's broker died: its handle is destroyed while
                    # the client moves to the new leader; read the end offsets next round
                    log.info("streamtable: the stores' replica retries end offsets: %s", e)
                    return
        positions = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.position(assignment)
            if tp.offset >= 0
        }
        with self._cond:
            st = self._state
            for tp, off in positions.items():
                st.consumed[tp] = max(st.consumed.get(tp, 0), off)
            # a store whose position moves has ended its restoration, here, before a reader can
            # see it move
            if self._end_restores():
                self._cond.notify_all()
            if st.restoring:
                return  # positions move once every store is restored (reads raise till then)
            done = 0
            for p in st.pending:
                if p.targets is None or any(
                    st.consumed.get(tp, 0) < end for tp, end in p.targets.items()
                ):
                    break
                position = st.positions.setdefault(p.query, {})
                for tp, off in p.sources.items():
                    position[tp] = max(position.get(tp, -1), off)
                done += 1
            if done:
                del st.pending[:done]
                self._cond.notify_all()

    def _ends(self, consumer: Any, assignment: list[Any], query: str) -> dict[tuple[str, int], int]:
        """The current end offsets (last stable offsets, read_committed) of ``query``'s
        changelog partitions; partitions already read to their end count as reached.
        """
        topics = {c.topic for c in self.changelogs.values() if c.query == query}
        ends = {}
        for tp in assignment:
            if tp.topic in topics:
                _low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                ends[(tp.topic, tp.partition)] = high
        return ends


def _readable_end(consumer: Any, tp: Any) -> int:
    """The end offset of partition ``tp`` to read up to; 0 when it holds nothing to read (its
    start is its end: a consumer's position never moves there).
    """
    low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    return 0 if low >= high else high


def _fmt(offsets: Mapping[tuple[str, int], Any]) -> str:
    return "{" + ", ".join(f"{t}-{p}: {o}" for (t, p), o in sorted(offsets.items())) + "}"


def _segment_time(kind: str, key: bytes | None) -> int | None:
    """The time a window store key (key + start + seqnum) or session store key (key + end +
    start) is filed under in Kafka Streams' segmented stores; ``None`` for other stores.

    >>> _segment_time("window", b"k" + (7).to_bytes(8, "big") + bytes(4))
    7
    >>> _segment_time("session", b"k" + (9).to_bytes(8, "big") + (3).to_bytes(8, "big"))
    9
    """
    if key is None or kind == "key_value":
        return None
    at = len(key) - (12 if kind == "window" else 16)
    if at < 0:
        return None
    return int.from_bytes(key[at : at + 8], "big", signed=True)
