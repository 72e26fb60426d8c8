"""A real Kafka broker for tests and development.

:class:`EmbeddedKafka` runs a KRaft cluster (one JVM per node) on free loopback ports;
:mod:`streamtable.broker.daemon` keeps one running in the background for the CLI
(``streamtable broker start|stop|status``).
"""

from streamtable.broker.embedded import EmbeddedKafka

__all__ = ["EmbeddedKafka"]
