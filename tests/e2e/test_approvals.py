"""Approvals end to end (issue 4 §5; brief scenarios 4, 5, 7 and 23).

A scripted ``{"approval": reason}`` step suspends its submission: a stable wait, so the pass that
suspends it acknowledges its generation and clears the alarm, and followers on the same thread
stay dormant behind it. ``approve`` resumes it (the committed steps before the approval are
replayed from the journal, not repeated) and ``deny`` settles it failed; both decisions are
canonical records. Every test runs a real worker against the Temporal dev server and a fresh
Postgres database.

Operator settlements (deny) are written at the operator's fenced epoch, not at the epoch of the
submission's last attempt, so those threads are checked with `recorded_once` below instead of
`assert_settled_once` (whose last check assumes the final attempt settled).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from tests.helpers.alarms import CLOCK_SLACK, MIN_DELAY
from tests.helpers.checks import (
    assert_settled_once,
    converged,
    host_row,
    quiescent,
    recorded_once,
    say,
)
from tests.helpers.checks import submission_rows as rows_of
from tests.helpers.cli import run_cli
from tests.helpers.idle import woken_at_rest
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.errors import NotWaiting
from threadwarden.failpoints import Failpoints
from threadwarden.views import HostStatus, SubmissionView

APPROVAL = [{"say": "before"}, {"approval": "refund"}, {"say": "after"}]


async def suspended(client: ThreadwardenClient, thread: str) -> SubmissionView:
    """Wait until the thread's head waits for an approval."""
    status = await eventually(
        lambda: client.thread_status(thread),
        lambda s: s.submissions[0].state == "suspended",
        what=f"head of {thread} suspended",
    )
    return status.submissions[0]


async def quiet(client: ThreadwardenClient, host: str) -> HostStatus:
    """Wait until the host acknowledged its generation and cleared its alarm (work may remain)."""
    return await eventually(
        lambda: client.host_status(host),
        lambda h: h.processed == h.dirty and h.alarm_at is None,
        what=f"host {host} acknowledged with its alarm cleared",
    )


def kinds_of(records: list[dict[str, Any]], submission_id: str) -> list[str]:
    return [r["kind"] for r in records if r["submission_id"] == submission_id]


def messages(records: list[dict[str, Any]]) -> list[str]:
    return [r["body"]["text"] for r in records if r["kind"] == "message"]


# --- scenarios 4 and 23: the wait is quiet, followers stay behind it -------------------------


async def test_scenario_04_approval_wait_is_acknowledged_and_approve_settles_once(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="scripted", input=APPROVAL)
    head = await suspended(client, ids)
    assert (head.waiting_for, head.attempts, head.outcome) == ("approval", 1, None)
    host = await quiet(client, ids)
    assert host.nonterminal == 1 and host.retry is None
    assert kinds_of(await client.records(ids), receipt.submission_id) == [
        "message",
        "approval-requested",
    ]

    approved = await client.approve(receipt.submission_id)
    assert (approved.state, approved.outcome, approved.changed) == ("input-applied", None, True)
    status = await assert_settled_once(client, ids, 1)
    [submission] = status.submissions
    assert (submission.outcome, submission.attempts, submission.waiting_for) == (
        "completed",
        2,
        None,
    )
    records = await client.records(ids)
    # "before" was committed by the first attempt and replayed (not repeated) by the second.
    assert messages(records) == ["before", "after"]
    assert [r["kind"] for r in records] == [
        "message",
        "approval-requested",
        "approval-decision",
        "message",
        "settlement",
    ]
    assert records[1]["body"] == {"reason": "refund"}
    assert records[2]["body"] == {"approved": True}
    assert records[4]["body"]["outcome"] == "completed"
    await converged(client, ids)


async def test_scenario_23_follower_behind_an_approval_wait_stays_ready_until_approved(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    head = await client.submit(ids, agent_id="scripted", input=APPROVAL)
    await suspended(client, ids)
    waiting = await quiet(client, ids)
    follower = await client.submit(ids, agent_id="scripted", input=say("follower"))

    # The follower's admission made the host dirty; the pass acknowledges it anyway, because a
    # ready row behind a stable wait is dormant, not autonomous work.
    host = await quiet(client, ids)
    assert host.dirty > waiting.dirty and host.pass_epoch > waiting.pass_epoch
    assert host.nonterminal == 2 and host.retry is None
    rows = await rows_of(pool, ids)
    assert [(r["state"], r["attempts"]) for r in rows] == [("suspended", 1), ("ready", 0)]
    assert kinds_of(await client.records(ids), follower.submission_id) == []

    await client.approve(head.submission_id)
    await assert_settled_once(client, ids, 2)
    assert messages(await client.records(ids)) == ["before", "after", "follower"]
    await converged(client, ids)


async def test_scenario_04_deny_settles_failed_and_records_the_decision(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    head = await client.submit(ids, agent_id="scripted", input=APPROVAL)
    await client.submit(ids, agent_id="scripted", input=say("follower"))
    await suspended(client, ids)
    await quiet(client, ids)

    denied = await client.deny(head.submission_id, "over the limit")
    assert (denied.state, denied.outcome) == ("settled", "failed")
    records = await recorded_once(client, ids, ["failed", "completed"])
    status = await client.thread_status(ids)
    reason = status.submissions[0].reason
    assert reason is not None and "approval denied" in reason and "over the limit" in reason
    assert kinds_of(records, head.submission_id) == [
        "message",
        "approval-requested",
        "approval-decision",
        "settlement",
    ]
    [decision] = [r for r in records if r["kind"] == "approval-decision"]
    assert decision["body"]["approved"] is False
    assert decision["body"]["reason"] == "over the limit"
    [settlement] = [
        r for r in records if r["kind"] == "settlement" and r["submission_id"] == head.submission_id
    ]
    assert settlement["body"]["outcome"] == "failed"
    assert "approval denied" in settlement["body"]["reason"]
    assert messages(records) == ["before", "follower"]  # "after" never ran
    assert status.submissions[0].attempts == 1
    await converged(client, ids)


@pytest.mark.usefixtures("worker")
async def test_approve_not_waiting_raises_and_writes_nothing(
    client: ThreadwardenClient, connections: Connections, pool: asyncpg.Pool[Any], ids: str
) -> None:
    done, waiting = f"{ids}-done", f"{ids}-waiting"
    finished = await client.submit(done, agent_id="scripted", input=say("done"), host_id=ids)
    await client.submit(waiting, agent_id="scripted", input=APPROVAL, host_id=ids)
    follower = await client.submit(waiting, agent_id="scripted", input=say("f"), host_id=ids)
    await assert_settled_once(client, done, 1)
    await suspended(client, waiting)
    await quiescent(client, connections, ids)  # no pass is left: a snapshot stays still

    async def snapshot() -> tuple[Any, ...]:
        return (
            await host_row(pool, ids),
            await rows_of(pool, done),
            await rows_of(pool, waiting),
            await client.records(done),
            await client.records(waiting),
        )

    before = await snapshot()
    for submission_id in (finished.submission_id, follower.submission_id):
        with pytest.raises(NotWaiting, match=submission_id):
            await client.approve(submission_id)
        with pytest.raises(NotWaiting, match=submission_id):
            await client.deny(submission_id, "no")
    assert await snapshot() == before


# --- the command line ---------------------------------------------------------------------


@pytest.mark.usefixtures("cli_env", "worker")
async def test_cli_approve_and_deny_print_json_repeat_unchanged_and_exit_2_on_conflict(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    granted, refused = f"{ids}-granted", f"{ids}-refused"
    one = await client.submit(granted, agent_id="scripted", input=APPROVAL, host_id=ids)
    two = await client.submit(refused, agent_id="scripted", input=APPROVAL, host_id=ids)
    await suspended(client, granted)
    await suspended(client, refused)
    capsys.readouterr()

    assert await run_cli("status", "--thread", granted, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["submissions"][0]["waiting_for"] == "approval"

    assert await run_cli("approve", one.submission_id, "--json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "submission_id": one.submission_id,
        "thread_id": granted,
        "host_id": ids,
        "state": "input-applied",
        "outcome": None,
        "changed": True,
    }
    assert await run_cli("deny", two.submission_id, "--reason", "not today", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "submission_id": two.submission_id,
        "thread_id": refused,
        "host_id": ids,
        "state": "settled",
        "outcome": "failed",
        "changed": True,
    }

    # The same decision again is a repeat: exit 0, nothing changed; the other one conflicts.
    for argv in (["approve", one.submission_id], ["deny", two.submission_id]):
        assert await run_cli(*argv, "--json") == 0
        assert json.loads(capsys.readouterr().out)["changed"] is False
    for argv in (["deny", one.submission_id], ["approve", two.submission_id]):
        assert await run_cli(*argv, "--json") == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        [line] = captured.err.strip().splitlines()
        assert argv[1] in line and json.loads(line)["code"] == "decision_conflict"

    await recorded_once(client, granted, ["completed"])
    records = await recorded_once(client, refused, ["failed"])
    [decision] = [r for r in records if r["kind"] == "approval-decision"]
    assert decision["body"] == {"approved": False, "reason": "not today"}
    await converged(client, ids)


# --- scenario 5: the approval lands while the suspending pass is about to finish -------------


async def test_scenario_05_approval_during_the_suspending_pass_keeps_the_generation_dirty(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm("maintenance:finish:before", pause=True)
    receipt = await client.submit(ids, agent_id="scripted", input=APPROVAL)
    await failpoints.reached("maintenance:finish:before")
    [head] = (await client.thread_status(ids)).submissions
    assert head.state == "suspended"  # this pass ran the attempt that suspended it
    observed = (await client.host_status(ids)).dirty

    approved = await client.approve(receipt.submission_id)
    assert approved.state == "input-applied"
    failpoints.arm("maintenance:finish:after", pause=True)
    failpoints.release("maintenance:finish:before")
    await failpoints.reached("maintenance:finish:after")
    host = await client.host_status(ids)
    finished_by = datetime.now(UTC)

    assert host.dirty == observed + 1
    assert host.processed < observed + 1  # the approval's generation is not acknowledged
    assert host.alarm_at is not None
    assert host.alarm_at <= finished_by + MIN_DELAY + CLOCK_SLACK  # never postponed

    failpoints.release("maintenance:finish:after")
    status = await assert_settled_once(client, ids, 1)
    assert status.submissions[0].outcome == "completed"
    assert messages(await client.records(ids)) == ["before", "after"]
    await converged(client, ids)


# --- scenario 7: repeated wakes on ready and suspended lanes ----------------------------------


async def test_scenario_07_repeated_wakes_on_ready_and_suspended_lanes_change_nothing(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    failpoints = workers.failpoints
    async with workers.running():
        # Ready: the first pass is held at its claim while three more wakes arrive.
        failpoints.arm("claim", pause=True)
        receipt = await client.submit(ids, agent_id="scripted", input=APPROVAL)
        await failpoints.reached("claim")
        assert [r["state"] for r in await rows_of(pool, ids)] == ["ready"]
        await asyncio.gather(*(client.wake(ids, reason="test") for _ in range(3)))
        failpoints.release("claim")
        await suspended(client, ids)
        waiting = await quiet(client, ids)
        fingerprint = (await client.records(ids), await rows_of(pool, ids))
        assert [r["kind"] for r in fingerprint[0]] == ["message", "approval-requested"]
        assert fingerprint[1][0]["attempts"] == 1

        # Suspended: three more wakes; every pass they cause finds nothing to do.
        await woken_at_rest(client, workers.connections, ids, waiting)
        assert (await client.records(ids), await rows_of(pool, ids)) == fingerprint

        await client.approve(receipt.submission_id)
        status = await assert_settled_once(client, ids, 1)
        assert status.submissions[0].attempts == 2
        assert messages(await client.records(ids)) == ["before", "after"]
        await converged(client, ids)
