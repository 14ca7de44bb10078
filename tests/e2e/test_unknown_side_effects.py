"""Unknown side effects end to end (issue 4 §3 and §6; brief scenarios 4 and 7 for ``unknown``).

How the crash is made: a worker *process* (``threadwarden worker --bindings`` this module's
`CRASHING_WORKER_BINDINGS`) runs a binding whose side-effecting ``charge`` tool marks a file and
then blocks on an `asyncio.Event` nobody sets, so the tool call is prepared (its ``tool-call``
record committed) but has no result. The test then kills that process with SIGKILL. An
in-process stop would not do: stopping a worker cancels the attempt, and a cancelled attempt
releases its claim (``ready``) instead of leaving a lapsed lease, so recovery would never see it.
After the kill the lease lapses, and a worker started in the test (same agent id and digest, its
tool counting its calls) runs recovery: the head becomes ``unknown``, the host goes quiet, and
nothing re-runs the tool until an operator resolves it with the CLI. A call that carries an
``idempotency_key`` is safe to repeat, so recovery makes it ``ready`` and it simply runs again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import converged, recorded_once, settled, submission_rows
from tests.helpers.cli import run_cli
from tests.helpers.idle import woken_at_rest
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers, with_bindings
from threadwarden import AttemptContext, Binding, Completed, Outcome
from threadwarden.client.client import ThreadwardenClient
from threadwarden.views import HostStatus

AGENT, DIGEST = "charger", "charger-v1"
ROOT = Path(__file__).resolve().parents[2]
OPERATOR_RESULT = {"charged": 5, "by": "operator"}


def charger(run: Any) -> Binding:
    """Say, charge (a side effect, idempotent only when the input names a key), say, complete."""

    async def handle(context: AttemptContext) -> Outcome:
        await context.append("message", {"text": "charging"})
        result = await context.tool(
            "charge",
            {"amount": 5, "marker": context.input["marker"]},
            run,
            side_effect=True,
            idempotency_key=context.input.get("key"),
        )
        await context.append("message", {"text": "charged"})
        return Completed({"charge": result})

    return Binding(AGENT, DIGEST, handle)


async def mark_and_hang(args: dict[str, Any]) -> Any:
    """The crashing worker's tool: it started (the marker says so) and never returns."""
    with open(args["marker"], "a") as marker:
        marker.write("charged\n")
    await asyncio.Event().wait()


CRASHING_WORKER_BINDINGS = [charger(mark_and_hang)]
"""Loaded by the worker process this module starts and kills."""


class CountingTool:
    """The surviving worker's tool: counts its runs and returns the worker's result."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, args: dict[str, Any]) -> Any:
        self.calls += 1
        return {"charged": args["amount"], "by": "worker"}


def runs_in_killed_worker(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


async def crash_mid_charge(
    workers: Workers,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    thread: str,
    **extra: Any,
) -> tuple[str, Path]:
    """Admit a charge, let the worker process prepare and start the tool, SIGKILL it there."""
    marker = workers.folder / "charges"

    async def started() -> int:
        return runs_in_killed_worker(marker)

    bindings = f"{__name__}:CRASHING_WORKER_BINDINGS"
    async with workers.process("crashing", bindings=bindings) as process:
        receipt = await client.submit(
            thread, agent_id=AGENT, input={"marker": str(marker), **extra}
        )
        await eventually(
            started,
            lambda runs: runs == 1,
            timeout_s=60,
            what="the charge started in the worker process",
        )
        process.kill()
        await process.wait()
    [row] = await submission_rows(pool, thread)
    assert (row["state"], row["attempts"]) == ("running", 1)
    assert row["lease_expires_at"] is not None  # nobody released it: the lease must lapse
    kinds = [r["kind"] for r in await client.records(thread)]
    assert kinds == ["message", "tool-call"]  # prepared, no result
    return receipt.submission_id, marker


async def quiet_and_unknown(client: ThreadwardenClient, thread: str) -> HostStatus:
    """Wait until the head waits for an operator and the host has gone quiet."""
    status = await eventually(
        lambda: client.thread_status(thread),
        lambda s: s.submissions[0].state == "unknown",
        timeout_s=60,
        what="head marked unknown",
    )
    [head] = status.submissions
    # Recovery marked it: no attempt claimed it again (that would count a second attempt).
    assert (head.waiting_for, head.attempts) == ("unknown-resolution", 1)
    return await eventually(
        lambda: client.host_status(thread),
        lambda h: h.processed == h.dirty and h.alarm_at is None,
        what="host quiet with an unknown head",
    )


RESOLUTIONS = {
    "ran": ["--outcome", "ran", "--result", json.dumps(OPERATOR_RESULT)],
    "not-run": ["--outcome", "not-run"],
    "fail": ["--outcome", "fail"],
}


@pytest.mark.parametrize("resolution", list(RESOLUTIONS))
@pytest.mark.usefixtures("cli_env")
async def test_scenario_04_killed_side_effect_is_unknown_until_resolved(
    resolution: str,
    workers: Workers,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    submission_id, marker = await crash_mid_charge(workers, client, pool, ids)
    tool = CountingTool()
    async with workers.running(with_bindings(charger(tool.run))):
        quiet = await quiet_and_unknown(client, ids)
        assert quiet.nonterminal == 1 and quiet.retry is None
        waiting = await client.records(ids)

        # Scenario 7: more wakes on the unknown lane change nothing and replay nothing.
        await woken_at_rest(client, workers.connections, ids, quiet)
        assert await client.records(ids) == waiting
        assert tool.calls == 0 and runs_in_killed_worker(marker) == 1  # never replayed

        capsys.readouterr()
        assert await run_cli("resolve", submission_id, *RESOLUTIONS[resolution], "--json") == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["submission_id"] == submission_id and shown["changed"] is True
        outcome = "failed" if resolution == "fail" else "completed"
        records = await recorded_once(client, ids, [outcome])
        await converged(client, ids)

    kinds = [r["kind"] for r in records]
    settlement = records[-1]["body"]
    assert runs_in_killed_worker(marker) == 1
    if resolution == "ran":
        assert shown["state"] == "input-applied"
        assert tool.calls == 0  # the operator's result stands in for the run
        assert kinds == ["message", "tool-call", "tool-result", "message", "settlement"]
        assert records[2]["body"] == {
            "tool": "charge",
            "result": OPERATOR_RESULT,
            "resolved_by": "operator",
        }
        assert settlement["result"] == {"charge": OPERATOR_RESULT}
    elif resolution == "not-run":
        assert shown["state"] == "input-applied"
        assert tool.calls == 1  # it did not run, so it runs now, once
        assert kinds == [
            "message",
            "tool-call",
            "tool-resolution",
            "tool-result",
            "message",
            "settlement",
        ]
        assert records[2]["body"] == {"tool": "charge", "outcome": "not-run"}
        worker_result = {"charged": 5, "by": "worker"}
        assert records[3]["body"] == {"tool": "charge", "result": worker_result}
        assert settlement["result"] == {"charge": worker_result}
    else:
        assert (shown["state"], shown["outcome"]) == ("settled", "failed")
        assert tool.calls == 0
        assert kinds == ["message", "tool-call", "tool-resolution", "settlement"]
        assert "charge" in settlement["reason"]
        assert settlement["outcome"] == "failed"
    assert [r["body"]["text"] for r in records if r["kind"] == "message"] == (
        ["charging"] if resolution == "fail" else ["charging", "charged"]
    )


@pytest.mark.usefixtures("cli_env", "worker")
async def test_resolve_of_a_submission_that_is_not_unknown_exits_2(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="scripted", input=[{"say": "plain"}])
    await settled(client, ids, 1)
    before = await client.records(ids)
    capsys.readouterr()
    assert await run_cli("resolve", receipt.submission_id, "--outcome", "not-run") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and receipt.submission_id in err
    assert await client.records(ids) == before


async def test_killed_side_effect_with_an_idempotency_key_runs_again(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    submission_id, marker = await crash_mid_charge(workers, client, pool, ids, key="charge-1")
    tool = CountingTool()
    async with workers.running(with_bindings(charger(tool.run))):
        records = await recorded_once(client, ids, ["completed"])
        await converged(client, ids)

    [head] = (await client.thread_status(ids)).submissions
    # Recovery made it ready (not unknown) and a second attempt ran the tool again by itself.
    assert (head.attempts, head.waiting_for) == (2, None)
    assert runs_in_killed_worker(marker) == 1 and tool.calls == 1
    assert [r["kind"] for r in records] == [
        "message",
        "tool-call",
        "tool-result",
        "message",
        "settlement",
    ]
    assert records[1]["body"]["idempotency_key"] == "charge-1"
    assert records[2]["body"] == {"tool": "charge", "result": {"charged": 5, "by": "worker"}}
    assert all(r["submission_id"] == submission_id for r in records)
