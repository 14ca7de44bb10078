"""Subagent children end to end (docs/protocol.md "Subagent children", issue 13): a binding
delegates with ``ctx.call_agent``, the parent waits without a claim and resumes, exactly once, on a
real Temporal server and Postgres.

Named ``test_children_scenario_NN_…`` where a test proves one of the scenarios of docs/protocol.md
(docs/protocol.md maps them all).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from tests.helpers import child_agents
from tests.helpers.checks import assert_settled_once, converged
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers, with_bindings
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import FailpointError, Failpoints
from threadwarden.ledger.child_establishment import child_thread_id_for
from threadwarden.ledger.operator import Operator
from threadwarden.views import OperatorResult, Receipt, ThreadStatus
from threadwarden.workflows.contracts import host_workflow_id


@pytest.fixture
async def family_worker(workers: Workers) -> AsyncIterator[None]:
    """A worker with both the planner and the helper (and the scripted binding)."""
    async with workers.running(with_bindings(*child_agents.BOTH)):
        yield


def helper(**work: Any) -> dict[str, Any]:
    """A planner's call to the helper agent (``answer``, ``fail``, ``approval``, ``spend``)."""
    return {"agent": "helper", "input": work}


def call(answer: Any) -> dict[str, Any]:
    return helper(answer=answer)


async def plan(
    client: ThreadwardenClient,
    thread: str,
    *calls: dict[str, Any],
    together: bool | None = None,
    **submit: Any,
) -> Receipt:
    """Submit the planner on ``thread`` with ``calls`` (``together``: awaited together, or each
    in turn)."""
    planned: dict[str, Any] = {"calls": list(calls)}
    if together is not None:
        planned["together"] = together
    return await client.submit(thread, agent_id="planner", input=planned, **submit)


async def records_of(client: ThreadwardenClient, thread: str, *kinds: str) -> list[dict[str, Any]]:
    return [r for r in await client.records(thread) if not kinds or r["kind"] in kinds]


async def child_rows(pool: asyncpg.Pool[Any], parent: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT submission_id, thread_id, state, outcome, parent_call_step, attempts"
        "  FROM threadwarden.submissions WHERE parent_submission_id = $1"
        " ORDER BY parent_call_step",
        parent,
    )
    return [dict(r) for r in rows]


async def waiting_for_children(client: ThreadwardenClient, thread: str) -> ThreadStatus:
    return await eventually(
        lambda: client.thread_status(thread),
        lambda s: bool(s.submissions) and s.submissions[0].state == "suspended",
        timeout_s=60,
        what=f"the parent on {thread} suspended",
    )


async def child_awaiting_approval(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], thread: str, parent: Receipt
) -> dict[str, Any]:
    """Wait until the parent on ``thread`` waits for its one child and the child for its
    approval; the child's row."""
    waiting = await waiting_for_children(client, thread)
    assert waiting.submissions[0].waiting_for == "child"
    [child] = await child_rows(pool, parent.submission_id)
    await eventually(
        lambda: client.thread_status(child["thread_id"]),
        lambda s: s.submissions[0].waiting_for == "approval",
        what="the child waiting for its approval",
    )
    return child


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_01_clean_run_one_child_one_join(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await plan(client, ids, call(42), idempotency_key="k")
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed", outcome
    [child] = await child_rows(pool, receipt.submission_id)
    assert child["thread_id"] == child_thread_id_for(receipt.submission_id, 1)
    assert (child["state"], child["outcome"], child["attempts"]) == ("settled", "completed", 1)
    assert outcome.result == {
        "children": [
            {
                "submission_id": child["submission_id"],
                "thread_id": child["thread_id"],
                "outcome": "completed",
                "result": {"answer": 42},
                "reason": None,
                "budget_consumed": None,  # the call reserved no budget
            }
        ]
    }
    kinds = [r["kind"] for r in await records_of(client, ids)]
    assert kinds == ["call-started", "children-awaited", "call-joined", "settlement"]
    child_kinds = [r["kind"] for r in await records_of(client, child["thread_id"])]
    assert child_kinds == ["lineage", "settlement"]  # lineage before the child's first turn
    await assert_settled_once(client, ids, 1)
    await assert_settled_once(client, child["thread_id"], 1)
    await converged(client, ids)
    await converged(client, child["thread_id"])


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_06_two_children_awaited_together_one_wait_one_join_each(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await plan(client, ids, call(1), call(2), together=True)
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert [c["result"] for c in outcome.result["children"]] == [{"answer": 1}, {"answer": 2}]
    children = await child_rows(pool, receipt.submission_id)
    assert [c["parent_call_step"] for c in children] == [1, 2]
    awaited = await records_of(client, ids, "children-awaited")
    # Both calls were waited for together: one wait listing both (unless both had settled
    # before the wait, which then writes none).
    assert len(awaited) <= 1, await records_of(client, ids)
    if awaited:
        assert awaited[0]["body"]["children"] == [c["submission_id"] for c in children], (
            await records_of(client, ids),
            children,
        )
    joined = await records_of(client, ids, "call-joined")
    assert [r["body"]["submission_id"] for r in joined] == [c["submission_id"] for c in children]
    await assert_settled_once(client, ids, 1)


@pytest.mark.usefixtures("family_worker")
async def test_children_a_failed_child_comes_back_as_a_failed_call_and_the_parent_goes_on(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await plan(client, ids, helper(fail="no data"), call(7), together=False)
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed"
    first, second = outcome.result["children"]
    assert (first["outcome"], first["reason"]) == ("failed", "no data")
    assert (second["outcome"], second["result"]) == ("completed", {"answer": 7})
    assert [c["outcome"] for c in await child_rows(pool, receipt.submission_id)] == [
        "failed",
        "completed",
    ]


CRASH_POINTS = [
    "attempt:call",  # before the establishment (nothing written)
    "attempt:call:after",  # after it committed, before the wait
    "attempt:call-wait",  # before the suspend
    "attempt:call-wait:after",  # after the suspend committed
    "attempt:call-join",  # before the join
    "attempt:call-join:after",  # after the join committed, before the parent settles
]


@pytest.mark.parametrize("point", CRASH_POINTS)
@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_02_13_a_fault_at_each_step_leaves_one_child_one_join(
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    failpoints: Failpoints,
    ids: str,
    point: str,
) -> None:
    """The fault fails the pass (nothing settles on it); the durable retry re-runs the parent,
    which finds its child by the call's linkage and joins it once; the child ran once."""
    failpoints.arm(point, times=1)
    receipt = await plan(client, ids, call(5))
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert failpoints.hits.get(point) == 1
    assert outcome.outcome == "completed", outcome
    [child] = await child_rows(pool, receipt.submission_id)
    assert (child["outcome"], child["attempts"]) == ("completed", 1)
    assert outcome.result["children"][0]["result"] == {"answer": 5}
    kinds = [r["kind"] for r in await records_of(client, ids)]
    assert kinds.count("call-started") == 1 and kinds.count("call-joined") == 1, kinds
    assert kinds[-1] == "settlement"
    markers = await pool.fetchval(
        "SELECT count(*) FROM threadwarden.child_settlements WHERE parent_submission_id = $1",
        receipt.submission_id,
    )
    assert markers == 1
    parent_row = await pool.fetchrow(
        "SELECT attempts FROM threadwarden.submissions WHERE submission_id = $1",
        receipt.submission_id,
    )
    assert (
        parent_row is not None and parent_row["attempts"] >= 2
    )  # the faulted attempt, then the one that joined
    await assert_settled_once(client, ids, 1)
    await assert_settled_once(client, child["thread_id"], 1)


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_09_parent_abort_aborts_its_child_awaiting_approval_joins(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await plan(client, ids, helper(approval="refund 40 EUR?"))
    child = await child_awaiting_approval(client, pool, ids, receipt)

    aborted = await client.abort(receipt.submission_id)
    assert aborted.changed and aborted.state == "input-applied"  # not settled: children first
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert (outcome.outcome, outcome.reason) == ("aborted", "aborted by an operator")
    [child] = await child_rows(pool, receipt.submission_id)
    assert (child["state"], child["outcome"]) == ("settled", "aborted")
    [joined] = await records_of(client, ids, "call-joined")
    assert (joined["body"]["submission_id"], joined["body"]["outcome"]) == (
        child["submission_id"],
        "aborted",
    )
    parent_settled, child_settled = [
        await pool.fetchval(
            "SELECT settled_at FROM threadwarden.submissions WHERE submission_id = $1", sid
        )
        for sid in (receipt.submission_id, child["submission_id"])
    ]
    assert child_settled <= parent_settled  # no parent settles before its children
    again = await client.abort(receipt.submission_id)
    assert not again.changed
    await assert_settled_once(client, ids, 1)
    await assert_settled_once(client, child["thread_id"], 1)


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_10_a_fault_after_the_child_abort_issues_no_second_abort(
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    failpoints: Failpoints,
    ids: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's abort asks its running child to abort (the intent is recorded), then its
    pass faults; the re-run finds the intent and asks nothing again."""
    asked: list[tuple[str, bool]] = []
    abort = Operator.abort

    async def counted(
        self: Operator, submission_id: str, *, operator: str | None = None
    ) -> OperatorResult:
        result = await abort(self, submission_id, operator=operator)
        asked.append((submission_id, result.changed))
        return result

    monkeypatch.setattr(Operator, "abort", counted)  # looked up on each call: counted from now
    slow = [{"sleep_ms": 4_000}, {"say": "too late"}]
    receipt = await plan(client, ids, {"agent": "scripted", "input": slow})
    [child] = await eventually(
        lambda: child_rows(pool, receipt.submission_id),
        lambda rows: len(rows) == 1 and rows[0]["state"] == "running",
        what="the child running",
    )
    failpoints.arm("attempt:child-abort:after", times=1)
    asked.clear()
    await client.abort(receipt.submission_id)
    outcome = await client.result(receipt.submission_id, timeout=60)
    failpoints.release_all()
    assert failpoints.hits.get("attempt:child-abort:after") == 1
    assert outcome.outcome == "aborted"
    to_child = [changed for sid, changed in asked if sid == child["submission_id"]]
    assert to_child.count(True) == 1, asked  # one abort command; a replay changes nothing
    [child] = await child_rows(pool, receipt.submission_id)
    assert child["outcome"] == "aborted"
    [joined] = await records_of(client, ids, "call-joined")
    assert joined["body"]["outcome"] == "aborted"


async def test_children_scenario_11_missing_child_binding_waits_until_a_worker_has_it(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    async with workers.running(with_bindings(*child_agents.PLANNER)):
        receipt = await plan(client, ids, call(11))
        await waiting_for_children(client, ids)
        [child] = await child_rows(pool, receipt.submission_id)
        host = await eventually(
            lambda: client.host_status(child["thread_id"]),
            lambda h: len(h.binding_retries) == 1,
            timeout_s=60,
            what="the child's head in binding retry",
        )
        assert host.binding_retries[0].submission_id == child["submission_id"]
        [view] = (await client.thread_status(child["thread_id"])).submissions
        assert (view.state, view.attempts) == ("ready", 0)  # pending, never run, never failed
        parent = (await client.thread_status(ids)).submissions[0]
        assert (parent.state, parent.waiting_for) == ("suspended", "child")

        helpers = f"{child_agents.__name__}:HELPER"
        async with workers.process("helper", bindings=helpers):
            outcome = await client.result(receipt.submission_id, timeout=90)
    assert outcome.outcome == "completed"
    assert outcome.result["children"][0]["result"] == {"answer": 11}
    [child] = await child_rows(pool, receipt.submission_id)
    assert (child["outcome"], child["attempts"]) == ("completed", 1)


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_08_child_host_gone_and_no_wake_the_parent_still_joins(
    client: ThreadwardenClient, temporal_client: Client, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """The child settles by an operator's decision taken straight on the ledger (no wake hint
    to anyone) after its host's workflow was terminated: the marker's durable alarm on the
    parent's host brings the parent's pass (through the sweeper), which joins."""
    receipt = await plan(client, ids, helper(approval="go?"))
    child = await child_awaiting_approval(client, pool, ids, receipt)
    await eventually(  # the parent's host is quiet: nothing else wakes it
        lambda: client.host_status(ids),
        lambda h: h.processed == h.dirty and h.alarm_at is None,
        what="the parent's host quiet",
    )
    handle = temporal_client.get_workflow_handle(host_workflow_id(child["thread_id"]))
    with contextlib.suppress(RPCError):  # an idle host's workflow may have ended already
        await handle.terminate("evicted")
    assert (await handle.describe()).status != WorkflowExecutionStatus.RUNNING
    operator = Operator(pool, minimum_alarm_delay_ms=50)
    denied = await operator.deny(child["submission_id"], "no")
    assert denied.parent_host_id == ids
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed"
    assert outcome.result["children"][0]["outcome"] == "failed"
    assert outcome.result["children"][0]["reason"] == "approval denied: no"


async def test_children_a_worker_killed_while_the_child_runs_one_child_one_join(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """SIGKILL of the only worker while the child's attempt runs (after its first committed
    step) and the parent waits: a second worker recovers the child's head, the child settles
    once, its marker wakes the parent, which joins once (the scripted ``call`` step)."""
    child_thread = f"{ids}-child"
    # No inline heads: the child sleeps 4 s in one attempt, which an inline attempt would hand
    # over to the agent's queue after its budget; the attempts counted are the killed one and
    # its reclaim.
    dispatched = workers.tuned(inline_budget_ms=0)
    # (The sleep is the window in which the worker is killed; the reclaim sleeps it again.)
    sleepy = [{"say": "before"}, {"sleep_ms": 4_000}, {"say": "after"}]
    script = [{"call": {"thread": child_thread, "input": sleepy}}, {"say": "joined"}]
    async with dispatched.process("first") as first:
        receipt = await client.submit(ids, agent_id="scripted", input=script)
        await eventually(
            lambda: client.records(child_thread),
            lambda records: any(r["kind"] == "message" for r in records),
            what="the child running after its first step",
        )
        parent = (await client.thread_status(ids)).submissions[0]
        assert (parent.state, parent.waiting_for) == ("suspended", "child")
        first.kill()  # SIGKILL: no cleanup, the child's claim is left behind
        await asyncio.wait_for(first.wait(), timeout=10)
    async with dispatched.running():
        outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed"
    [child] = await child_rows(pool, receipt.submission_id)
    assert (child["thread_id"], child["outcome"], child["attempts"]) == (
        child_thread,
        "completed",
        2,  # killed once, reclaimed once
    )
    assert outcome.result["said"] == ["joined"]
    assert outcome.result["children"] == [
        {
            "thread": child_thread,
            "submission_id": child["submission_id"],
            "outcome": "completed",
            "result": {"said": ["before", "after"]},
        }
    ]
    kinds = [r["kind"] for r in await records_of(client, ids)]
    assert (kinds.count("call-started"), kinds.count("call-joined")) == (1, 1)
    await assert_settled_once(client, ids, 1)
    await assert_settled_once(client, child_thread, 1)


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_01_13_a_budget_is_reserved_spent_and_settled_once_at_the_join(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], failpoints: Failpoints, ids: str
) -> None:
    """The call reserves 10 units with the child's admission; the child spends 3 + 4 (a fault
    after the join's commit makes the parent re-run: the account is still settled once); a
    second child that overspends fails with BudgetExceeded, having recorded nothing of it."""
    failpoints.arm("attempt:call-join:after", times=1)
    calls = [
        {**helper(spend=[3, 4], answer="ok"), "budget": 10},
        {**helper(spend=[2, 9]), "budget": 10},
    ]
    receipt = await plan(client, ids, *calls)
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert failpoints.hits.get("attempt:call-join:after") == 1
    first, second = outcome.result["children"]
    assert (first["outcome"], first["budget_consumed"]) == ("completed", 7)
    assert second["outcome"] == "failed" and "BudgetExceeded" in second["reason"]
    assert second["budget_consumed"] == 2  # the refused spend recorded nothing
    joined = await records_of(client, ids, "call-joined")
    assert [r["body"]["budget"] for r in joined] == [
        {"reserved": 10, "consumed": 7, "released": 3},
        {"reserved": 10, "consumed": 2, "released": 8},
    ]
    started = await records_of(client, ids, "call-started")
    assert [r["body"]["budget"] for r in started] == [10, 10]  # reserved with the admission


@pytest.mark.usefixtures("family_worker")
async def test_children_a_fault_in_one_of_two_calls_awaited_together_leaves_one_child_each(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], failpoints: Failpoints, ids: str
) -> None:
    """The first call's establishment faults while the second establishes: the pass fails, and
    the re-run establishes the first and finds the second: one child per call, and the one wait
    lists both."""
    failpoints.arm("attempt:call", times=1)
    receipt = await plan(client, ids, call(1), call(2), together=True)
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert failpoints.hits.get("attempt:call") == 1
    assert [c["result"] for c in outcome.result["children"]] == [{"answer": 1}, {"answer": 2}]
    children = await child_rows(pool, receipt.submission_id)
    assert [(c["parent_call_step"], c["attempts"]) for c in children] == [(1, 1), (2, 1)]
    kinds = [r["kind"] for r in await records_of(client, ids)]
    assert (kinds.count("call-started"), kinds.count("call-joined")) == (2, 2), kinds
    # Any wait is the re-run's, listing both calls.
    for awaited in await records_of(client, ids, "children-awaited"):
        assert awaited["body"]["children"] == [c["submission_id"] for c in children]


@pytest.mark.usefixtures("family_worker")
async def test_children_a_call_whose_write_fails_after_its_sibling_committed_is_made_on_the_rerun(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], failpoints: Failpoints, ids: str
) -> None:
    """Calls awaited together are established concurrently, so the first call's write can fail
    after the second committed (a database stopped mid-write; here a paused failpoint that then
    raises). The re-run establishes the first and finds the second; the parent completes with
    both. (It once settled failed, NonDeterministic at the first call's empty step: a fault
    deciding an outcome, seen in `make chaos`.)"""
    failure = FailpointError("attempt:call")
    failpoints.arm("attempt:call", pause=True, raise_error=failure, times=1)
    receipt = await plan(client, ids, call(1), call(2), together=True)
    await failpoints.reached("attempt:call")
    await eventually(
        lambda: records_of(client, ids, "call-started"),
        lambda started: len(started) == 1,
        what="the second call committed while the first waits",
    )
    failpoints.release("attempt:call")
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed", outcome
    assert [c["result"] for c in outcome.result["children"]] == [{"answer": 1}, {"answer": 2}]
    children = await child_rows(pool, receipt.submission_id)
    assert [(c["parent_call_step"], c["outcome"]) for c in children] == [
        (1, "completed"),
        (2, "completed"),
    ]


@pytest.mark.usefixtures("family_worker")
async def test_children_a_child_aborted_on_its_own_comes_back_aborted_and_the_parent_goes_on(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await plan(client, ids, helper(approval="go?"), call(3), together=False)
    child = await child_awaiting_approval(client, pool, ids, receipt)
    aborted = await client.abort(child["submission_id"])
    assert (aborted.state, aborted.outcome) == ("settled", "aborted")
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed"  # the parent is not aborted with its child
    first, second = outcome.result["children"]
    assert (first["outcome"], first["reason"]) == ("aborted", "aborted by an operator")
    assert (second["outcome"], second["result"]) == ("completed", {"answer": 3})
