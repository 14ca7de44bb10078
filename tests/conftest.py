"""Session-wide real services: an embedded PostgreSQL and a Temporal dev server.

Each test gets its own database cloned from a migrated template and its own task queue.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from threadwarden.failpoints import Failpoints
from threadwarden.ledger.migrations import migrate
from threadwarden.ledger.pool import create_pool
from threadwarden.worker.client import ThreadwardenClient
from threadwarden.worker.embedded import EmbeddedPostgres, TemporalDevServer
from threadwarden.worker.runtime import Connections, running_worker
from threadwarden.worker.settings import Settings

TEMPLATE = "tw_template"


@pytest.fixture(scope="session")
async def postgres(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmbeddedPostgres]:
    """The session's PostgreSQL server, with a migrated template database."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "data")
    dsn = await server.start(TEMPLATE)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    yield server
    server.stop()


@pytest.fixture(scope="session")
async def temporal(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """The session's Temporal dev server (in memory, headless); yields its address."""
    server = TemporalDevServer(None, ui=False)
    await server.start()
    yield server.address
    server.stop()


@pytest.fixture
async def database_url(postgres: EmbeddedPostgres) -> AsyncIterator[str]:
    """A fresh, migrated database for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres.dsn("postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    finally:
        await admin.close()
    yield postgres.dsn(name)


@pytest.fixture
async def empty_database_url(postgres: EmbeddedPostgres) -> str:
    """A fresh database with no schema at all (for migration tests)."""
    name = f"e_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres.dsn("postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return postgres.dsn(name)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    """A pool on the test's database."""
    created = await create_pool(database_url, max_size=5)
    yield created
    await created.close()


@pytest.fixture
def connections(database_url: str, temporal: str) -> Connections:
    """The test's database and the session's Temporal server."""
    return Connections(database_url=database_url, temporal_address=temporal)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Defaults with a fresh task queue and a quick sweeper."""
    return Settings(
        task_queue=f"tq-{uuid.uuid4().hex[:12]}",
        data_dir=tmp_path / "tw",
        sweep_interval_ms=200,
        sweep_idle_interval_ms=200,
        sweep_grace_ms=200,
        lease_ms=3_000,
        lease_renew_ms=500,
        # A head for an agent no worker has waits this long on its agent queue before it counts
        # as binding-unavailable (the default 60 s would dominate the binding-retry tests).
        head_start_timeout_ms=3_000,
    )


@pytest.fixture
def failpoints() -> Failpoints:
    """The failpoints shared by the test's worker and client (unarmed until the test arms them)."""
    return Failpoints()


@pytest.fixture
async def worker(
    settings: Settings, connections: Connections, failpoints: Failpoints
) -> AsyncIterator[None]:
    """A running threadwarden worker (with its sweeper) on the test's task queue.

    Failpoints are released before it stops: a pass still paused at one would otherwise hold the
    shutdown until its local activity times out.
    """
    async with running_worker(settings, connections, failpoints=failpoints):
        try:
            yield
        finally:
            failpoints.release_all()


@pytest.fixture
async def client(
    settings: Settings, connections: Connections, failpoints: Failpoints
) -> AsyncIterator[ThreadwardenClient]:
    """An application client on the test's database and task queue."""
    async with ThreadwardenClient.connect(
        settings, connections, failpoints=failpoints
    ) as connected:
        yield connected


@pytest.fixture
def ids() -> str:
    """A unique prefix for thread and host ids (workflow ids are shared across tests)."""
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, connections: Connections, settings: Settings, tmp_path: Path
) -> None:
    """Point the CLI at the test's database, Temporal server and task queue."""
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", connections.database_url)
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", connections.temporal_address)
    monkeypatch.setenv("THREADWARDEN_TASK_QUEUE", settings.task_queue)
    monkeypatch.setenv("THREADWARDEN_DATA_DIR", str(tmp_path / "none"))
