"""Every end-to-end test ends with protocol invariants (docs/protocol.md) checked over its whole
database.

Each test's ledger is its own database (``database_url`` in tests/conftest.py, cloned from the
migrated template), so the check sees exactly that test's data. It runs after every other
fixture of the test was torn down (workers stopped, clients closed): what it sees is what the
test left behind. A test that keeps its ledger elsewhere, or that cannot leave an honest state,
says so with ``@pytest.mark.no_ledger_check(reason="…")``; a test with neither fails.

The fixtures several end-to-end modules share live here too (`temporal_client`); a test's own
workers come from `workers` (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from tests.helpers.checks import assert_ledger_invariants
from threadwarden.config.connect import Connections, connect_temporal

MARKER = "no_ledger_check"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(reason): the end-of-test ledger check does not apply to this e2e test (the"
        " reason says why)",
    )


@pytest.fixture
def ledger_database(request: pytest.FixtureRequest) -> str | None:
    """The database the end-of-test check reads: the test's own, or None when it opted out."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
        assert reason, f"@pytest.mark.{MARKER} needs a reason"
        return None
    assert "database_url" in request.fixturenames, (
        f"{request.node.nodeid} uses no test database: check its ledger some other way and"
        f" mark it @pytest.mark.{MARKER}(reason=…)"
    )
    # A synchronous fixture: an async one cannot request an async fixture by name.
    database_url: str = request.getfixturevalue("database_url")
    return database_url


@pytest.fixture(autouse=True)
async def ledger_invariants(ledger_database: str | None) -> AsyncIterator[None]:
    """Check one settlement per submission, FIFO, unique ids, contiguous sequences, monotone
    epochs and nothing lost over the test's database once the test is done."""
    yield
    if ledger_database is not None:
        await assert_ledger_invariants(ledger_database)


@pytest.fixture
async def temporal_client(connections: Connections) -> Client:
    """A Temporal client on the session's dev server (to inspect, query or terminate host runs)."""
    return await connect_temporal(connections.temporal_address, "default")
