"""User and model text shown as itself in Markdown: the one helper every section, lesson and question uses for a
string a user (or a model, or a loaded file) wrote."""
from __future__ import annotations

import re

_MD_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character


def plain_md(text: str) -> str:
    """``text`` as Markdown that shows it literally: every ASCII punctuation character backslash-escaped (no link,
    no emphasis, no HTML, no LaTeX, no bare-URL autolink: ``http\\://`` and ``www\\.`` are not links), new lines
    as spaces."""
    return _MD_PUNCT.sub(r"\\\1", " ".join(str(text).splitlines()))
