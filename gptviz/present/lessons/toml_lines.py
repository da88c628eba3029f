"""Where things are in a TOML file: the line of a table header or a key, for error messages that name a line."""
from __future__ import annotations

import re
from typing import Optional

# One way to match each character (the name's spaces are stripped afterwards), so a long line that is not a
# header fails in linear time: the old ``\s*([… ]+?)\s*`` could split a run of spaces three ways (cubic).
TABLE_HEADER = re.compile(r"^\s*\[\[?([A-Za-z0-9_.\- \t]+)\]\]?\s*(?:#.*)?$")


class TomlLines:
    """Line numbers of keys in a TOML file (tomllib gives none for values it parsed fine)."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.headers: list[tuple[int, str]] = []  # (1-based line, table name) outside multi-line strings
        self.code: list[bool] = []  # False for lines inside a multi-line string
        inside = None
        for i, line in enumerate(self.lines, start=1):
            self.code.append(inside is None)
            if inside is None:
                m = TABLE_HEADER.match(line)
                if m and not line.lstrip().startswith("#"):
                    self.headers.append((i, m.group(1).strip()))
            for q in ('"""', "'''"):
                if inside in (None, q) and line.count(q) % 2 == 1:
                    inside = q if inside is None else None

    def step_header(self, k: int) -> int:
        """The line of the k-th [[steps]] header (0-based k)."""
        rows = [i for i, name in self.headers if name == "steps" and self._is_array(i)]
        return rows[k] if k < len(rows) else (rows[-1] if rows else 1)

    def _is_array(self, i: int) -> bool:
        return self.lines[i - 1].lstrip().startswith("[[")

    def _block(self, k: Optional[int]) -> tuple[int, int]:
        if k is None:  # the top of the file, before the first table
            end = self.headers[0][0] if self.headers else len(self.lines) + 1
            return 1, end
        start = self.step_header(k)
        later = [i for i, name in self.headers if i > start and self._is_array(i)]
        return start, (later[0] if later else len(self.lines) + 1)

    def key(self, k: Optional[int], key: str, table: Optional[str] = None) -> int:
        """The line of ``key = …`` in step k (None: the top of the file), inside ``table`` if given."""
        start, end = self._block(k)
        if table:
            sub = [i for i, name in self.headers if start <= i < end and name.split(".")[-1] == table]
            if sub:
                start = sub[0]
            else:
                found = self.find(start, end, table)
                start = found or start
        return self.find(start, end, key) or start

    def table(self, name: str) -> int:
        """The line of the header of table ``name`` (1 if the file has none)."""
        return next((i for i, n in self.headers if n == name), 1)

    def find(self, start: int, end: int, key: str) -> Optional[int]:
        """The first line in [start, end) that sets ``key`` (outside multi-line strings), or None."""
        pat = re.compile(rf"(^|[{{,\s])\"?{re.escape(key)}\"?\s*=")
        for i in range(start, min(end, len(self.lines) + 1)):
            if self.code[i - 1] and pat.search(self.lines[i - 1]):
                return i
        return None
