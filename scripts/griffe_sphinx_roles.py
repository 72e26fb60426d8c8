"""A griffe extension for the documentation site (``mkdocs.yml``): Sphinx roles to code spans.

streamtable's docstrings are numpydoc and refer to objects with Sphinx roles
(``:class:`~streamtable.errors.TopologyError```). mkdocstrings renders Markdown, where such a
role would show up verbatim; this extension rewrites each role to a code span of the object's
name (the last component when the target starts with ``~``), before the docstring is parsed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const|ref|term):`(~?)([^`<]+?)(?:\s*<[^>]*>)?`"
)


def _span(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2).strip()
    if short:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def rewrite_roles(text: str) -> str:
    """Return ``text`` with every Sphinx cross-reference role replaced by a code span.

    Examples
    --------
    >>> rewrite_roles("See :class:`~streamtable.errors.TopologyError` and :meth:`build`.")
    'See `TopologyError` and `build`.'
    """
    return _ROLE.sub(_span, text)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: D102
        if obj.docstring is not None:
            obj.docstring.value = rewrite_roles(obj.docstring.value)
