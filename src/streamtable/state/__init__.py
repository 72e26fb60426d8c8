"""Queryable state: interactive queries over the application's named stores.

- :mod:`.replica`: a local replica of the stores, read from their changelog topics;
- :mod:`.queries`: Kafka Streams' read-only store interfaces over it.
"""

from streamtable.state.metadata import HostInfo, KeyQueryMetadata, StreamsMetadata
from streamtable.state.queries import (
    Position,
    PositionBound,
    QueryableStoreType,
    QueryableStoreTypes,
    ReadOnlyKeyValueStore,
    StoreQueryParameters,
)
from streamtable.state.window_queries import ReadOnlySessionStore, ReadOnlyWindowStore

__all__ = [
    "HostInfo",
    "KeyQueryMetadata",
    "StreamsMetadata",
    "Position",
    "PositionBound",
    "QueryableStoreType",
    "QueryableStoreTypes",
    "ReadOnlyKeyValueStore",
    "ReadOnlySessionStore",
    "ReadOnlyWindowStore",
    "StoreQueryParameters",
]
