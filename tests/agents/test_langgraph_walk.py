"""Issue 21's LangGraph acceptance, driven only by the CLI: a `threadwarden worker --bindings
tests.helpers.graph_agents:bindings` process runs the ``shop`` graph (``reserve`` →
``ask_size``'s ``interrupt`` → ``ship``). The submission waits for input with the question in
the inbox; the answer completes it with the final state; ``reserve`` ran once; the same answer
again changes nothing, another conflicts, answering a settled submission is refused; the next
submission starts from the state the first left. A worker SIGKILLed inside ``ship`` resumes
from the ledger's checkpoint without running ``reserve`` again, and a `ToolNode`'s side effect
cut off by a kill waits as ``unknown`` until ``resolve`` gives its result."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import WorkerProcess, tool_runs
from tests.helpers.cli import Cli, json_error, run_cli
from tests.helpers.graph_agents import SHOP, TILL
from tests.helpers.polling import eventually

SPEC = "tests.helpers.graph_agents:bindings"
QUESTION = {"question": "Which size of shirt?", "choices": ["S", "M", "L"]}


async def answer(capsys: pytest.CaptureFixture[str], submission: str, value: str) -> Any:
    """`answer SUB --value V --json`: its exit code and its JSON (stdout, else the error)."""
    capsys.readouterr()
    code = await run_cli("answer", submission, "--value", value, "--json")
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else json_error(err))


async def inbox_question(cli: Cli, submission: str) -> Any:
    entries = json.loads(await cli("inbox", "--json"))["entries"]
    [entry] = [e for e in entries if e["submission_id"] == submission]
    assert entry["waiting_for"] == "input"
    return entry["request"]["payload"]


async def test_langgraph_cli_walk_interrupt_answer_idempotence_conflict_and_carried_state(
    runs: Path,
    worker_processes: WorkerProcess,
    cli: Cli,
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    async with worker_processes("worker", SPEC):
        order = await cli.submit(ids, SHOP, {"item": "shirt"})
        head = await cli.waiting(ids, "input")
        assert (head["submission_id"], head["state"]) == (order, "suspended")
        assert await inbox_question(cli, order) == QUESTION

        code, answered = await answer(capsys, order, '"L"')
        assert (code, answered["changed"]) == (0, True)
        settled = await cli.settlement(ids, order)
        assert settled["outcome"] == "completed"
        assert settled["result"] == {
            "item": "shirt",
            "reserved": 1,
            "size": "L",
            "shipped": "shirt in L",
        }
        assert (tool_runs(runs, "reserve"), tool_runs(runs, "ship")) == (1, 1)

        # The same answer again changes nothing; another conflicts; a settled one is refused.
        code, again = await answer(capsys, order, '"L"')
        assert (code, again["changed"]) == (0, False)
        code, conflict = await answer(capsys, order, '"M"')
        assert (code, conflict["code"]) == (2, "decision_conflict")
        done = await cli.submit(f"{ids}-ask-nothing", "scripted", [{"say": "hi"}])
        await cli.settlement(f"{ids}-ask-nothing", done)
        code, not_waiting = await answer(capsys, done, '"L"')
        assert (code, not_waiting["code"]) == (2, "not_waiting")

        # The thread's next submission starts from the state the first one left.
        second = await cli.submit(ids, SHOP, {"item": "socks"})
        await cli.waiting(ids, "input")
        await answer(capsys, second, '"S"')
        result = (await cli.settlement(ids, second))["result"]
        assert result == {"item": "socks", "reserved": 2, "size": "S", "shipped": "socks in S"}

        # Node updates are records, in the order the nodes ran.
        out = await cli("watch", ids, "--no-follow", "--json")
        updates = [
            json.loads(line)["body"]
            for line in out.splitlines()
            if line.strip() and json.loads(line)["kind"] == "graph-update"
        ]
        assert [u["node"] for u in updates][:3] == ["reserve", "ask_size", "ship"]
        assert updates[2]["update"] == {"shipped": "shirt in L"}


async def test_langgraph_worker_killed_in_a_node_resumes_from_the_checkpoint_and_tool_effects(
    runs: Path,
    worker_processes: WorkerProcess,
    cli: Cli,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    ids: str,
) -> None:
    held = ["ship-coat", "lookup-7", "charge-500", "model-node-call-lookup-9"]
    monkeypatch.setenv("TW_TEST_HOLD", ",".join(held))
    shop, paid, charged, asked = ids, f"{ids}-lookup", f"{ids}-charge", f"{ids}-model"
    async with worker_processes("w1", SPEC) as first:
        order = await cli.submit(shop, SHOP, {"item": "coat"})
        await cli.waiting(shop, "input")
        await answer(capsys, order, '"M"')
        looked = await cli.submit(paid, TILL, "call lookup 7")
        charge = await cli.submit(charged, TILL, "call lookup 8 charge 500")
        answered = await cli.submit(asked, TILL, "call lookup 9")
        await eventually(
            lambda: asyncio.sleep(0, [(runs / f"{name}.held").exists() for name in held]),
            all,
            what="ship, lookup, charge and a model node held in the first worker",
        )
        first.kill()  # SIGKILL: no cleanup, the claims lapse
        await first.wait()
    async with worker_processes("w2", SPEC):
        settled = await cli.settlement(shop, order)
        assert settled["result"]["shipped"] == "coat in M"
        assert settled["result"]["reserved"] == 1
        assert (await cli.settlement(paid, looked))["result"]["messages"][-1]["content"] == (
            "final: order 7 is paid"
        )
        head = await cli.waiting(charged, "unknown-resolution")
        assert head["submission_id"] == charge
        await cli("resolve", charge, "--outcome", "ran", "--result", '"charged by hand"')
        final = (await cli.settlement(charged, charge))["result"]["messages"][-1]["content"]
        assert final == "final: order 8 is paid; charged by hand"
        final = (await cli.settlement(asked, answered))["result"]["messages"][-1]["content"]
        assert final == "final: order 9 is paid"
    # Nodes done before the kill never ran again; the node and tools cut off did (an
    # idempotent tool by itself), a side effect never did by itself, the tool call the
    # charge's turn finished before it (its journal step) was not made again, and the model
    # node cut off after its request got the recorded response: 2 + 3 + 2 requests, once each.
    counted = [tool_runs(runs, name) for name in ("reserve", "ship", "lookup", "charge", "model")]
    assert counted == [1, 2, 4, 1, 7]
