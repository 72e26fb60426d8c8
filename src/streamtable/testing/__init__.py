"""Testing utilities: :class:`TopologyTestDriver` (prototype) and crash helpers."""

from __future__ import annotations

from typing import Any

__all__ = ["TopologyTestDriver", "TestRecord"]


def __getattr__(name: str) -> Any:
    # imported on use: the driver needs pyspark, the crash helpers do not
    if name in __all__:
        from streamtable.testing import driver

        return getattr(driver, name)
    raise AttributeError(name)
