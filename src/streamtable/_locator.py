"""``module:object`` locators for the CLI (``streamtable run app.py:topology``)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from streamtable.errors import StreamtableError


class LocatorError(StreamtableError, ValueError):
    """A ``module:object`` locator does not name a loadable object."""


def load_object(locator: str) -> Any:
    """Import ``module:attr`` (or ``path/to/file.py:attr``) and return the attribute.

    Raises
    ------
    LocatorError
        If the form is wrong, the module cannot be imported or the attribute is missing.
    """
    module_part, sep, attr = locator.rpartition(":")
    if not sep or not module_part or not attr:
        raise LocatorError(
            f"{locator!r} is not a locator: write MODULE:OBJECT, e.g. myapp.topology:topology "
            "or path/to/app.py:build_topology."
        )
    if module_part.endswith(".py"):
        path = Path(module_part).resolve()
        if not path.exists():
            raise LocatorError(f"No such file {module_part!r} (from locator {locator!r}).")
        sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(module_part)
        except ImportError as e:
            raise LocatorError(
                f"Cannot import module {module_part!r} (from {locator!r}): {e}"
            ) from e
    try:
        return getattr(module, attr)
    except AttributeError:
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise LocatorError(
            f"Module {module_part!r} has no attribute {attr!r}; it has: {', '.join(public)}."
        ) from None


def load_topology(locator: str) -> Any:
    """The :class:`Topology` a locator names.

    The object may be a Topology, a StreamsBuilder, or a function returning either (called
    without arguments).

    Raises
    ------
    LocatorError
        If the object is none of these.
    """
    from streamtable import StreamsBuilder, Topology

    obj = load_object(locator)
    if callable(obj) and not isinstance(obj, Topology | StreamsBuilder):
        obj = obj()
    if isinstance(obj, StreamsBuilder):
        obj = obj.build()
    if not isinstance(obj, Topology):
        raise LocatorError(
            f"{locator!r} is a {type(obj).__name__}; expected a Topology, a StreamsBuilder, or a "
            "function returning one."
        )
    return obj
