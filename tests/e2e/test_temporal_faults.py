"""Temporal-specific faults: lost runs, zombie steps, restarted workers, wakes and deadlines.

Temporal replaces the Durable Object's delivery mechanics, not the protocol (docs/protocol.md,
"Adaptations to Temporal + Postgres"): a host run can be terminated or its worker restarted
mid-pass, a step of a replaced run can still be executing (a zombie), and wakes arrive while a pass
runs. Postgres stays the truth, so every one of these must converge with exactly one settlement per
submission and no stale write.

A zombie attempt writing after a newer pass began is covered at the ledger boundary by
``test_attempt_writes_under_a_replaced_pass_raise_stale_pass`` in ``tests/ledger/
test_pass_fencing.py``; it is not repeated here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.helpers.checks import (
    assert_settled_once,
    converged,
    host_row,
    say,
    submission_rows,
)
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden import AttemptContext, Binding, Completed, Outcome
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import Failpoints
from threadwarden.worker.plugin import default_registry
from threadwarden.workflows.contracts import host_workflow_id


async def host_runs(temporal: Client, host: str) -> list[WorkflowExecutionStatus | None]:
    """The status of every run of the host's workflow id."""
    query = f"WorkflowId = '{host_workflow_id(host)}'"
    return [run.status async for run in temporal.list_workflows(query)]


def refused_as_stale(caplog: pytest.LogCaptureFixture, activity_type: str) -> bool:
    """Whether an ``activity_type`` step ended by raising `StalePass` (logged in one line,
    without a traceback: expected fencing is benign)."""
    return any(
        record.getMessage().startswith(f"{activity_type} superseded: host ")
        and "pass epoch" in record.getMessage()
        and record.exc_info is None
        for record in caplog.records
    )


async def test_terminated_host_run_leaves_a_zombie_finish_that_writes_nothing(
    worker: None,
    client: ThreadwardenClient,
    failpoints: Failpoints,
    temporal_client: Client,
    pool: asyncpg.Pool[Any],
    ids: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Stalled: the zombie has not heard of its run's end. (Its heartbeat would soon tell it:
    # Temporal answers NotFound and the SDK cancels the activity; under load that came first
    # and the zombie never reached its finish.)
    failpoints.arm("maintenance:finish:before", pause=True, stalled=True)
    await client.submit(ids, agent_id="scripted", input=say("outlives its run"))
    await failpoints.reached("maintenance:finish:before")
    zombie_epoch = (await client.host_status(ids)).pass_epoch

    failpoints.arm("maintenance:begin:after", pause=True)
    handle = temporal_client.get_workflow_handle(host_workflow_id(ids))
    await handle.terminate(reason="lost mid-pass")
    await client.wake(ids, reason="test")  # a new run: its begin replaces the zombie's epoch
    await failpoints.reached("maintenance:begin:after")
    host_before = await host_row(pool, ids)
    assert host_before is not None and host_before["pass_epoch"] == zombie_epoch + 1
    rows_before = await submission_rows(pool, ids)
    records_before = await client.records(ids)

    async def zombie_refused() -> bool:
        # No auxiliary work was due and the scripted binding is inline: begin_pass ran the
        # attempt and finishes the pass itself.
        return refused_as_stale(caplog, "begin_pass")

    failpoints.release("maintenance:finish:before")  # the terminated run's finish runs on
    await eventually(zombie_refused, bool, what="the zombie finish refused with StalePass")
    assert await host_row(pool, ids) == host_before
    assert await submission_rows(pool, ids) == rows_before
    assert await client.records(ids) == records_before
    assert host_before["processed"] < host_before["dirty"]  # not acknowledged by the zombie

    failpoints.release("maintenance:begin:after")
    await assert_settled_once(client, ids, 1)
    await converged(client, ids)
    assert WorkflowExecutionStatus.TERMINATED in await host_runs(temporal_client, ids)


async def test_wakes_arriving_during_passes_are_never_lost(
    workers: Workers, client: ThreadwardenClient, temporal_client: Client, ids: str
) -> None:
    """With no sweeper on the task queue a lost wake would strand the second wave: only the
    signals and the host workflows' own alarms can settle it."""
    async with workers.running(sweeper=False):
        await _two_waves_settle_in_order(client, temporal_client, ids)


async def _two_waves_settle_in_order(
    client: ThreadwardenClient, temporal_client: Client, ids: str
) -> None:
    threads = [f"{ids}-{n}" for n in range(3)]

    async def wave(label: str) -> dict[str, str]:
        texts = [(thread, f"{label} {thread} #{k}") for thread in threads for k in range(2)]
        receipts = await asyncio.gather(
            *(
                client.submit(thread, agent_id="scripted", input=say(text), host_id=ids)
                for thread, text in texts
            )
        )
        return {r.submission_id: text for r, (_, text) in zip(receipts, texts, strict=True)}

    said = await wave("first")
    for thread in threads:
        await assert_settled_once(client, thread, 2)
    said |= await wave("second")  # lands while the run may be deciding to go idle

    for thread in threads:
        status = await assert_settled_once(client, thread, 4)
        records = await client.records(thread)
        messages = [r["body"]["text"] for r in records if r["kind"] == "message"]
        assert messages == [said[s.submission_id] for s in status.submissions]  # queue order
    await converged(client, ids)
    handle = temporal_client.get_workflow_handle(host_workflow_id(ids))
    await eventually(
        handle.describe,
        lambda d: d.status == WorkflowExecutionStatus.COMPLETED,
        what="the idle host's run completed",
    )


async def test_worker_stopped_while_a_pass_step_is_paused_converges_on_a_new_worker(
    workers: Workers, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm("maintenance:select:after", pause=True)
    async with workers.running() as running:
        await client.submit(ids, agent_id="scripted", input=say("survives a restart"))
        await failpoints.reached("maintenance:select:after")
        paused = await client.host_status(ids)
        # A worker's shutdown waits for its local activities: let the step finish as it stops.
        stopping = asyncio.ensure_future(running.shutdown())
        failpoints.release("maintenance:select:after")
        await stopping
    assert paused.processed < paused.dirty and paused.alarm_at is not None

    async with workers.running():
        status = await assert_settled_once(client, ids, 1)
        await converged(client, ids)
    # Begin runs the selected inline head once released: whether that attempt starts before
    # the stopping worker's activities see the shutdown is the event loop's order. Either way
    # at most that one attempt ran there, and it gave the head back (settled once, above).
    assert status.submissions[0].attempts in (1, 2)


async def test_worker_stopped_mid_attempt_is_reclaimed_at_a_higher_epoch(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    workers.failpoints.arm("settle", pause=True)
    async with workers.running(stop_paused=True):
        await client.submit(ids, agent_id="scripted", input=say("said once, settled once"))
        await workers.failpoints.reached("settle")
        paused = await client.host_status(ids)
        # Leaving the block cancels the attempt before it settles; its claim stays leased.
    workers.failpoints.release_all()
    [row] = await submission_rows(pool, ids)
    assert (row["state"], row["epoch"]) == ("running", 1)
    assert paused.processed < paused.dirty and paused.alarm_at is not None

    async with workers.running():
        status = await assert_settled_once(client, ids, 1)
        host = await converged(client, ids)
    [submission] = status.submissions
    assert (submission.attempts, submission.epoch) == (2, 2)  # the lapsed claim, taken again
    assert host.pass_epoch > paused.pass_epoch
    records = await client.records(ids)
    # The cancelled attempt's message stays in canonical history and the reclaim replays it
    # from the journal instead of saying it again; only the reclaim settles.
    assert [(r["kind"], r["epoch"]) for r in records] == [("message", 1), ("settlement", 2)]


async def restored_handler(context: AttemptContext) -> Outcome:
    """A binding that was missing (or pinned to another digest) when the work was admitted."""
    await context.append("message", {"text": "restored"})
    return Completed({"restored": True})


@pytest.mark.parametrize("pinned", [None, "digest-v1"], ids=["unavailable", "digest-mismatch"])
async def test_scenario_27_restored_binding_settles_and_drops_the_retry(
    pinned: str | None, workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    agent = "restorable"
    before = default_registry()
    if pinned is not None:
        before.register(Binding(agent, "digest-v2", restored_handler))
    async with workers.running(before):
        await client.submit(ids, agent_id=agent, input={"n": 1}, agent_digest=pinned)
        blocked = await eventually(
            lambda: client.host_status(ids),
            lambda h: len(h.binding_retries) == 1,
            what="binding retry recorded",
        )
    assert blocked.binding_retries[0].attempts == 1
    assert (await client.thread_status(ids)).submissions[0].state == "ready"

    after = default_registry()
    after.register(Binding(agent, pinned or "digest-v1", restored_handler))
    async with workers.running(after):
        status = await assert_settled_once(client, ids, 1)
        host = await converged(client, ids)
    assert status.submissions[0].outcome == "completed"
    assert host.binding_retries == [] and host.retry is None
    said = [r["body"]["text"] for r in await client.records(ids) if r["kind"] == "message"]
    assert said == ["restored"]


OVERRUN = [{"sleep_ms": 20_000}]
"""A head that sleeps well past the short pass deadline below."""


@pytest.fixture
async def short_deadline(workers: Workers) -> AsyncIterator[None]:
    """A worker whose pass deadline is short enough for a test (3 s)."""
    async with workers.tuned(pass_deadline_ms=3_000, yield_after_ms=2_000).running():
        yield


@pytest.mark.usefixtures("short_deadline")
async def test_scenario_20_pass_deadline_records_a_native_retry_and_releases_the_head(
    client: ThreadwardenClient, failpoints: Failpoints, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await client.submit(ids, agent_id="scripted", input=OVERRUN)
    await eventually(
        lambda: client.thread_status(ids),
        lambda s: s.submissions[0].state == "running",
        what="attempt running",
    )
    failpoints.arm("claim", pause=True)  # no re-attempt may take the head again
    failpoints.arm("maintenance:retry:after", pause=True)
    await failpoints.reached("maintenance:retry:after")
    host = await client.host_status(ids)
    assert host.last_error is not None and "maintenance pass deadline" in host.last_error
    assert host.last_outcome == "failed"
    assert host.retry is not None
    assert (host.retry.native_only, host.retry.stalls) == (True, 1)
    assert host.dirty > host.processed and host.alarm_at is not None
    failpoints.release("maintenance:retry:after")

    # The cancelled attempt gives the head back itself (recovery of a lapsed lease would
    # also clear attempt_id), long before its 20 s handler would have finished.
    [row] = await eventually(
        lambda: submission_rows(pool, ids),
        lambda rows: rows[0]["state"] == "ready",
        timeout_s=15,
        what="head released by the cancelled attempt",
    )
    # The inline attempt yielded before the 20 s sleep (it declares its length) and handed the
    # head over; the dispatched attempt slept and was cancelled.
    assert row["attempts"] == 2 and row["attempt_id"] is not None
    assert row["ownership_token"] is None and row["lease_expires_at"] is None
    assert await client.records(ids) == []


@pytest.mark.usefixtures("short_deadline")
async def test_scenario_20_head_is_released_before_the_deadline_failure_is_recorded(
    client: ThreadwardenClient, failpoints: Failpoints, pool: asyncpg.Pool[Any], ids: str
) -> None:
    failpoints.arm("maintenance:retry:before", pause=True)
    await client.submit(ids, agent_id="scripted", input=OVERRUN)
    await failpoints.reached("maintenance:retry:before")
    # Brief §3.4: rearmFailure runs once the pass scope closed (ownership released).
    [row] = await submission_rows(pool, ids)
    assert (row["state"], row["ownership_token"]) == ("ready", None)


@pytest.mark.usefixtures("worker")
async def test_failed_pass_step_does_not_fail_the_host_workflow(
    client: ThreadwardenClient, failpoints: Failpoints, temporal_client: Client, ids: str
) -> None:
    failpoints.arm("maintenance:finish:before", times=1)
    await client.submit(ids, agent_id="scripted", input=say("after a failed finish"))
    await assert_settled_once(client, ids, 1)
    await converged(client, ids)
    assert failpoints.hits["maintenance:finish:before"] == 1

    # A failed pass step runs rearm_failure and the run goes on waiting for its alarm.
    runs = await host_runs(temporal_client, ids)
    assert WorkflowExecutionStatus.FAILED not in runs, runs
