"""MkDocs hook: the docstrings cross-reference with Sphinx roles (``:class:`~parallel_rollouts.X```),
which Markdown renders as the role's name followed by the code span. Show the code span alone,
with ``~`` meaning "the last component only", as Sphinx does."""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:class|attr|meth|func|mod|data|exc|obj):<code>(~?)([\w.]+)</code>")


def _code(match: re.Match) -> str:
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"<code>{name}</code>"


def on_page_content(html: str, **_) -> str:
    return ROLE.sub(_code, html)
