"""Brief §5 fault scenarios end to end: failpoints at the protocol's durable boundaries.

Every test runs a real worker against the Temporal dev server and a fresh Postgres database,
arms failpoints (raise, or pause until released) and then checks the preamble invariants: each
submission settled exactly once, in FIFO order, with no stale-epoch write; autonomous leftovers
keep ``dirty > processed`` and an armed alarm; and the host converges (``processed == dirty``,
alarm cleared).

Scenario 6 is the Postgres equivalent of the original's in-memory ``active`` count: mutations
here are single transactions, so "a mutation overlapping the pass" is a racing commit that moves
``dirty`` while the pass is paused, and the pass must not acknowledge that generation.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from tests.helpers.alarms import CLOCK_SLACK, MIN_DELAY
from tests.helpers.cancellation import hang_until_cancelled
from tests.helpers.checks import (
    assert_autonomous_work_armed,
    assert_settled_once,
    converged,
    host_row,
    reached_first,
    say,
    submission_rows,
)
from tests.helpers.hosts import FakeHost
from tests.helpers.idle import idle_host
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers, with_bindings
from threadwarden import AttemptContext, Binding, Completed, Outcome
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import FailpointError, Failpoints


async def test_scenario_01_fault_at_dirty_before_writes_nothing(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    fresh, known = f"{ids}-fresh", f"{ids}-known"
    async with workers.running():
        # No pass is left to move the epoch.
        await idle_host(client, workers.connections, known, "before the fault")
        before = await client.host_status(known)

        workers.failpoints.arm("maintenance:dirty:before", times=2)
        with pytest.raises(FailpointError):
            await client.submit(fresh, agent_id="scripted", input=say("never admitted"))
        with pytest.raises(FailpointError):
            await client.submit(known, agent_id="scripted", input=say("never admitted"))

        assert await host_row(pool, fresh) is None
        threads = "SELECT count(*) FROM threadwarden.threads WHERE thread_id = $1"
        assert await pool.fetchval(threads, fresh) == 0
        assert len(await submission_rows(pool, known)) == 1
        after = await client.host_status(known)
        assert (after.dirty, after.processed, after.alarm_at) == (
            before.dirty,
            before.processed,
            None,
        )
        assert after.pass_epoch == before.pass_epoch


@pytest.mark.parametrize("location", ["maintenance:dirty:after", "maintenance:mutation:armed"])
async def test_scenario_01_fault_after_the_commit_still_settles(
    location: str, worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm(location, times=1)
    with pytest.raises(FailpointError):
        await client.submit(ids, agent_id="scripted", input=say("committed"), idempotency_key="k1")

    # The caller saw an error, but the admission committed with its alarm: no wake was sent,
    # so the sweeper starts the pass. A retry with the same key returns the same receipt.
    retried = await client.submit(
        ids, agent_id="scripted", input=say("committed"), idempotency_key="k1"
    )
    assert not retried.created
    status = await assert_settled_once(client, ids, 1)
    assert status.submissions[0].submission_id == retried.submission_id
    assert status.submissions[0].outcome == "completed"
    host = await converged(client, ids)
    assert host.retry is None and host.last_outcome == "actionable"
    assert failpoints.hits[location] == 1


# --- scenario 6: a mutation racing the pass ---------------------------------------------------


@pytest.mark.parametrize(
    "location",
    ["maintenance:finish:before", "maintenance:select:after", "maintenance:begin:after"],
)
async def test_scenario_06_racing_mutation_is_never_acknowledged(
    location: str, worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm(location, pause=True)
    failpoints.arm("maintenance:finish:after", pause=True)
    await client.submit(ids, agent_id="scripted", input=say("first"))
    await failpoints.reached(location)
    observed = (await client.host_status(ids)).dirty  # begin has read it already

    await client.submit(ids, agent_id="scripted", input=say("racing"))
    failpoints.release(location)
    await failpoints.reached("maintenance:finish:after")
    host = await client.host_status(ids)
    finished_by = datetime.now(UTC)

    assert host.dirty == observed + 1
    assert host.processed <= observed < host.dirty  # the racing generation stays unacknowledged
    assert_autonomous_work_armed(host)
    # A racing producer is never postponed: the alarm is (pass now) + minimum_alarm_delay.
    assert host.alarm_at is not None and host.alarm_at <= finished_by + MIN_DELAY + CLOCK_SLACK
    assert host.retry is None  # the pass progressed

    failpoints.release("maintenance:finish:after")
    status = await assert_settled_once(client, ids, 2)
    assert [s.outcome for s in status.submissions] == ["completed", "completed"]
    said = [r["body"]["text"] for r in await client.records(ids) if r["kind"] == "message"]
    assert said == ["first", "racing"]
    await converged(client, ids)


# --- scenario 9: fault before begin -----------------------------------------------------------


async def test_scenario_09_fault_at_begin_before_writes_no_retry_and_converges(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm("maintenance:begin:before")
    failpoints.arm("maintenance:retry:before")  # counts any rearm (there must be none)
    await client.submit(ids, agent_id="scripted", input=say("after two failed begins"))
    await eventually(
        lambda: _hits(failpoints, "maintenance:begin:before"),
        lambda n: n >= 2,
        what="begin retried by the pre-armed alarm",
    )

    # No generation was observed, so nothing was rearmed: the admission's pre-arm drives retries.
    host = await client.host_status(ids)
    assert host.pass_epoch == 0
    assert host.retry is None and host.last_error is None and host.last_outcome is None
    assert_autonomous_work_armed(host)

    failpoints.disarm("maintenance:begin:before")
    await assert_settled_once(client, ids, 1)
    host = await converged(client, ids)
    assert host.retry is None and host.last_error is None
    assert "maintenance:retry:before" not in failpoints.hits


async def _hits(failpoints: Failpoints, location: str) -> int:
    return failpoints.hits.get(location, 0)


# --- scenario 18: failure after dirty moved ---------------------------------------------------


async def test_scenario_18_failure_after_dirty_moved_rearms_at_the_minimum_delay(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    finish_fails = FailpointError("final transaction failed")
    await client.submit(ids, agent_id="scripted", input=say("first"))
    # Three failed finishes on one generation build up a durable backoff (stalls 3).
    for _ in range(3):
        failpoints.arm("maintenance:finish:before", pause=True, raise_error=finish_fails)
        await failpoints.reached("maintenance:finish:before")
        failpoints.release("maintenance:finish:before")
    failpoints.arm("maintenance:finish:before", pause=True, raise_error=finish_fails)
    await failpoints.reached("maintenance:finish:before")
    stalled = await client.host_status(ids)
    assert stalled.retry is not None and stalled.retry.stalls == 3
    observed = stalled.dirty

    await client.submit(ids, agent_id="scripted", input=say("racing"))
    failpoints.arm("maintenance:retry:after", pause=True)
    failpoints.arm("maintenance:begin:before", pause=True)
    failpoints.release("maintenance:finish:before")
    await reached_first(failpoints, "maintenance:retry:after", "maintenance:begin:before")
    host = await client.host_status(ids)
    rearmed_by = datetime.now(UTC)

    assert host.dirty == observed + 1
    assert host.retry is not None
    assert (host.retry.generation, host.retry.stalls) == (observed, 4)
    assert host.retry.native_only is False  # the final transaction is not native work
    assert host.last_error is not None and "final transaction failed" in host.last_error
    assert_autonomous_work_armed(host)
    assert host.alarm_at is not None
    # The backoff (stalls 3: 400..800 ms) does not postpone the racing generation: the alarm is
    # now + minimum_alarm_delay, well before the retry's notBefore.
    assert host.alarm_at <= rearmed_by + MIN_DELAY + CLOCK_SLACK
    assert host.retry.not_before - host.alarm_at >= timedelta(milliseconds=350) - MIN_DELAY

    failpoints.release("maintenance:retry:after")
    failpoints.release("maintenance:begin:before")
    await assert_settled_once(client, ids, 2)
    host = await converged(client, ids)
    assert host.retry is None


# --- scenario 19: faults around the failure rearm ---------------------------------------------


async def fault_at_rearm(
    client: ThreadwardenClient, failpoints: Failpoints, thread: str, location: str
) -> int:
    """A pass whose finish fails, then whose failure rearm faults at ``location``; the next pass
    is held at its begin. Returns the generation the failed pass observed."""
    failpoints.arm("maintenance:finish:before", pause=True, raise_error=FailpointError("finish"))
    await client.submit(thread, agent_id="scripted", input=say("first"))
    await failpoints.reached("maintenance:finish:before")
    observed = (await client.host_status(thread)).dirty
    failpoints.arm(location, pause=True, raise_error=FailpointError("rearm"))
    failpoints.arm("maintenance:begin:before", pause=True)  # catches the next pass
    failpoints.release("maintenance:finish:before")
    await reached_first(failpoints, location, "maintenance:begin:before")
    failpoints.release(location)
    await failpoints.reached("maintenance:begin:before")
    return observed


async def test_scenario_19_fault_at_retry_before_leaves_no_record_and_converges(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    await fault_at_rearm(client, failpoints, ids, "maintenance:retry:before")

    host = await client.host_status(ids)
    assert host.retry is None and host.last_error is None
    assert host.last_outcome is None  # neither finish nor the rearm committed
    assert_autonomous_work_armed(host)  # begin's pre-arm is what woke this pass

    failpoints.release("maintenance:begin:before")
    await assert_settled_once(client, ids, 1)
    host = await converged(client, ids)
    # The pass that settled it finished (actionable). The pre-armed alarm it was woken by
    # falls overdue for the sweeper as the fallback wait ends (3 s + 2 s grace against 5 s),
    # so a sweeper's wake can come during that pass: a caught-up pass then follows it.
    assert host.retry is None and host.last_error is None
    assert host.last_outcome in ("actionable", "caught-up")


async def test_scenario_19_fault_at_retry_after_keeps_the_record(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    observed = await fault_at_rearm(client, failpoints, ids, "maintenance:retry:after")

    host = await client.host_status(ids)
    assert host.retry is not None
    assert (host.retry.generation, host.retry.stalls, host.retry.native_only) == (
        observed,
        1,
        False,
    )
    assert host.last_outcome == "failed"
    assert host.last_error is not None and "finish" in host.last_error
    assert_autonomous_work_armed(host)

    failpoints.release("maintenance:begin:before")
    await assert_settled_once(client, ids, 1)
    host = await converged(client, ids)
    assert host.retry is None


# --- scenarios 24 and 29: heads without a compatible binding (27 is in test_temporal_faults) --

BINDING_ERROR_LOG = "awaits a compatible binding"


def binding_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Reports of a head waiting for its binding: an expected wait, one warning."""
    reports = [r for r in caplog.records if BINDING_ERROR_LOG in r.getMessage()]
    assert all(r.levelno < logging.ERROR for r in reports), reports
    return [r for r in reports if r.levelno == logging.WARNING]


@pytest.mark.usefixtures("worker")
async def test_scenario_24_missing_binding_releases_the_claim_and_other_threads_settle(
    client: ThreadwardenClient,
    failpoints: Failpoints,
    pool: asyncpg.Pool[Any],
    ids: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    blocked, other = f"{ids}-a-blocked", f"{ids}-b-served"  # the blocked lane sorts first
    admitted = datetime.now(UTC)
    # The first binding retry is what is checked: once it is recorded, the next one (due 5 s
    # later, which a slow machine can reach before the checks) is held before it persists.
    failpoints.arm("maintenance:binding-retry:after", pause=True, times=1)
    ghost = await client.submit(blocked, agent_id="ghost", input={"n": 1}, host_id=ids)
    await client.submit(other, agent_id="scripted", input=say("still served"), host_id=ids)
    await failpoints.reached("maintenance:binding-retry:after")
    failpoints.arm("maintenance:binding-retry:before", pause=True)
    failpoints.release("maintenance:binding-retry:after")

    await assert_settled_once(client, other, 1)
    host = await eventually(
        lambda: client.host_status(ids),
        lambda h: h.nonterminal == 1 and len(h.binding_retries) == 1 and h.retry is not None,
        what="the blocked head recorded and the host backing off",
    )
    assert host.last_outcome == "actionable" and host.last_error is None
    entry = host.binding_retries[0]
    assert (entry.thread_id, entry.submission_id, entry.attempts) == (
        blocked,
        ghost.submission_id,
        1,
    )
    assert entry.not_before - entry.reported_at == timedelta(seconds=5)
    assert admitted - CLOCK_SLACK <= entry.reported_at <= datetime.now(UTC)
    # The alarm waits for the binding backoff instead of spinning on the blocked head.
    assert_autonomous_work_armed(host)
    assert host.alarm_at is not None and host.alarm_at >= entry.not_before
    [row] = await submission_rows(pool, blocked)
    assert row["state"] == "ready" and row["attempts"] == 0
    assert row["ownership_token"] is None and row["lease_expires_at"] is None
    [report] = binding_errors(caplog)
    assert ghost.submission_id in report.getMessage()
    failpoints.release("maintenance:binding-retry:before")


async def test_scenario_29_fault_at_binding_retry_before_persists_nothing(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failure = FailpointError("binding bookkeeping failed")
    failpoints.arm("maintenance:binding-retry:before", pause=True, raise_error=failure)
    await client.submit(ids, agent_id="ghost", input={"n": 1})
    await failpoints.reached("maintenance:binding-retry:before")
    failpoints.arm("maintenance:begin:before", pause=True)  # the next pass
    failpoints.release("maintenance:binding-retry:before")
    await failpoints.reached("maintenance:begin:before")

    host = await client.host_status(ids)
    assert host.binding_retries == []
    assert host.retry is not None and host.retry.native_only is True
    assert host.last_outcome == "failed"
    assert host.last_error is not None and "binding bookkeeping failed" in host.last_error
    assert_autonomous_work_armed(host)

    failpoints.release("maintenance:begin:before")  # the next pass records the first entry
    host = await eventually(
        lambda: client.host_status(ids),
        lambda h: len(h.binding_retries) == 1,
        what="binding retry recorded by the re-attempt",
    )
    assert host.binding_retries[0].attempts == 1


async def test_scenario_29_fault_at_binding_retry_after_keeps_the_entry(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failure = FailpointError("after the entry")
    failpoints.arm("maintenance:binding-retry:after", pause=True, raise_error=failure)
    ghost = await client.submit(ids, agent_id="ghost", input={"n": 1})
    await failpoints.reached("maintenance:binding-retry:after")
    failpoints.arm("maintenance:retry:after", pause=True)
    failpoints.arm("maintenance:begin:before", pause=True)
    failpoints.release("maintenance:binding-retry:after")
    await reached_first(failpoints, "maintenance:retry:after", "maintenance:begin:before")

    host = await client.host_status(ids)
    [entry] = host.binding_retries
    assert (entry.submission_id, entry.attempts) == (ghost.submission_id, 1)
    assert entry.not_before - entry.reported_at == timedelta(seconds=5)
    assert host.retry is not None and host.retry.native_only is True
    assert host.last_error is not None and "after the entry" in host.last_error
    assert_autonomous_work_armed(host)
    failpoints.release("maintenance:retry:after")
    failpoints.release("maintenance:begin:before")


# --- scenario 16: native fault in the attempt --------------------------------------------------


async def test_scenario_16_native_fault_backs_off_monotonically_and_honours_a_due_aux_deadline(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    aux, failpoints = FakeHost(1_000), workers.failpoints  # only its deadline matters here
    lost = asyncpg.exceptions.ConnectionDoesNotExistError("connection lost")
    failpoints.arm("attempt:append", raise_error=lost)  # every attempt fails natively
    failpoints.arm("maintenance:retry:after", pause=True)
    async with workers.running(host=aux):
        await client.submit(ids, agent_id="scripted", input=say("after four faults"))
        not_befores: list[datetime] = []
        for failures in range(1, 5):
            if failures == 4:  # an aux deadline already due when the failure rearms
                failpoints.arm("maintenance:retry:before", pause=True)
                await failpoints.reached("maintenance:retry:before")
                aux.deadline = datetime.now(UTC) - timedelta(seconds=1)
                failpoints.release("maintenance:retry:before")
            await failpoints.reached("maintenance:retry:after")
            rearmed_by = datetime.now(UTC)
            host = await client.host_status(ids)
            assert host.last_outcome == "failed"
            assert host.last_error is not None and "ConnectionDoesNotExistError" in (
                host.last_error
            )
            assert host.retry is not None
            assert (host.retry.native_only, host.retry.stalls) == (True, failures)
            assert all(host.retry.not_before >= before for before in not_befores)
            not_befores.append(host.retry.not_before)
            assert_autonomous_work_armed(host)
            assert host.alarm_at is not None
            if aux.deadline is None:
                assert host.alarm_at == host.retry.not_before
            else:
                # nativeOnly: the due aux deadline still fires, at now + minimum delay,
                # before notBefore (stalls 3: a 400..800 ms backoff).
                assert aux.deadline < host.alarm_at <= rearmed_by + MIN_DELAY + CLOCK_SLACK
                assert host.alarm_at < host.retry.not_before - MIN_DELAY
            [row] = await submission_rows(pool, ids)
            assert (row["state"], row["attempts"], row["outcome"]) == ("ready", failures, None)
            # Release and re-arm with no await between: the next rearm cannot slip through.
            failpoints.release("maintenance:retry:after")
            if failures < 4:
                failpoints.arm("maintenance:retry:after", pause=True)
        aux.deadline = None
        failpoints.disarm("attempt:append")

        status = await assert_settled_once(client, ids, 1)
        host = await converged(client, ids)
    assert status.submissions[0].outcome == "completed"
    assert host.retry is None
    assert [r["kind"] for r in await client.records(ids)] == ["message", "settlement"]


# --- scenario 20: an attempt overruns the pass deadline ----------------------------------------


async def test_scenario_20_overrun_attempt_is_released_and_the_next_pass_settles_it_once(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    calls: list[int] = []
    cancelled: list[int] = []

    async def overruns_once(ctx: AttemptContext) -> Outcome:
        calls.append(1)
        await ctx.append("note", {"text": "committed before the overrun"})
        if len(calls) == 1:
            await hang_until_cancelled(cancelled)  # far past the pass deadline
        return Completed({"calls": len(calls)})

    # A 3 s pass deadline; a sweeper grace longer than a pass, so no wake doubles a pass.
    short = workers.tuned(pass_deadline_ms=3_000, yield_after_ms=2_000, sweep_grace_ms=30_000)
    failpoints = workers.failpoints
    failpoints.arm("maintenance:retry:after", pause=True)
    async with short.running(with_bindings(Binding("overrun", "d1", overruns_once))):
        await client.submit(ids, agent_id="overrun", input={})
        await failpoints.reached("maintenance:retry:after")
        host = await client.host_status(ids)
        assert host.last_error == "maintenance pass deadline"
        assert host.last_outcome == "failed"
        assert host.retry is not None
        assert (host.retry.native_only, host.retry.stalls) == (True, 1)
        assert_autonomous_work_armed(host)
        assert cancelled == [1]
        # Ownership was released before the failure was recorded; the committed step stays.
        [row] = await submission_rows(pool, ids)
        assert (row["state"], row["ownership_token"], row["attempts"]) == ("ready", None, 1)
        assert [r["kind"] for r in await client.records(ids)] == ["note"]
        failpoints.release("maintenance:retry:after")

        status = await assert_settled_once(client, ids, 1)
        host = await converged(client, ids)
    assert status.submissions[0].outcome == "completed"
    assert len(calls) == 2 and cancelled == [1]
    records = await client.records(ids)
    # The next pass replayed the committed step instead of writing it again.
    assert [r["kind"] for r in records] == ["note", "settlement"]
    assert records[-1]["body"]["result"] == {"calls": 2}
    assert host.retry is None
