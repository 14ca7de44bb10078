"""Agent bindings when the worker running them is SIGKILLed inside a tool (issue 20 item 3).

One worker process runs a turn per case, each held inside its tool; it is killed once, and a new
worker takes over. An idempotent tool simply runs again, a side effect waits as ``unknown``
until ``resolve --outcome ran --result X`` and the model then sees X; either way the scripted
server answers each model step once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.agents.conftest import AgentsWorker, head_in, tool_runs
from tests.helpers.chat_server import ChatServer
from tests.helpers.cli import run_cli
from tests.helpers.model_agents import PYDANTIC_AGENT, pydantic_ai_bindings
from tests.helpers.polling import eventually
from tests.helpers.processes import worker_process
from threadwarden.worker.client import ThreadwardenClient
from threadwarden.worker.runtime import Connections
from threadwarden.worker.settings import Settings

SPEC = "tests.helpers.model_agents:bindings"


def _asked(server: ChatServer, prompt: str) -> int:
    """How many model requests the turn that began with ``prompt`` sent."""
    return sum(
        1
        for body in server.requests
        if any(m["role"] == "user" and m.get("content") == prompt for m in body["messages"])
    )


async def test_agents_worker_killed_inside_tools_replays_idempotent_and_waits_on_side_effects(
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    tools: Path,
    settings: Settings,
    connections: Connections,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    cli_env: None,
    ids: str,
) -> None:
    monkeypatch.setenv("TW_TEST_HOLD", "lookup,charge")
    lookup, charge = 'call lookup {"q": "9"}', 'call charge {"cents": 5}'
    async with worker_process(settings, connections, tmp_path / "w1", bindings=SPEC) as first:
        idempotent = await client.submit(f"{ids}-pa-i", agent_id=PYDANTIC_AGENT, input=lookup)
        effect = await client.submit(f"{ids}-pa-s", agent_id=PYDANTIC_AGENT, input=charge)
        await eventually(
            lambda: asyncio.sleep(0, [tool_runs(tools, t) for t in ("lookup", "charge")]),
            lambda runs: runs == [1, 1],
            what="both tools running in the first worker",
        )
        first.kill()  # SIGKILL: no cleanup, the claims lapse
        await first.wait()
    async with agents_worker(*pydantic_ai_bindings(server.url)):
        replayed = await client.result(idempotent.submission_id, timeout=60)
        head = await head_in(client, f"{ids}-pa-s", "unknown")
        assert head.waiting_for == "unknown-resolution"
        outcome = ["--outcome", "ran", "--result", json.dumps("charged 5 by hand")]
        assert await run_cli("resolve", effect.submission_id, *outcome, "--json") == 0
        resolved = await client.result(effect.submission_id, timeout=30)
    assert (replayed.outcome, replayed.result) == ("completed", "final: order 9 shipped")
    assert (resolved.outcome, resolved.result) == ("completed", "final: charged 5 by hand")
    assert tool_runs(tools, "lookup") == 2  # idempotent: simply run again
    assert tool_runs(tools, "charge") == 1  # a side effect is never run again by itself
    assert (_asked(server, lookup), _asked(server, charge)) == (2, 2)  # each step asked once
