"""A griffe extension for the API reference: reST cross-reference roles as Markdown code spans.

The docstrings are written with Sphinx roles (``:class:`Redlock```, ``:meth:`~fastredlock.Lock.release```)
and reST literals (````code````, which Markdown also reads as code). mkdocstrings renders Markdown,
where a role would show as raw text, so each role becomes the code span of the name it shows
(``Redlock``, ``release``). Loaded by mkdocs.yml (``extensions:``); the docstrings are not changed.
"""
from __future__ import annotations

import re
from typing import Any

from griffe import Extension

# :role:`target`, :role:`~a.b.target` (shows "target"), :role:`text <target>` (shows "text")
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|term|ref):`([^`<]*?)(?:\s*<[^`>]*>)?`")


def _shown(match: "re.Match[str]") -> str:
    text = match.group(1).strip()
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return f"`{text}`"


class ReSTRoles(Extension):
    """Rewrite reST roles in every loaded docstring as Markdown code spans."""

    def on_instance(self, **kwargs: Any) -> None:
        """Rewrite the roles of one object's docstring."""
        docstring = getattr(kwargs.get("obj"), "docstring", None)
        if docstring is not None and ":`" in docstring.value:
            docstring.value = _ROLE.sub(_shown, docstring.value)
