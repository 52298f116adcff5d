"""CSV exports: cells a spreadsheet will not run, streamed line by line."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

# --- CSV exports -----------------------------------------------------------------------------


def csv_safe(value: Any) -> Any:
    """A cell a spreadsheet will not run: text starting with ``= + - @`` (a formula, and the
    way CSV injection works) gets a leading apostrophe; None becomes ""."""
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


class _Echo:
    """A file-like object whose ``write`` returns the line (csv.writer into a generator)."""

    def write(self, value: str) -> str:
        return value


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """CSV text line by line (for a streaming response), every cell through :func:`csv_safe`."""
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([csv_safe(value) for value in row])
