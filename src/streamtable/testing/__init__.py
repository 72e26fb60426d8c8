"""Testing utilities: :class:`TopologyTestDriver`, assertion helpers and a pytest plugin.

``TopologyTestDriver`` runs a topology's compiled Spark plan on in-memory topics, without a
broker (Kafka Streams' ``TopologyTestDriver``). :func:`assert_stream_equal` and
:func:`assert_table_equal` compare outputs with readable diffs. The pytest plugin
(:mod:`streamtable.testing.pytest_plugin`) provides the ``spark_session``, ``embedded_kafka``
and ``topology_driver`` fixtures. The crash harness is in :mod:`streamtable.testing.crash`.
"""

from __future__ import annotations

from typing import Any

from streamtable.testing.assertions import assert_stream_equal, assert_table_equal

__all__ = [
    "TopologyTestDriver",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "assert_stream_equal",
    "assert_table_equal",
]

_DRIVER_NAMES = {"TopologyTestDriver", "TestInputTopic", "TestOutputTopic", "TestRecord"}


def __getattr__(name: str) -> Any:
    # imported on use: the driver needs pyspark, the assertions and crash helpers do not
    if name in _DRIVER_NAMES:
        from streamtable.testing import driver

        return getattr(driver, name)
    raise AttributeError(name)
