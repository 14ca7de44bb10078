"""Agent-binding tests run real workers against the session's Postgres and Temporal dev server
(tests/conftest.py); each ends with the ledger invariants checked over its database, as the
end-to-end tests do (tests/e2e/conftest.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from tests.e2e.conftest import ledger_database, ledger_invariants
from tests.e2e.conftest import pytest_configure as pytest_configure
from threadwarden.bindings import Binding
from threadwarden.failpoints import Failpoints
from threadwarden.worker.plugin import default_registry
from threadwarden.worker.runtime import Connections, running_worker
from threadwarden.worker.settings import Settings

__all__ = ["ledger_database", "ledger_invariants"]

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
