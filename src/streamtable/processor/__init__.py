"""The Processor API: user processors with state stores and punctuation (Kafka Streams'
``org.apache.kafka.streams.processor.api``). See :mod:`.api` and :mod:`.stores`.
"""

from streamtable.processor.api import (
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Punctuator,
    Record,
    RecordMetadata,
)
from streamtable.processor.stores import (
    KeyValueBytesStoreSupplier,
    KeyValueStore,
    KeyValueStoreBuilder,
    Stores,
    WindowBytesStoreSupplier,
    WindowStore,
    WindowStoreBuilder,
)

__all__ = [
    "Cancellable",
    "KeyValueBytesStoreSupplier",
    "KeyValueStore",
    "KeyValueStoreBuilder",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Punctuator",
    "Record",
    "RecordMetadata",
    "Stores",
    "WindowBytesStoreSupplier",
    "WindowStore",
    "WindowStoreBuilder",
]
