"""examples/agents runs as its README says, offline: its bindings load with ``--bindings
support:bindings`` from its folder, and the CLI drives both agents through a lookup, a second
turn and an approved refund."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import head_in
from tests.helpers.cli import run_cli
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import Failpoints
from threadwarden.worker.loading import load_registry
from threadwarden.worker.runtime import Connections, running_worker
from threadwarden.worker.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agents"


async def _submit(capsys: pytest.CaptureFixture[str], thread: str, agent: str, text: str) -> str:
    capsys.readouterr()
    assert (
        await run_cli("submit", thread, "--agent", agent, "--input", json.dumps(text), "--json")
        == 0
    )
    receipt: dict[str, Any] = json.loads(capsys.readouterr().out)
    return str(receipt["submission_id"])


async def test_the_agents_example_runs_both_frameworks_from_the_cli(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    failpoints: Failpoints,
    cli_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(EXAMPLE)
    for name in ("support", "offline"):  # imported from this folder, as the worker would
        monkeypatch.delitem(sys.modules, name, raising=False)
    registry = load_registry("support:bindings")
    assert {"support", "billing"} <= set(registry.agent_ids())
    async with running_worker(settings, connections, registry, failpoints=failpoints):
        first = await _submit(capsys, ids, "support", "Where is order 42?")
        assert (await client.result(first, timeout=30)).result == (
            "Done: order 42 shipped on Monday"
        )
        refund = await _submit(capsys, ids, "support", "Refund order 42 please")
        assert (await head_in(client, ids, "suspended")).waiting_for == "approval"
        assert await run_cli("approve", refund) == 0
        assert (await client.result(refund, timeout=30)).result == (
            "Done: refunded 500 cents on order 42"
        )
        billing = await _submit(capsys, f"{ids}b", "billing", "Refund invoice 7")
        await head_in(client, f"{ids}b", "suspended")
        assert await run_cli("deny", billing, "--reason", "paid by card") == 0
        denied = await client.result(billing, timeout=30)
    assert denied.result == "Done: The operator denied the call to refund: paid by card"
    for name in ("support", "offline"):
        sys.modules.pop(name, None)


async def test_the_agents_example_runs_the_langgraph_graph_from_the_cli(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    failpoints: Failpoints,
    cli_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    monkeypatch.chdir(EXAMPLE)
    monkeypatch.delitem(sys.modules, "orders", raising=False)
    registry = load_registry("orders:bindings")
    async with running_worker(settings, connections, registry, failpoints=failpoints):
        capsys.readouterr()
        assert (
            await run_cli("submit", ids, "--agent", "orders", "--input", '{"item": "shirt"}') == 0
        )
        order = (await head_in(client, ids, "suspended")).submission_id
        assert (await client.thread_status(ids)).submissions[-1].waiting_for == "input"
        assert await run_cli("answer", order, "--value", '"XL"') == 2  # not one of the sizes
        assert await run_cli("answer", order, "--value", '"L"') == 0
        done = await client.result(order, timeout=30)
    assert (done.result["size"], done.result["reserved"]) == ("L", True)
    assert done.result["messages"][-1]["content"] == "Shipped shirt in size L"
    sys.modules.pop("orders", None)
