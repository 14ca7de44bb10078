"""One embedded PostgreSQL and one Temporal dev server, shared by both sides of a bench run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from ledger.migrations import migrate
from worker.embedded import EmbeddedPostgres, TemporalDevServer
from worker.runtime import Connections

DATABASE = "bench"


@dataclass(frozen=True)
class Stack:
    """Where the running stack listens, and a scratch folder for settings' ``data_dir``."""

    connections: Connections
    scratch: Path


@contextlib.asynccontextmanager
async def bench_stack() -> AsyncIterator[Stack]:
    """Start PostgreSQL (database migrated) and Temporal in a temp dir; stop both on exit."""
    with tempfile.TemporaryDirectory(prefix="threadwarden-bench-") as tmp:
        root = Path(tmp)
        postgres = EmbeddedPostgres(root / "pg")
        try:
            dsn = await postgres.start(DATABASE)
            conn = await asyncpg.connect(dsn)
            try:
                await migrate(conn)
            finally:
                await conn.close()
            temporal = TemporalDevServer(None, ui=False)
            try:
                await temporal.start()
                yield Stack(Connections(dsn, temporal.address), root / "scratch")
            finally:
                temporal.stop()
        finally:
            postgres.stop()
