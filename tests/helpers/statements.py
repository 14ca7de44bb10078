"""Counting the SQL statements a ledger call runs: a pool whose every statement is logged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from asyncpg.connection import LoggedQuery

from threadwarden.ledger.pool import create_pool

CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")
"""Transaction control: not a statement of its own in the counts (as in the bench)."""


@dataclass
class Counted:
    """A pool and the statements its connections ran, in order."""

    pool: asyncpg.Pool[Any]
    logged: list[str] = field(default_factory=list)

    async def taken(self) -> list[str]:
        """The statements since the last call (transaction control left out), whitespace
        folded; the log starts afresh."""
        for _ in range(3):  # query loggers are called with loop.call_soon
            await asyncio.sleep(0)
        taken = [" ".join(q.split()) for q in self.logged]
        self.logged.clear()
        return [q for q in taken if not q.upper().startswith(CONTROL)]


@asynccontextmanager
async def counted_pool(database_url: str) -> AsyncIterator[Counted]:
    """A pool of its own on the test's database whose statements are counted."""
    logged: list[str] = []

    def log(query: LoggedQuery) -> None:
        logged.append(query.query)

    pool = await create_pool(database_url, min_size=1, max_size=2, on_query=log)
    try:
        yield Counted(pool, logged)
    finally:
        await pool.close()
