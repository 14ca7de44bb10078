"""Projection: thread summaries kept after commits and backfilled by the pass."""

from __future__ import annotations

from tests.helpers.checks import converged, say, settled
from tests.helpers.idle import idle_host
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import Failpoints


async def test_projection_summary_follows_the_thread(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    for n in range(2):
        await client.submit(ids, agent_id="scripted", input=say(f"#{n}"))
    await settled(client, ids, 2)
    summary = await eventually(
        lambda: client.thread_summary(ids),
        lambda s: s is not None and s.states == {"settled": 2},
        what="summary of two settled submissions",
    )
    assert summary is not None
    records = await client.records(ids)
    assert (summary.last_sequence, summary.last_kind) == (records[-1]["sequence"], "settlement")


async def test_projection_backfill_rebuilds_lost_summaries_in_a_pass(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    failpoints = workers.failpoints
    async with workers.running():
        # No pass is left to backfill before the check.
        await idle_host(client, workers.connections, ids)
        failpoints.arm("maintenance:begin:before", pause=True, times=1)  # the rebuild's pass
        await client.rebuild_projection(ids)  # it is disposable
        await failpoints.reached("maintenance:begin:before")
        assert await client.thread_summary(ids) is None  # dropped: a caught-up pass backfills it
        failpoints.release("maintenance:begin:before")
        summary = await eventually(
            lambda: client.thread_summary(ids), lambda s: s is not None, what="backfilled"
        )
        assert summary is not None and summary.states == {"settled": 1}


async def test_scenario_33_projection_error_fails_the_pass_after_the_native_opportunity(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm("projection", raise_error=RuntimeError("projection store down"), times=1)
    failpoints.arm("maintenance:retry:after", pause=True)  # hold the failed pass's rearm
    await _submit_with_projection_due(client, failpoints, ids, "native work first")
    await failpoints.reached("maintenance:retry:after")
    status = await client.thread_status(ids)  # the head ran before the backfill failed
    assert [(s.state, s.outcome) for s in status.submissions] == [("settled", "completed")]
    host = await client.host_status(ids)
    assert host.last_error is not None and "projection store down" in host.last_error
    assert host.retry is not None and host.retry.native_only is False
    assert host.processed < host.dirty  # the failed pass acknowledged nothing
    failpoints.release("maintenance:retry:after")
    await converged(client, ids)
    assert failpoints.hits["projection"] == 1


async def test_scenario_33_a_slow_backfill_times_out_silently(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    failpoints = workers.failpoints
    failpoints.arm("projection", pause=True, times=1)  # a batch that never finishes by itself
    async with workers.tuned(projection_dispatch_timeout_ms=200).running():
        await _submit_with_projection_due(client, failpoints, ids, "not held up")
        await failpoints.reached("projection")
        await settled(client, ids, 1)
        host = await converged(client, ids)  # the pass succeeded despite the timeout
        assert host.last_error is None and host.retry is None
        assert failpoints.hits["projection"] == 1
        summary = await client.thread_summary(ids)  # a later pass's batch caught up
        assert summary is not None and summary.states == {"settled": 1}


async def _submit_with_projection_due(
    client: ThreadwardenClient, failpoints: Failpoints, thread: str, text: str
) -> None:
    """Submit, and have the projection come due before the submission's pass reads its plan."""
    failpoints.arm("maintenance:begin:before", pause=True, times=1)
    await client.submit(thread, agent_id="scripted", input=say(text))
    await failpoints.reached("maintenance:begin:before")
    await client.rebuild_projection(thread)  # begin reads the deadlines with the host row
    failpoints.release("maintenance:begin:before")
