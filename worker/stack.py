"""Bring the embedded stack up for `dev` and `demo`: Postgres, migrations, Temporal with UI."""

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg

from threadwarden.ledger.migrations import migrate
from threadwarden.worker.embedded import (
    EmbeddedPostgres,
    Endpoints,
    TemporalDevServer,
    clear_endpoints,
    read_endpoints,
    write_endpoints,
)
from threadwarden.worker.runtime import Connections

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def embedded_stack(data_dir: Path, *, record: bool) -> AsyncIterator[Connections]:
    """Start Postgres and the Temporal dev server under ``data_dir``; stop both on exit.

    With ``record`` the endpoints are written to ``data_dir/stack.json`` for other commands.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    running = read_endpoints(data_dir)
    if running is not None:
        raise RuntimeError(
            f"data dir {data_dir}: a stack is already running there (pid {running.pid});"
            " stop it or pass another --data-dir"
        )
    postgres = EmbeddedPostgres(data_dir / "postgres")
    temporal = TemporalDevServer(data_dir / "temporal.sqlite")
    try:
        dsn = await postgres.start()
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await temporal.start()
        connections = Connections(dsn, temporal.address, temporal.ui_url)
        if record:
            write_endpoints(
                data_dir, Endpoints(dsn, temporal.address, temporal.ui_url, os.getpid())
            )
        yield connections
    finally:
        if record:
            clear_endpoints(data_dir)
        temporal.stop()
        postgres.stop()
