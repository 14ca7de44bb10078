"""Printing helpers for the CLI."""

import json
from collections.abc import Sequence
from typing import Any


def print_json(value: Any) -> None:
    """One compact JSON document on stdout."""
    print(json.dumps(value, default=str))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(headers, rows))
