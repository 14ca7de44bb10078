"""A real `threadwarden worker` process killed with SIGKILL in the middle of an attempt.

The only worker at first is a subprocess. Once it dies, its lease lapses, the head activity's
heartbeat times out, and a second worker's pass recovers the head: a lapsed attempt with no
unsafe effect is reclaimed at a higher epoch and replays its journal; one killed inside a
side-effecting tool call becomes ``unknown`` and waits for an operator. Either way the
submission settles exactly once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers.checks import assert_settled_once, converged, settled
from tests.helpers.polling import eventually
from tests.helpers.slow_tool import AGENT_ID as SLOW_TOOL_AGENT
from tests.helpers.slow_tool import slow_tool_binding
from tests.helpers.workers import Workers, with_bindings
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.views import HostStatus, ThreadStatus

SLEEP_MS = 4_000
"""The window in which a test kills the worker, once it saw the step before it committed (a
sleep commits nothing, so the reclaimed attempt sleeps it again: it costs each test twice)."""
SLEEPY = [{"say": "before"}, {"sleep_ms": SLEEP_MS}, {"say": "after"}]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """No inline heads: these heads sleep for seconds inside one attempt, which an inline
    attempt would hand over to the agent's queue after its budget (`inline_budget_ms`): the
    attempts counted here are the killed one and its reclaim."""
    return settings.model_copy(update={"inline_budget_ms": 0})


async def _kill(process: asyncio.subprocess.Process) -> None:
    process.kill()  # SIGKILL: no cleanup, no release of the claim
    await asyncio.wait_for(process.wait(), timeout=10)


async def _running_after(client: ThreadwardenClient, thread: str, kind: str, **body: Any) -> None:
    """Wait until the head runs and has committed a ``kind`` record whose body has ``body``."""

    async def probe() -> tuple[str, list[dict[str, Any]]]:
        status = await client.thread_status(thread)
        return status.submissions[0].state, await client.records(thread)

    def reached(seen: tuple[str, list[dict[str, Any]]]) -> bool:
        state, records = seen
        return state == "running" and any(
            r["kind"] == kind and all(r["body"].get(k) == v for k, v in body.items())
            for r in records
        )

    await eventually(probe, reached, timeout_s=30, what=f"{thread} running after its {kind}")


async def _settled_watching(
    client: ThreadwardenClient, thread: str, seen: set[str]
) -> ThreadStatus:
    """Wait until the thread's one submission settled, noting every state it passed through."""

    async def probe() -> ThreadStatus:
        status = await client.thread_status(thread)
        seen.add(status.submissions[0].state)
        return status

    return await eventually(
        probe, lambda s: s.submissions[0].state == "settled", timeout_s=40, what="settled"
    )


async def _killed_while_running(
    workers: Workers, client: ThreadwardenClient, thread: str, steps: Any, kind: str, **body: Any
) -> str:
    """Run the scripted ``steps`` on a worker process and SIGKILL it once the head committed a
    ``kind`` record whose body has ``body``; the submission's id."""
    async with workers.process("first") as first:
        receipt = await client.submit(thread, agent_id="scripted", input=steps)
        await _running_after(client, thread, kind, **body)
        await _kill(first)
    return receipt.submission_id


async def _recovered(
    client: ThreadwardenClient, thread: str
) -> tuple[ThreadStatus, HostStatus, set[str]]:
    """On the worker that took over: the thread's one submission settled once and its host
    converged; with every state the submission passed through meanwhile."""
    seen: set[str] = set()
    await _settled_watching(client, thread, seen)
    status = await assert_settled_once(client, thread, 1)
    host = await converged(client, thread)
    return status, host, seen


def _messages(records: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(r["body"]["text"], r["epoch"]) for r in records if r["kind"] == "message"]


async def test_worker_killed_mid_attempt_is_reclaimed_and_settles_once(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    submission_id = await _killed_while_running(
        workers, client, ids, SLEEPY, "message", text="before"
    )
    async with workers.process("second"):
        status, host, seen = await _recovered(client, ids)

    view = status.submissions[0]
    assert (view.submission_id, view.outcome) == (submission_id, "completed")
    assert (view.attempts, view.epoch) == (2, 2)  # reclaimed once, at a higher epoch
    records = await client.records(ids)
    # "before" was committed by the killed attempt and replayed, not repeated.
    assert _messages(records) == [("before", 1), ("after", 2)]
    settlement = [r for r in records if r["kind"] == "settlement"]
    assert [(s["body"]["outcome"], s["epoch"]) for s in settlement] == [("completed", 2)]
    assert settlement[0]["body"]["result"] == {"said": ["before", "after"]}
    assert "unknown" not in seen
    assert host.processed == host.dirty and host.alarm_at is None


async def test_worker_killed_after_a_side_effect_replays_its_recorded_result(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    steps = [
        {"tool": "charge", "args": {"cents": 5}, "side_effect": True},
        {"sleep_ms": SLEEP_MS},
        {"say": "after"},
    ]
    await _killed_while_running(workers, client, ids, steps, "tool-result", tool="charge")
    async with workers.running():
        status, host, seen = await _recovered(client, ids)

    # The call has its result, so it is not unknown: the re-run returns the recorded result.
    assert "unknown" not in seen
    view = status.submissions[0]
    # Reclaimed at a higher epoch (a loaded machine may cost the re-run another attempt).
    assert view.outcome == "completed" and view.attempts == view.epoch >= 2
    records = await client.records(ids)
    tool = [(r["kind"], r["epoch"]) for r in records if r["kind"].startswith("tool-")]
    assert tool == [("tool-call", 1), ("tool-result", 1)]
    assert [(said, epoch >= 2) for said, epoch in _messages(records)] == [("after", True)]
    assert host.processed == host.dirty and host.alarm_at is None


RESOLUTIONS: dict[str, tuple[Any, str, int, int]] = {
    # outcome: (result, settled outcome, attempts, real tool runs)
    "ran": ({"charged": 5, "by": "operator"}, "completed", 2, 1),
    "not-run": (None, "completed", 2, 2),
    "fail": (None, "failed", 1, 1),
}


@pytest.mark.parametrize("outcome", RESOLUTIONS)
async def test_worker_killed_inside_a_side_effect_waits_unknown_until_resolved(
    outcome: Any, workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    result, settled_as, attempts, runs = RESOLUTIONS[outcome]
    tool_runs = workers.folder / "charge-runs"
    charge = {"ledger": str(tool_runs), "cents": 5, "hold_s": 120}
    async with workers.process("first", bindings="tests.helpers.slow_tool:BINDING") as w:
        receipt = await client.submit(ids, agent_id=SLOW_TOOL_AGENT, input=charge)
        await _running_after(client, ids, "tool-call", tool="charge")

        async def started() -> bool:
            return tool_runs.exists()

        await eventually(started, bool, what="the tool started")
        await _kill(w)  # between the prepared call and its result
    async with workers.running(with_bindings(slow_tool_binding())):
        waiting = await eventually(
            lambda: client.thread_status(ids),
            lambda s: s.submissions[0].state == "unknown",
            timeout_s=40,
            what="the head marked unknown",
        )
        # A stable wait: acknowledged, alarm cleared, the tool never replayed on its own.
        quiet = await eventually(
            lambda: client.host_status(ids),
            lambda h: h.processed == h.dirty and h.alarm_at is None,
            what="host quiet while unknown",
        )
        assert quiet.nonterminal == 1
        assert waiting.submissions[0].waiting_for == "unknown-resolution"
        assert waiting.submissions[0].attempts == 1
        assert tool_runs.read_text().splitlines() == ["ran"]

        await client.resolve(receipt.submission_id, outcome, result)
        # "fail" settles in the operator's transaction, at the epoch its fence took (above the
        # claim's epoch that status reports), so only the attempt-settled cases fit the helper.
        status = await (settled if outcome == "fail" else assert_settled_once)(client, ids, 1)
        host = await converged(client, ids)

    view = status.submissions[0]
    assert (view.outcome, view.attempts) == (settled_as, attempts)
    assert len(tool_runs.read_text().splitlines()) == runs
    records = await client.records(ids)
    settlements = [r for r in records if r["kind"] == "settlement"]
    assert [s["body"]["outcome"] for s in settlements] == [settled_as]
    assert [r["epoch"] for r in records] == sorted(r["epoch"] for r in records)
    assert [r["kind"] for r in records if r["kind"] == "tool-call"] == ["tool-call"]
    said = [text for text, _ in _messages(records)]
    assert said == (["before"] if outcome == "fail" else ["before", "after"])
    if outcome != "fail":
        charged = records[-1]["body"]["result"]["charge"]
        assert charged == (result if outcome == "ran" else {"charged": 5, "run": 2})
    assert host.processed == host.dirty and host.alarm_at is None
