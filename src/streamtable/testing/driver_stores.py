"""Read-only views of a :class:`~streamtable.testing.TopologyTestDriver`'s state stores."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamtable.errors import TopologyError

if TYPE_CHECKING:
    from streamtable.testing.driver import TopologyTestDriver

__all__ = ["KeyValueStoreView", "open_store"]


def open_store(driver: TopologyTestDriver, name: str, kind: str) -> Any:
    """The view of store ``name`` (``kind``: ``"key_value"``, ``"window"`` or ``"session"``).

    Raises
    ------
    TopologyError
        If the topology has no store ``name`` (the message lists its stores), or the store
        is not of ``kind``, or cannot be read by this version of the driver.
    """
    loc = driver._stores.get(name)
    stores = sorted(driver.topology.store_names)
    if loc is None:
        if name in stores:
            raise TopologyError(
                f"Store {name!r} cannot be read by the TopologyTestDriver yet (only count "
                f"stores can); the topology's stores are {stores}."
            )
        raise TopologyError(f"The topology has no state store {name!r}; its stores are {stores}.")
    if kind != "key_value":
        raise TopologyError(f"Store {name!r} is not a {kind} store.")
    return KeyValueStoreView(driver, name, loc)


class KeyValueStoreView:
    """Read-only key-value store contents (Kafka's ``ReadOnlyKeyValueStore``), read on demand."""

    def __init__(self, driver: TopologyTestDriver, name: str, loc: Any) -> None:
        self._driver = driver
        self.name = name
        self._loc = loc

    def _read(self) -> dict[Any, Any]:
        chk = str(Path(self._driver.config.checkpoint_dir) / self._loc.query)
        if not (Path(chk) / "commits").exists() or not any((Path(chk) / "commits").iterdir()):
            return {}  # nothing processed yet
        rows = self._driver._spark.read.format("statestore").load(chk).collect()
        keys = self._loc.key_codec.decode_many([r["key"]["key"] for r in rows])
        return {k: r["value"]["count"] for k, r in zip(keys, rows, strict=True)}

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None."""
        return self._read().get(key)

    def all(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)``, sorted by key."""
        return sorted(self._read().items(), key=lambda kv: repr(kv[0]))

    def approximate_num_entries(self) -> int:
        """The number of keys."""
        return len(self._read())
