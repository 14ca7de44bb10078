"""The test run's one embedded stack: a PostgreSQL server with a migrated template database and a
Temporal dev server.

A plain ``pytest`` run starts it in its session fixture. Under pytest-xdist the controller starts
it once, before the first worker, and hands its endpoints to every worker (``workerinput``): the
workers share it, each test still on its own database and task queue.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from threadwarden.config.settings import Settings
from threadwarden.ledger.migrations import migrate
from threadwarden.worker.embedded import EmbeddedPostgres, TemporalDevServer

TEMPLATE = "tw_template"
"""The migrated database every test's database is cloned from."""
WORKER_INPUT = "threadwarden_stack"
"""The key of the stack's endpoints in an xdist worker's ``workerinput``."""
SETTINGS = {
    # The tests' data lives as long as the run: durability across an OS crash buys nothing
    # here, and every commit and CREATE DATABASE would wait for the disk.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


@dataclass(frozen=True)
class StackEndpoints:
    """Where the run's stack listens."""

    postgres_admin: str
    """DSN of the server's ``postgres`` database."""
    temporal_address: str

    def dsn(self, database: str) -> str:
        """The DSN of ``database`` on the run's PostgreSQL server."""
        parts = urlsplit(self.postgres_admin)
        return urlunsplit(parts._replace(path=f"/{database}"))

    async def new_database(self, prefix: str, template: str | None) -> str:
        """Create a database of a fresh name (a copy of ``template``, or empty); its DSN."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        copied = f' TEMPLATE "{template}"' if template else ""
        admin = await asyncpg.connect(self.postgres_admin)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"{copied}')
        finally:
            await admin.close()
        return self.dsn(name)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> StackEndpoints:
        return cls(**json.loads(text))


class EmbeddedStack:
    """The embedded servers of one test run, started and stopped together."""

    def __init__(self, folder: Path) -> None:
        self.postgres = EmbeddedPostgres(folder / "pg")
        self.temporal = TemporalDevServer(None, ui=False)

    async def start(self) -> StackEndpoints:
        """Start both servers (concurrently) and migrate the template database."""
        dsn, _ = await asyncio.gather(self.postgres.start(TEMPLATE), self.temporal.start())
        admin = await asyncpg.connect(self.postgres.dsn("postgres"))
        try:
            for name, value in SETTINGS.items():
                await admin.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            await admin.execute("SELECT pg_reload_conf()")
        finally:
            await admin.close()
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        return StackEndpoints(self.postgres.dsn("postgres"), self.temporal.address)

    def stop(self) -> None:
        self.temporal.stop()
        self.postgres.stop()


def quick_settings(data_dir: Path) -> Settings:
    """Defaults with a fresh task queue and a quick sweeper, data under ``data_dir``: a test's
    settings on the run's stack."""
    return Settings(
        task_queue=f"tq-{uuid.uuid4().hex[:12]}",
        data_dir=data_dir,
        sweep_interval_ms=200,
        sweep_idle_interval_ms=200,
        # A host is woken once its alarm is this overdue. A pass pre-arms the alarm at begin,
        # and on a busy machine (the suite runs on several workers) passes outlast 200 ms: the
        # sweeper then woke hosts into extra passes that tests did not expect.
        sweep_grace_ms=1_000,
        lease_ms=3_000,
        lease_renew_ms=500,
        # A head whose agent queue some worker polls (or polled a moment ago) but that none
        # starts waits this long before it counts as binding-unavailable (the default 60 s would
        # dominate the tests of a busy or just-killed worker). No poller at all: at once.
        head_start_timeout_ms=3_000,
    )
