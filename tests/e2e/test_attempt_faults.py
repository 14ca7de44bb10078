"""Faults inside an attempt decide nothing: an infrastructure error fails the pass, the head is
given back, the durable retry (native_only) brings a later pass, and the submission settles once.

Only the binding's own application error (or its `Failed`) settles ``failed``; see
docs/bindings.md, "Errors: what fails a submission and what retries".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from tests.helpers.cancellation import hang_until_cancelled
from tests.helpers.checks import assert_settled_once, converged, say, submission_rows
from tests.helpers.workers import Workers, with_bindings
from threadwarden import AttemptContext, Binding, Completed, Failed, Outcome, Retryable
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import Failpoints
from threadwarden.views import HostStatus, ThreadStatus

LOST_CONNECTION = "connection was closed in the middle of operation"


def lost_connection() -> asyncpg.exceptions.ConnectionDoesNotExistError:
    """The driver's error while Postgres restarts."""
    return asyncpg.exceptions.ConnectionDoesNotExistError(LOST_CONNECTION)


async def held_failed_pass(
    client: ThreadwardenClient, failpoints: Failpoints, thread: str
) -> HostStatus:
    """Wait for the failed pass's rearm (paused at ``maintenance:retry:after``); its host row."""
    await failpoints.reached("maintenance:retry:after")
    return await client.host_status(thread)


async def completed_on_the_retry(
    client: ThreadwardenClient, failpoints: Failpoints, thread: str
) -> ThreadStatus:
    """Let the held failed pass's rearm go; the retry's pass settles the head once and the host
    converges (its thread status)."""
    failpoints.release("maintenance:retry:after")
    status = await assert_settled_once(client, thread, 1)
    await converged(client, thread)
    return status


async def assert_pass_failed_unsettled(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], thread: str, host: HostStatus, error: str
) -> None:
    """The pass failed natively, recorded its retry, gave the head back and settled nothing."""
    assert host.last_outcome == "failed"
    assert host.last_error is not None and error in host.last_error, host.last_error
    assert host.retry is not None
    assert (host.retry.native_only, host.retry.stalls) == (True, 1)
    assert host.dirty > host.processed and host.alarm_at is not None
    [row] = await submission_rows(pool, thread)
    assert (row["state"], row["ownership_token"], row["attempts"]) == ("ready", None, 1)
    assert row["outcome"] is None
    assert not [r for r in await client.records(thread) if r["kind"] == "settlement"]


@pytest.mark.usefixtures("worker")
async def test_attempt_database_error_in_append_fails_the_pass_and_a_later_pass_completes(
    client: ThreadwardenClient, failpoints: Failpoints, pool: asyncpg.Pool[Any], ids: str
) -> None:
    failpoints.arm("attempt:append", raise_error=lost_connection(), times=1)
    failpoints.arm("maintenance:retry:after", pause=True)
    await client.submit(ids, agent_id="scripted", input=say("after the restart"))

    host = await held_failed_pass(client, failpoints, ids)
    await assert_pass_failed_unsettled(client, pool, ids, host, "ConnectionDoesNotExistError")
    assert await client.records(ids) == []  # the failed append wrote nothing

    status = await completed_on_the_retry(client, failpoints, ids)
    assert status.submissions[0].outcome == "completed"
    assert [r["kind"] for r in await client.records(ids)] == ["message", "settlement"]
    [row] = await submission_rows(pool, ids)
    assert row["attempts"] == 2
    assert failpoints.hits["attempt:append"] == 1
    assert (await client.host_status(ids)).retry is None


# --- bindings that meet (or raise) an infrastructure error ------------------------------------

Handler = Callable[[AttemptContext], Awaitable[Outcome]]


def first_call_then_complete(calls: list[int], first: Handler) -> Handler:
    """A handler that runs ``first`` on its first call and completes on later ones."""

    async def handler(ctx: AttemptContext) -> Outcome:
        calls.append(1)
        if len(calls) == 1:
            return await first(ctx)
        await ctx.append("note", {"text": "done"})
        return Completed({"calls": len(calls)})

    return handler


async def _raises_retryable(_: AttemptContext) -> Outcome:
    raise Retryable("model endpoint rate-limited")


async def _swallows_and_fails(ctx: AttemptContext) -> Outcome:
    try:
        await ctx.append("note", {"text": "done"})
    except Exception as error:
        return Failed(f"could not write: {error}")
    return Completed()


async def _swallows_and_raises_its_own(ctx: AttemptContext) -> Outcome:
    try:
        await ctx.append("note", {"text": "done"})
    except Exception as error:
        raise ValueError("note not written") from error
    return Completed()


async def _swallows_and_goes_on(ctx: AttemptContext) -> Outcome:
    with contextlib.suppress(Exception):
        await ctx.append("note", {"text": "done"})
    await ctx.append("note", {"text": "a step after the failed one"})  # refused: no gap
    return Completed()


async def _times_out_its_write(ctx: AttemptContext) -> Outcome:
    try:
        await asyncio.wait_for(ctx.append("note", {"text": "done"}), 0.2)  # held by a pause
    except TimeoutError:
        return Failed("the ledger was slow")
    return Completed()


FIRST_CALLS: dict[str, tuple[Handler, bool, str]] = {
    # agent id: (first call, whether attempt:append fails it, the error the host records)
    "retryable": (_raises_retryable, False, "the binding raised Retryable"),
    "swallows": (_swallows_and_fails, True, "ConnectionDoesNotExistError"),
    "rethrows": (_swallows_and_raises_its_own, True, "ConnectionDoesNotExistError"),
    "goes-on": (_swallows_and_goes_on, True, "ConnectionDoesNotExistError"),
    "times-out": (_times_out_its_write, True, "CancelledError"),
}


@pytest.mark.parametrize("agent_id", sorted(FIRST_CALLS))
async def test_attempt_infrastructure_error_never_settles_failed_whatever_the_binding_does(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str, agent_id: str
) -> None:
    first, faulted, error = FIRST_CALLS[agent_id]
    calls: list[int] = []
    binding = Binding(agent_id, "d1", first_call_then_complete(calls, first))
    failpoints = workers.failpoints
    if agent_id == "times-out":
        failpoints.arm("attempt:append", pause=True, times=1)  # outlasts the binding's timeout
    elif faulted:
        failpoints.arm("attempt:append", raise_error=lost_connection(), times=1)
    failpoints.arm("maintenance:retry:after", pause=True)
    async with workers.running(with_bindings(binding)):
        await client.submit(ids, agent_id=agent_id, input={})
        host = await held_failed_pass(client, failpoints, ids)
        await assert_pass_failed_unsettled(client, pool, ids, host, error)
        assert "model endpoint" not in (host.last_error or "")  # binding text: by type only
        status = await completed_on_the_retry(client, failpoints, ids)
    assert status.submissions[0].outcome == "completed"
    assert len(calls) == 2
    records = await client.records(ids)
    assert [r["kind"] for r in records] == ["note", "settlement"]
    assert records[-1]["body"]["result"] == {"calls": 2}


# --- the lease renewer ------------------------------------------------------------------------


async def test_attempt_failed_lease_renewal_is_retried_and_the_attempt_completes(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    # The tests' lease is 3 s renewed every 500 ms: the 2.5 s step spans several renewals. No
    # inline heads: an inline first attempt would hand the head over after its 2 s budget.
    workers.failpoints.arm("attempt:renew", raise_error=lost_connection(), times=1)
    async with workers.tuned(inline_budget_ms=0).running():
        await client.submit(ids, agent_id="scripted", input=[{"sleep_ms": 2_500}, {"say": "done"}])
        status = await assert_settled_once(client, ids, 1)
        host = await converged(client, ids)
    assert status.submissions[0].outcome == "completed"
    assert workers.failpoints.hits["attempt:renew"] == 1
    [row] = await submission_rows(pool, ids)
    assert row["attempts"] == 1  # the first attempt completed: no failed pass, no re-attempt
    assert host.last_error is None and host.retry is None


async def test_attempt_whose_renewals_fail_for_a_whole_lease_stops_without_settling(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    cancelled: list[int] = []

    async def stuck(_: AttemptContext) -> Outcome:
        await hang_until_cancelled(cancelled)  # until the lease keeper gives up
        return Completed()

    calls: list[int] = []
    binding = Binding("stuck", "d1", first_call_then_complete(calls, stuck))
    failpoints = workers.failpoints
    failpoints.arm("attempt:renew", raise_error=lost_connection())
    failpoints.arm("maintenance:retry:after", pause=True)
    quiet = workers.tuned(sweep_grace_ms=30_000)  # passes outlast 200 ms
    async with quiet.running(with_bindings(binding)):
        await client.submit(ids, agent_id="stuck", input={})
        host = await held_failed_pass(client, failpoints, ids)
        assert cancelled == [1]
        # lease_ms 3 s with a renewal every 500 ms: the keeper tried ~6 times first.
        assert failpoints.hits["attempt:renew"] >= 5
        assert host.last_error is not None and "the lease has lapsed" in host.last_error
        assert host.retry is not None and host.retry.native_only is True
        [row] = await submission_rows(pool, ids)
        assert row["state"] in ("running", "ready") and row["outcome"] is None
        assert await client.records(ids) == []
        failpoints.disarm("attempt:renew")
        status = await completed_on_the_retry(client, failpoints, ids)
    assert status.submissions[0].outcome == "completed"
    assert len(calls) == 2


async def test_attempt_binding_that_swallows_an_abort_still_settles_aborted(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    running, go_on = asyncio.Event(), asyncio.Event()

    async def stubborn(ctx: AttemptContext) -> Outcome:
        running.set()
        await go_on.wait()
        try:
            await ctx.append("note", {"text": "after the abort"})
        except Exception:
            return Completed("ignored the abort")
        return Completed("never aborted")

    async with workers.running(with_bindings(Binding("stubborn", "d1", stubborn))):
        receipt = await client.submit(ids, agent_id="stubborn", input={})
        await asyncio.wait_for(running.wait(), 30)
        await client.abort(receipt.submission_id)
        go_on.set()
        status = await assert_settled_once(client, ids, 1)
    assert status.submissions[0].outcome == "aborted"
    [settlement] = await client.records(ids)
    assert settlement["body"]["reason"] == "aborted by an operator"
