"""Agent-binding tests run real workers against the session's Postgres and Temporal dev server
(tests/conftest.py); each that used a database ends with the ledger invariants checked over it,
as the end-to-end tests do (tests/e2e/conftest.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.helpers.chat_server import ChatServer, chat_server
from tests.helpers.checks import assert_ledger_invariants
from tests.helpers.polling import eventually
from threadwarden.bindings import Binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import Failpoints
from threadwarden.views import SubmissionView
from threadwarden.worker.plugin import default_registry
from threadwarden.worker.runtime import Connections, running_worker
from threadwarden.worker.settings import Settings

AgentsWorker = Callable[..., contextlib.AbstractAsyncContextManager[None]]


@pytest.fixture
def agents_worker(
    settings: Settings, connections: Connections, failpoints: Failpoints
) -> AgentsWorker:
    """Use as ``async with agents_worker(binding, ...)``: a worker with those bindings (and the
    built-in scripted one) on the test's task queue."""

    @contextlib.asynccontextmanager
    async def start(*bindings: Binding) -> AsyncIterator[None]:
        registry = default_registry()
        for binding in bindings:
            registry.register(binding)
        async with running_worker(settings, connections, registry, failpoints=failpoints):
            try:
                yield
            finally:
                failpoints.release_all()

    return start


@pytest.fixture
def checked_database(request: pytest.FixtureRequest) -> str | None:
    """The test's database when it uses one (a synchronous fixture: it may ask for it by name)."""
    if "database_url" not in request.fixturenames:
        return None
    database_url: str = request.getfixturevalue("database_url")
    return database_url


@pytest.fixture(autouse=True)
async def ledger_invariants(checked_database: str | None) -> AsyncIterator[None]:
    """A test that used a database ends with the ledger invariants checked over it."""
    yield
    if checked_database is not None:
        await assert_ledger_invariants(checked_database)


@pytest.fixture
async def server() -> AsyncIterator[ChatServer]:
    """A fresh scripted OpenAI-compatible chat server on 127.0.0.1 for the test."""
    async with chat_server() as running:
        yield running


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ChatServer) -> Path:
    """Where the test agents' tools count their real runs; the environment that worker
    processes loading tests.helpers.model_agents read (server URL, that folder)."""
    folder = tmp_path / "tools"
    folder.mkdir()
    monkeypatch.setenv("TW_TEST_TOOL_DIR", str(folder))
    monkeypatch.setenv("TW_TEST_MODEL_URL", server.url)
    return folder


def tool_runs(folder: Path, tool: str) -> int:
    """How often ``tool`` really ran (tests.helpers.model_agents counts them)."""
    path = folder / tool
    return len(path.read_text().splitlines()) if path.exists() else 0


async def head_in(client: ThreadwardenClient, thread: str, state: str) -> SubmissionView:
    """Wait until the thread's newest submission is in ``state``."""
    status = await eventually(
        lambda: client.thread_status(thread),
        lambda s: s.submissions[-1].state == state,
        what=f"{thread}'s head {state}",
    )
    return status.submissions[-1]
