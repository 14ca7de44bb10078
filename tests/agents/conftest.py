"""Agent-binding tests run real workers against the session's Postgres and Temporal dev server
(tests/conftest.py); each that used a database ends with the ledger invariants checked over it,
as the end-to-end tests do (tests/e2e/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.helpers.chat_server import ChatServer, chat_server
from tests.helpers.checks import assert_ledger_invariants
from tests.helpers.cli import Cli
from tests.helpers.model_agents import Framework
from tests.helpers.polling import eventually
from tests.helpers.processes import worker_process
from threadwarden.bindings import Binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.views import SubmissionView
from threadwarden.worker.plugin import default_registry
from threadwarden.worker.runtime import running_worker

AgentsWorker = Callable[..., contextlib.AbstractAsyncContextManager[None]]
WorkerProcess = Callable[
    [str, str], contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]
]


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
def worker_processes(settings: Settings, connections: Connections, tmp_path: Path) -> WorkerProcess:
    """Use as ``async with worker_processes(name, spec) as process``: `threadwarden worker
    --bindings spec` as a process on the test's task queue (its output under ``tmp_path/name``),
    killed on the way out."""

    def start(
        name: str, bindings: str
    ) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        return worker_process(settings, connections, tmp_path / name, bindings=bindings)

    return start


@pytest.fixture
def cli(cli_env: None, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The CLI on the test's database, Temporal server and task queue; its JSON output read
    back."""
    return Cli(capsys)


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
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the test agents' nodes and tools count their real runs (``TW_TEST_TOOL_DIR``, read
    by the test's worker and by worker processes alike: `tool_runs`)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    monkeypatch.setenv("TW_TEST_TOOL_DIR", str(folder))
    return folder


@pytest.fixture
def tools(runs: Path, monkeypatch: pytest.MonkeyPatch, server: ChatServer) -> Path:
    """`runs`, for agents of tests.helpers.model_agents: worker processes loading it also read
    the chat server's URL from the environment."""
    monkeypatch.setenv("TW_TEST_MODEL_URL", server.url)
    return runs


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


def each_framework(*frameworks: Framework) -> pytest.MarkDecorator:
    """Run a test once with each of ``frameworks`` as its ``framework`` argument."""
    return pytest.mark.parametrize("framework", frameworks, ids=[f.name for f in frameworks])
