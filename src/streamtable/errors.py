"""Exception hierarchy: one root, subclasses that say what to do.

Every error raised by streamtable derives from :class:`StreamtableError`; where a
built-in exception type fits, the subclass inherits it too (``ConfigError`` is a
``ValueError``), so callers may catch either.
"""

from __future__ import annotations


class StreamtableError(Exception):
    """Root of every error raised by streamtable."""


class ConfigError(StreamtableError, ValueError):
    """A configuration key is unknown, ill-typed or out of range; fix the named key."""


class TopologyError(StreamtableError, ValueError):
    """The topology is invalid or cannot be compiled; the message names the operator."""


class SerializationError(StreamtableError, ValueError):
    """Bytes could not be (de)serialized by a Serde (Kafka's ``SerializationException``)."""


class DeserializationError(SerializationError):
    """A record from a topic could not be deserialized; names topic, partition and offset."""


class MissingSourceTopicError(StreamtableError):
    """A source topic does not exist (Kafka Streams' ``MissingSourceTopicException``).

    Create the topic (``streamtable`` never auto-creates user topics) and start again.
    """


class EnvironmentSetupError(StreamtableError, RuntimeError):
    """A required tool or artifact (Java, Maven, a jar) is missing; the message says the fix."""


class BrokerError(StreamtableError, RuntimeError):
    """The embedded Kafka broker failed to start or stop; the message carries its log tail."""


class BrokerUnreachableError(StreamtableError, ConnectionError):
    """No Kafka broker answered at ``bootstrap.servers`` within the configured timeout."""


class StreamsError(StreamtableError, RuntimeError):
    """The running application failed; ``__cause__`` holds the underlying error."""


class IllegalStateError(StreamtableError, RuntimeError):
    """An operation is not legal in the application's current state (Kafka Streams' states)."""


__all__ = [
    "StreamtableError",
    "ConfigError",
    "TopologyError",
    "SerializationError",
    "DeserializationError",
    "MissingSourceTopicError",
    "EnvironmentSetupError",
    "BrokerError",
    "BrokerUnreachableError",
    "StreamsError",
    "IllegalStateError",
]


class StreamsTimeoutError(StreamtableError, TimeoutError):
    """An operation did not finish within its timeout (e.g. ``await_caught_up``)."""


__all__ += ["StreamsTimeoutError"]


class StateDirLockedError(IllegalStateError):
    """The application's state directory is locked by a running instance.

    Kafka Streams' "state directory locked": stop that instance first, or use another
    ``state.dir``.
    """


__all__ += ["StateDirLockedError"]


class InvalidStateStoreException(StreamtableError, RuntimeError):
    """A store cannot be queried: the application is not running, or the store does not exist,
    is not queryable or is of another type (Kafka Streams' ``InvalidStateStoreException``).
    """


__all__ += ["InvalidStateStoreException"]
