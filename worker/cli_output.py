"""Printing helpers for the CLI."""

import json
import sys
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


def format_age(seconds: float) -> str:
    """A duration for a person: ``42s``, ``5m``, ``3h``, ``2d``."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def one_line(text: str) -> str:
    """``text`` on one line, printable whatever its source (non-UTF-8 argv arrives as lone
    surrogates, which a strict stream refuses): line breaks become spaces, unencodable
    characters backslash escapes."""
    flat = " ".join(text.split("\n")).replace("\r", " ")
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


def print_error(
    message: str,
    *,
    code: int,
    field: str | None = None,
    kind: str = "error",
    as_json: bool = False,
    prog: str,
) -> int:
    """Report a failed command on stderr: ``PROG: error: MESSAGE``, or under ``--json`` one
    object ``{"error": MESSAGE, "field": FIELD or null, "code": KIND, "exit_code": CODE}``
    (``KIND`` is a stable snake_case name such as ``invalid_input`` or ``decision_conflict``).
    Returns ``code``."""
    if as_json:
        report = {"error": one_line(message), "field": field, "code": kind, "exit_code": code}
        print(json.dumps(report), file=sys.stderr)
    else:
        print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    return code
