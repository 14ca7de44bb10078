"""The bench's embedded stack: PostgreSQL with ``pg_stat_statements``, and a Temporal dev server.

Every measured side gets a fresh database (see `BenchStack.fresh_database`), so nothing a side
leaves behind (a host still armed after a timeout, say) reaches the next one, and the server's
per-database counters belong to that side alone. The bench's own queries (completion polling,
reading per-unit timestamps) run as the role `OBSERVER`, whose statements are left out of the
counts.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from threadwarden.worker.embedded import EmbeddedPostgres, TemporalDevServer, postmaster_pid

OBSERVER = "bench_observer"
"""The role of the bench's own queries on a measured database."""
CONSOLE = "bench_console"
"""The role of the console process of ``--streams`` (its statements are counted apart)."""
ADMIN_DATABASE = "postgres"
"""Where the bench reads server statistics from (its own queries there count for no side)."""


@contextlib.asynccontextmanager
async def connected(dsn: str) -> AsyncIterator[asyncpg.Connection[Any]]:
    """A connection of its own to ``dsn``, closed on exit."""
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


def with_user(dsn: str, user: str) -> str:
    """``dsn`` with its user name replaced (trust authentication: no password)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


@dataclass(frozen=True)
class BenchStack:
    """Where the running stack listens, and a scratch folder for worker logs and data dirs."""

    postgres: EmbeddedPostgres
    temporal_address: str
    scratch: Path
    temporal_pid: int | None = None

    def server_pids(self) -> dict[str, list[int]]:
        """The servers' root processes, by name (for CPU accounting, `bench.cpu`)."""
        postgres = postmaster_pid(self.postgres.path)
        return {
            "temporal": [] if self.temporal_pid is None else [self.temporal_pid],
            "postgres": [] if postgres is None else [postgres],
        }

    def dsn(self, database: str) -> str:
        return self.postgres.dsn(database)

    def observer_dsn(self, database: str) -> str:
        return with_user(self.dsn(database), OBSERVER)

    def admin(self) -> AbstractAsyncContextManager[asyncpg.Connection[Any]]:
        """A connection to the admin database, for statistics and database creation."""
        return connected(self.dsn(ADMIN_DATABASE))

    async def fresh_database(self, name: str) -> str:
        """Create the (empty) database ``name`` and return its DSN."""
        async with self.admin() as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            await conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


async def _start_postgres(path: Path) -> EmbeddedPostgres:
    """Start PostgreSQL with ``pg_stat_statements`` preloaded (one restart on first start)."""
    postgres = EmbeddedPostgres(path)
    await postgres.start(ADMIN_DATABASE)
    async with connected(postgres.dsn(ADMIN_DATABASE)) as conn:
        preloaded = await conn.fetchval("SHOW shared_preload_libraries")
        if "pg_stat_statements" not in str(preloaded):
            await conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    if "pg_stat_statements" not in str(preloaded):
        postgres.stop()  # the setting is read only at server start
        postgres = EmbeddedPostgres(path)
        await postgres.start(ADMIN_DATABASE)
    async with connected(postgres.dsn(ADMIN_DATABASE)) as conn:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("SET pg_stat_statements.track_utility = on")  # checks the setting
        for role in (OBSERVER, CONSOLE):
            if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role):
                await conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
    return postgres


@contextlib.asynccontextmanager
async def bench_stack() -> AsyncIterator[BenchStack]:
    """Start PostgreSQL and a headless Temporal dev server in a temp dir; stop both on exit."""
    with tempfile.TemporaryDirectory(prefix="threadwarden-bench-") as tmp:
        root = Path(tmp)
        postgres: EmbeddedPostgres | None = None
        try:
            postgres = await _start_postgres(root / "pg")
            temporal = TemporalDevServer(None, ui=False)
            try:
                await temporal.start()
                yield BenchStack(postgres, temporal.address, root / "scratch", temporal.pid)
            finally:
                temporal.stop()
        finally:
            if postgres is not None:
                postgres.stop()
