"""Bring the embedded stack up for `dev` and `demo`: Postgres, migrations, Temporal with UI."""

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg

from threadwarden.config.connect import Connections
from threadwarden.config.endpoints import Endpoints, clear_endpoints, write_endpoints
from threadwarden.errors import StackAlreadyRunning
from threadwarden.ledger.migrations import migrate
from threadwarden.worker.embedded import (
    EmbeddedPostgres,
    TemporalDevServer,
    forget_processes,
    postmaster_pid,
    record_processes,
    surviving_processes,
)

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def embedded_stack(data_dir: Path, *, record: bool) -> AsyncIterator[Connections]:
    """Start Postgres and the Temporal dev server under ``data_dir``; stop both on exit.

    With ``record`` the endpoints are written to ``data_dir/stack.json`` for other commands.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    survivors = surviving_processes(data_dir)
    if survivors:
        named = ", ".join(f"{name} pid {pid}" for name, pid in sorted(survivors.items()))
        raise StackAlreadyRunning(
            f"data dir {data_dir}: an earlier stack is still running there ({named}); stop it"
            f" (kill {' '.join(str(p) for p in sorted(survivors.values()))}) or pass another"
            " --data-dir"
        )
    postgres = EmbeddedPostgres(data_dir / "postgres")
    temporal = TemporalDevServer(data_dir / "temporal.sqlite", usual_ports=True)
    try:
        record_processes(data_dir, {"dev": os.getpid()})
        dsn = await postgres.start()
        postgres_pid = postmaster_pid(data_dir / "postgres")
        record_processes(data_dir, {"dev": os.getpid(), "postgres": postgres_pid})
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await temporal.start()
        record_processes(
            data_dir, {"dev": os.getpid(), "temporal": temporal.pid, "postgres": postgres_pid}
        )
        connections = Connections(dsn, temporal.address, temporal.ui_url)
        if record:
            write_endpoints(
                data_dir,
                Endpoints(
                    dsn,
                    temporal.address,
                    temporal.ui_url,
                    os.getpid(),
                    temporal_pid=temporal.pid,
                    postgres_pid=postgres_pid,
                ),
            )
        yield connections
    finally:
        if record:
            clear_endpoints(data_dir)
        temporal.stop()
        postgres.stop()
        forget_processes(data_dir)


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Turn SIGHUP (a closed terminal) and SIGTERM into a cancellation of the running task, so
    that every ``async with`` of the stack unwinds and stops what it started; SIGINT already
    arrives as KeyboardInterrupt / cancellation."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    signals = (signal.SIGHUP, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, task.cancel)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
