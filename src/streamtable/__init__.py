"""streamtable: the Kafka Streams programming model in Python, on Spark Structured Streaming.

Build a topology with :class:`StreamsBuilder`, run it with :class:`KafkaStreams`.
"""

from streamtable.dsl.builder import StreamsBuilder
from streamtable.dsl.grouped import KGroupedStream, TimeWindowedKStream
from streamtable.dsl.grouped_table import KGroupedTable
from streamtable.dsl.kstream import BranchedKStream, KStream
from streamtable.dsl.ktable import GlobalKTable, KTable
from streamtable.dsl.materialized import Materialized
from streamtable.dsl.reducers import Reducer, Reducers
from streamtable.dsl.suppressed import BufferConfig, Suppressed
from streamtable.dsl.timestamps import (
    FailOnInvalidTimestamp,
    FieldTimestamp,
    LogAndSkipOnInvalidTimestamp,
    RecordTimestamp,
    TimestampExtractor,
    WallclockTimestamp,
)
from streamtable.dsl.user_windows import TimeWindow, Windows
from streamtable.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows
from streamtable.errors import StreamtableError
from streamtable.processor import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
    Stores,
)
from streamtable.serde import Serde, Serdes, Windowed
from streamtable.state import (
    Position,
    PositionBound,
    QueryableStoreTypes,
    ReadOnlyKeyValueStore,
    ReadOnlySessionStore,
    ReadOnlyWindowStore,
    StoreQueryParameters,
)
from streamtable.topology.topology import Topology

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # KafkaStreams pulls in the runtime (and PySpark); import it only when asked for,
    # so that building and describing a topology needs no JVM.
    if name == "KafkaStreams":
        from streamtable.runtime.kafka_streams import KafkaStreams

        return KafkaStreams
    raise AttributeError(f"module 'streamtable' has no attribute {name!r}")


__all__ = [
    "StreamsBuilder",
    "KStream",
    "KTable",
    "GlobalKTable",
    "KGroupedTable",
    "Materialized",
    "Reducers",
    "Reducer",
    "JoinWindows",
    "KGroupedStream",
    "TimeWindowedKStream",
    "BranchedKStream",
    "TimeWindows",
    "SlidingWindows",
    "SessionWindows",
    "Windows",
    "TimeWindow",
    "Suppressed",
    "BufferConfig",
    "TimestampExtractor",
    "RecordTimestamp",
    "WallclockTimestamp",
    "FieldTimestamp",
    "LogAndSkipOnInvalidTimestamp",
    "FailOnInvalidTimestamp",
    "Topology",
    "KafkaStreams",
    "Serde",
    "Serdes",
    "Windowed",
    "StreamtableError",
    "StoreQueryParameters",
    "QueryableStoreTypes",
    "ReadOnlyKeyValueStore",
    "ReadOnlyWindowStore",
    "ReadOnlySessionStore",
    "Position",
    "PositionBound",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordMetadata",
    "Stores",
    "__version__",
]
