"""Agent bindings when the worker running them is SIGKILLed inside a tool (issue 20 item 3).

One worker process runs a turn per case, each held inside its tool; it is killed once, and a new
worker takes over. An idempotent tool simply runs again, a side effect waits as ``unknown``
until ``resolve --outcome ran --result X`` and the model then sees X; either way the scripted
server answers each model step once. In the same worker, a turn of a long thread is killed after
its summary was answered (docs/agents.md, "Long threads"): the summary is never asked again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.agents.conftest import AgentsWorker, WorkerProcess, head_in, tool_runs
from tests.helpers.agent_records import bodies
from tests.helpers.chat_server import ChatServer, summarizes
from tests.helpers.cli import run_cli
from tests.helpers.model_agents import (
    OPENAI_AGENT,
    PYDANTIC_AGENT,
    REMEMBERING_AGENT,
    all_bindings,
)
from tests.helpers.polling import eventually
from threadwarden.bindings import SUMMARY
from threadwarden.client.client import ThreadwardenClient

SPEC = "tests.helpers.model_agents:bindings"


AGENTS = {"pa": PYDANTIC_AGENT, "oa": OPENAI_AGENT}
CENTS = {"pa": 11, "oa": 22}


def _asked(server: ChatServer, prompt: str) -> int:
    """How many model requests the turn that began with ``prompt`` sent."""
    return sum(
        1
        for body in server.requests
        if any(m["role"] == "user" and m.get("content") == prompt for m in body["messages"])
    )


def _long(turn: int) -> str:
    """A long thread's turn: about 400 characters."""
    return f"#{turn} " + "x" * 396


def _prompt(tool: str, agent: str) -> str:
    """A turn that calls ``tool``, with arguments of its own (the log tells the turns apart)."""
    if tool == "lookup":
        return f'call lookup {{"q": "{agent}"}}'
    return f'call charge {{"cents": {CENTS[agent]}}}'


async def test_agents_worker_killed_inside_tools_replays_idempotent_and_waits_on_side_effects(
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    tools: Path,
    worker_processes: WorkerProcess,
    monkeypatch: pytest.MonkeyPatch,
    cli_env: None,
    ids: str,
) -> None:
    monkeypatch.setenv("TW_TEST_HOLD", "lookup,charge")
    long = f"{ids}-long"
    async with worker_processes("w1", SPEC) as first:
        for turn in range(2):  # within the memory budget
            done = await client.submit(long, agent_id=REMEMBERING_AGENT, input=_long(turn))
            assert (await client.result(done.submission_id, timeout=60)).outcome == "completed"
        server.hold_after_summary = True  # the request after the next summary never answers
        summarized = await client.submit(long, agent_id=REMEMBERING_AGENT, input=_long(2))
        await eventually(
            lambda: asyncio.sleep(0, server.held),
            lambda held: held == 1,
            what="the long thread's request after its summary held",
        )
        receipts = {
            (short, tool): await client.submit(
                f"{ids}-{short}-{tool}", agent_id=agent, input=_prompt(tool, short)
            )
            for short, agent in AGENTS.items()
            for tool in ("lookup", "charge")
        }
        await eventually(
            lambda: asyncio.sleep(0, [tool_runs(tools, t) for t in ("lookup", "charge")]),
            lambda runs: runs == [2, 2],
            what="every turn inside its tool in the first worker",
        )
        first.kill()  # SIGKILL: no cleanup, the claims lapse
        await first.wait()
    summaries = [body for body in server.requests if summarizes(body)]
    async with agents_worker(*all_bindings(server.url)):
        after = await client.result(summarized.submission_id, timeout=60)
        assert after.outcome == "completed"
        assert [body for body in server.requests if summarizes(body)] == summaries
        assert len(summaries) == 1 and len(bodies(await client.records(long), SUMMARY)) == 1
        for short in AGENTS:
            replayed = await client.result(receipts[short, "lookup"].submission_id, timeout=60)
            assert (replayed.outcome, replayed.result) == (
                "completed",
                f"final: order {short} shipped",
            )
            head = await head_in(client, f"{ids}-{short}-charge", "unknown")
            assert head.waiting_for == "unknown-resolution"
            by_hand = ["--outcome", "ran", "--result", json.dumps(f"charged {short} by hand")]
            effect = receipts[short, "charge"].submission_id
            assert await run_cli("resolve", effect, *by_hand, "--json") == 0
            resolved = await client.result(effect, timeout=30)
            assert (resolved.outcome, resolved.result) == (
                "completed",
                f"final: charged {short} by hand",
            )
    assert tool_runs(tools, "lookup") == 4  # idempotent: simply run again
    assert tool_runs(tools, "charge") == 2  # a side effect is never run again by itself
    for short in AGENTS:  # each model step asked once: one before the tool, one after
        assert (
            _asked(server, _prompt("lookup", short)),
            _asked(server, _prompt("charge", short)),
        ) == (2, 2)
