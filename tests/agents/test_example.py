"""examples/agents runs as its README says, offline: its bindings load with ``--bindings
support:bindings`` from its folder, and the CLI drives both agents through a lookup, a second
turn and an approved refund."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from tests.agents.conftest import head_in
from tests.helpers.cli import Cli, run_cli
from threadwarden.bindings import BindingRegistry
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.worker.loading import load_registry
from threadwarden.worker.runtime import running_worker

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agents"
ExampleWorker = Callable[..., AbstractAsyncContextManager[BindingRegistry]]


@pytest.fixture
def example_worker(
    settings: Settings,
    connections: Connections,
    failpoints: Failpoints,
    monkeypatch: pytest.MonkeyPatch,
) -> ExampleWorker:
    """Use as ``async with example_worker("module:bindings", *modules) as registry``: the
    example's bindings loaded from its folder, as its README's worker loads them (``modules``
    are imported from there afresh), run by a worker on the test's task queue."""

    @asynccontextmanager
    async def start(spec: str, *modules: str) -> AsyncIterator[BindingRegistry]:
        monkeypatch.chdir(EXAMPLE)
        for name in modules:
            monkeypatch.delitem(sys.modules, name, raising=False)
        registry = load_registry(spec)
        try:
            async with running_worker(settings, connections, registry, failpoints=failpoints):
                yield registry
        finally:
            for name in modules:
                sys.modules.pop(name, None)

    return start


async def test_the_agents_example_runs_both_frameworks_from_the_cli(
    example_worker: ExampleWorker,
    client: ThreadwardenClient,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    ids: str,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with example_worker("support:bindings", "support", "offline") as registry:
        assert {"support", "billing"} <= set(registry.agent_ids())
        first = await cli.submit(ids, "support", "Where is order 42?")
        assert (await client.result(first, timeout=30)).result == (
            "Done: order 42 shipped on Monday"
        )
        refund = await cli.submit(ids, "support", "Refund order 42 please")
        assert (await head_in(client, ids, "suspended")).waiting_for == "approval"
        await cli("approve", refund)
        assert (await client.result(refund, timeout=30)).result == (
            "Done: refunded 500 cents on order 42"
        )
        billing = await cli.submit(f"{ids}b", "billing", "Refund invoice 7")
        await head_in(client, f"{ids}b", "suspended")
        await cli("deny", billing, "--reason", "paid by card")
        denied = await client.result(billing, timeout=30)
    assert denied.result == "Done: The operator denied the call to refund: paid by card"


async def test_the_agents_example_runs_the_langgraph_graph_from_the_cli(
    example_worker: ExampleWorker, client: ThreadwardenClient, cli: Cli, ids: str
) -> None:
    async with example_worker("orders:bindings", "orders"):
        await cli.submit(ids, "orders", {"item": "shirt"})
        order = (await head_in(client, ids, "suspended")).submission_id
        assert (await client.thread_status(ids)).submissions[-1].waiting_for == "input"
        assert await run_cli("answer", order, "--value", '"XL"') == 2  # not one of the sizes
        assert await run_cli("answer", order, "--value", '"L"') == 0
        done = await client.result(order, timeout=30)
    assert (done.result["size"], done.result["reserved"]) == ("L", True)
    assert done.result["messages"][-1]["content"] == "Shipped shirt in size L"
