"""Hostile values for the input paths of the client and the CLI (SQL metacharacters, NUL bytes,
10 MB strings, deep nesting, non-UTF-8 text, escape sequences) and the row counts that show a
refusal wrote nothing."""

from __future__ import annotations

import os
from typing import Any

import asyncpg

TABLES = (
    "hosts",
    "threads",
    "submissions",
    "records",
    "publications",
    "thread_summaries",
    "messages",
)
SQL = "'; DROP TABLE threadwarden.submissions; --"
NUL = "a\x00b"
HUGE = "x" * 10_000_000
NON_UTF8 = os.fsdecode(b"t\xff\xfe")  # how non-UTF-8 bytes of argv reach Python
ESCAPE = "\x1b[2J\x1b[31mred"


def nested(levels: int) -> Any:
    """A list nested ``levels`` deep, built without recursion."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


async def row_counts(pool: asyncpg.Pool[Any]) -> dict[str, int]:
    """The rows of every table a refused input must leave untouched."""
    return {
        table: int(await pool.fetchval(f"SELECT count(*) FROM threadwarden.{table}"))
        for table in TABLES
    }
