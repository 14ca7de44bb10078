"""Issue 20's acceptance walk, driven only by the CLI: a `threadwarden worker --bindings
tests.helpers.model_agents:bindings` process runs both frameworks' agents against the scripted
chat server, and `submit`, `status`, `approve`, `deny` and `watch --no-follow --json` do the
rest. For each framework: an approval, a denial, a second turn carrying the first, 503s past
the client's retries, a 400 (a worker SIGKILLed inside an idempotent tool or a side effect,
resolved with `resolve`: test_killed_workers.py). `waiting_for` shows each wait, the settlement
record carries the model's final text, and the server's requests show no model step asked
twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.conftest import WorkerProcess, tool_runs
from tests.helpers.chat_server import ChatServer
from tests.helpers.cli import Cli
from tests.helpers.model_agents import CLIENT_RETRIES, OPENAI_AGENT, PYDANTIC_AGENT

SPEC = "tests.helpers.model_agents:bindings"
REFUND = 'call refund {"cents": 500}'


@pytest.mark.parametrize("agent", [PYDANTIC_AGENT, OPENAI_AGENT])
async def test_agents_cli_walk_approval_denial_memory_503_and_400(
    agent: str,
    server: ChatServer,
    tools: Path,
    worker_processes: WorkerProcess,
    cli: Cli,
    ids: str,
) -> None:
    async with worker_processes("worker", SPEC):
        # An approval: the refund waits in the inbox, runs once when approved.
        refund = await cli.submit(ids, agent, REFUND)
        head = await cli.waiting(ids, "approval")
        assert (head["submission_id"], head["state"]) == (refund, "suspended")
        await cli("approve", refund)
        settled = await cli.settlement(ids, refund)
        assert (settled["outcome"], settled["result"]) == ("completed", "final: refunded 500")
        assert tool_runs(tools, "refund") == 1
        assert len(server.requests) == 2  # the step before the approval was replayed

        # A second turn: its request carries the first turn.
        thanks = await cli.submit(ids, agent, "thanks")
        assert (await cli.settlement(ids, thanks))["result"] == "echo: thanks"
        assert len(server.requests) == 3
        sent = [(m["role"], m.get("content")) for m in server.requests[2]["messages"]]
        assert ("user", REFUND) in sent and sent[-1] == ("user", "thanks")

        # A denial: the model hears the operator's reason and the turn completes.
        denied_thread = f"{ids}-deny"
        denied = await cli.submit(denied_thread, agent, REFUND)
        await cli.waiting(denied_thread, "approval")
        await cli("deny", denied, "--reason", "refunds need a manager")
        reason = "The operator denied the call to refund: refunds need a manager"
        assert (await cli.settlement(denied_thread, denied))["result"] == f"final: {reason}"
        assert tool_runs(tools, "refund") == 1
        assert len(server.requests) == 5

        # 503s past the client's own retries: the pass fails, its durable retry completes it.
        server.fail_next(503, "overloaded", times=1 + CLIENT_RETRIES)
        busy_thread = f"{ids}-503"
        busy = await cli.submit(busy_thread, agent, "hello")
        settled = await cli.settlement(busy_thread, busy)
        assert (settled["outcome"], settled["result"]) == ("completed", "echo: hello")
        assert (await cli.head(busy_thread))["attempts"] == 2

        # A 400: settled failed, with the reason.
        server.fail_next(400, "context too long")
        bad_thread = f"{ids}-400"
        bad = await cli.submit(bad_thread, agent, "hello")
        settled = await cli.settlement(bad_thread, bad)
        assert settled["outcome"] == "failed"
        assert "rejected the request: HTTP 400" in settled["reason"]
        assert "context too long" in settled["reason"]
    # Every model step asked once (the failed requests aside).
    assert server.statuses.count(200) == 2 + 1 + 2 + 1
