"""Reading paged operators' state as state-store contents (the TopologyTestDriver's stores).

A paged operator keeps one value state per page (:data:`~.processor.STATE_VAR`), a pickled
``{"entries": {group key: entry}, ...}`` (:func:`~.processor.decode_page`). Spark's
``statestore`` batch data source returns one row per page: a ``key`` struct (``page`` int)
and a ``value`` struct (``page`` binary). The decoders below turn those rows into a store's
entries, each knowing the entry format of the kernels that use it:

- :class:`KeyValueEntries`: ``(value, ts)`` entries — ``AggregateProcessor`` (stream
  ``aggregate``/``reduce``), ``TableAggregateKernel`` (table aggregations), and
  ``TableSourceKernel`` (a materialized table, whose values are still encoded bytes);
- :class:`WindowEntries`: ``{(start, end): [aggregate, ts, emitted]}`` entries — the window
  kernels (time, sliding and session windows).

Decoders are called in the test's process, never on the hot path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from streamtable.compiler.codecs import Codec
from streamtable.compiler.paged.processor import decode_page


def page_entries(rows: list[tuple[Any, Any]]) -> Iterator[tuple[bytes, Any]]:
    """Every ``(group key, entry)`` of the pages in ``rows`` (``statestore`` rows' ``(key,
    value)`` structs; ``value.page`` is the pickled page).
    """
    for _key, value in rows:
        blob = None if value is None else value["page"]
        for gk, entry in decode_page(blob)["entries"].items():
            if gk is not None:
                yield gk, entry


@dataclass(frozen=True)
class KeyValueEntries:
    """Decoder of key-value pages whose entries are ``(value, ts)``.

    Parameters
    ----------
    value_codec : Codec, optional
        The entries hold encoded values (a materialized table): decode them with it. Without
        it the entries hold the Python objects (aggregates).

    Examples
    --------
    >>> import pickle
    >>> page = {"entries": {b"b": (2, 10), b"a": (1, 5)}, "meta": {}}
    >>> KeyValueEntries()([({"page": 3}, {"page": pickle.dumps(page)})])
    [(b'b', 2), (b'a', 1)]
    """

    value_codec: Codec | None = None

    def __call__(self, rows: list[tuple[Any, Any]]) -> list[tuple[bytes, Any]]:
        """``(key bytes, value)`` of every key (unordered)."""
        entries = [(gk, entry[0]) for gk, entry in page_entries(rows)]
        if self.value_codec is None or not entries:
            return entries
        values = self.value_codec.decode_many([v for _, v in entries])
        return [(gk, v) for (gk, _), v in zip(entries, values, strict=True)]


@dataclass(frozen=True)
class WindowEntries:
    """Decoder of window kernels' pages: ``{(start, end): [aggregate, ts, emitted]}`` entries
    (a suppressed window read by a table filter has a fourth item, see
    ``WindowAggregateSpec.with_old``).

    Examples
    --------
    >>> import pickle
    >>> page = {"entries": {b"k": {(0, 10): [3, 7, False], (10, 20): [1, 12, False]}}}
    >>> WindowEntries()([({"page": 0}, {"page": pickle.dumps(page)})])
    [(b'k', 0, 10, 3), (b'k', 10, 20, 1)]
    """

    def __call__(self, rows: list[tuple[Any, Any]]) -> list[tuple[bytes, int, int, Any]]:
        """``(key bytes, window start, window end, aggregate)`` of every window held."""
        return [
            (gk, start, end, window[0])
            for gk, windows in page_entries(rows)
            for (start, end), window in windows.items()
        ]


@dataclass(frozen=True)
class JoinTableEntries:
    """Decoder of the table side of a stream-table join's pages: the table's contents.

    Parameters
    ----------
    value_codec : Codec
        Decodes the table's stored values.
    versioned : bool
        Entries are versions ``[(ts, value bytes or None), ...]`` in timestamp order (a
        stream-table join, ``StreamTableJoinKernel`` with ``as_of``): the latest version is
        the table's value. Otherwise an entry is the latest value's bytes (GlobalKTable).

    Examples
    --------
    >>> import pickle
    >>> from streamtable.compiler.codecs import PickleCodec
    >>> page = {"entries": {b"a": [(1, pickle.dumps("x")), (5, pickle.dumps("y"))],
    ...                     b"b": [(2, pickle.dumps("z")), (3, None)]}}
    >>> JoinTableEntries(PickleCodec())([({"page": 0}, {"page": pickle.dumps(page)})])
    [(b'a', 'y')]
    """

    value_codec: Codec
    versioned: bool = True

    def __call__(self, rows: list[tuple[Any, Any]]) -> list[tuple[bytes, Any]]:
        """``(key bytes, value)`` of every key whose latest value is not a tombstone."""
        latest = [
            (gk, entry[-1][1] if self.versioned else entry) for gk, entry in page_entries(rows)
        ]
        latest = [(gk, v) for gk, v in latest if v is not None]
        if not latest:
            return []
        values = self.value_codec.decode_many([v for _, v in latest])
        return [(gk, v) for (gk, _), v in zip(latest, values, strict=True)]


@dataclass(frozen=True)
class ProcessorStoreEntries:
    """Decoder of a Processor API store: the ``pages`` map state of :mod:`.processor_api`
    tasks, rows ``(task, page, blob)`` whose blob is ``{store name: {key bytes: value bytes}}``.

    Examples
    --------
    >>> import pickle
    >>> from streamtable import Serdes
    >>> blob = pickle.dumps({"seen": {b"a": Serdes.long().serialize(3)}})
    >>> ProcessorStoreEntries("seen", Serdes.long())([({"task": 0}, {"page": 5}, {"blob": blob})])
    [(b'a', 3)]
    """

    store: str
    value_serde: Any

    def __call__(self, rows: list[tuple[Any, Any]]) -> list[tuple[bytes, Any]]:
        """``(key bytes, value)`` of every key of the store (unordered)."""
        return [(k, self.value_serde.deserialize(v)) for k, v in self.raw(rows)]

    def raw(self, rows: list[tuple[Any, ...]]) -> list[tuple[bytes, bytes]]:
        """``(key bytes, value bytes)`` of every entry of the store."""
        import pickle

        out = []
        for row in rows:
            value = row[-1]
            if value is None or value["blob"] is None:
                continue
            out.extend(pickle.loads(value["blob"]).get(self.store, {}).items())
        return out


@dataclass(frozen=True)
class ProcessorWindowEntries:
    """Decoder of a Processor API window store (like :class:`ProcessorStoreEntries`, keys in
    Kafka Streams' window key binary: key + 8-byte start + 4-byte sequence number).

    Examples
    --------
    >>> import pickle
    >>> from streamtable import Serdes
    >>> key = b"a" + (5).to_bytes(8, "big") + bytes(4)
    >>> blob = pickle.dumps({"w": {key: Serdes.long().serialize(3), b"": bytes(8)}})
    >>> ProcessorWindowEntries("w", Serdes.long(), 10)([({"task": 0}, {"page": 1}, {"blob": blob})])
    [(b'a', 5, 15, 3)]
    """

    store: str
    value_serde: Any
    window_size_ms: int

    def __call__(self, rows: list[tuple[Any, ...]]) -> list[tuple[bytes, int, int, Any]]:
        """``(key bytes, start, end, value)`` of every window (unordered)."""
        out = []
        for k, v in ProcessorStoreEntries(self.store, self.value_serde).raw(rows):
            if not k:  # the observed stream time
                continue
            start = int.from_bytes(k[-12:-4], "big", signed=True)
            out.append(
                (k[:-12], start, start + self.window_size_ms, self.value_serde.deserialize(v))
            )
        return out
