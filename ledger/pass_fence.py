"""The pass fence: a pass step reads (or locks) its host's row and goes on only while its pass
epoch is current; a step of a replaced pass raises `StalePass` and writes nothing."""

from __future__ import annotations

import asyncpg

from threadwarden.errors import StalePass
from threadwarden.ledger.pool import Connection

HOST_COLUMNS = """
dirty, processed, nonterminal, retry, binding_retries, last_served_thread_id, pass_epoch, alarm_at
"""
"""The host row's columns every pass step reads (``pass_epoch`` among them, for the fence)."""


async def read_fenced(conn: Connection, host_id: str, epoch: int, query: str) -> asyncpg.Record:
    """The host row ``query`` reads (or locks) with `HOST_COLUMNS`, if ``epoch`` is still the
    host's pass epoch; else `StalePass`."""
    return fenced(await conn.fetchrow(query, host_id), host_id, epoch)


def fenced(row: asyncpg.Record | None, host_id: str, epoch: int) -> asyncpg.Record:
    """``row``, a host row read with `HOST_COLUMNS`, if ``epoch`` was its pass epoch; else
    `StalePass`."""
    if row is None or int(row["pass_epoch"]) != epoch:
        found = None if row is None else row["pass_epoch"]
        raise StalePass(f"host {host_id}: pass epoch {epoch} is stale (current {found})")
    return row
