"""The host workflow's pass paths end to end (real worker, Temporal dev server, Postgres): a fault
after begin committed rearms with the observed generation (docs/protocol.md), the caught-up path
inside an open retry window runs auxiliary work only (scenario 13), and a publication-blocked pass
holds native work back and rearms at min(native fallback, pending deadline) (scenario 34).

What did (or did not) run is counted with observing failpoints and the rows the native path
would write; alarms are asserted exactly, or between the formula's values at the earliest and
the latest instant the pass's ``now`` can have had.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType

from tests.helpers.alarms import CLOCK_SLACK, MIN_DELAY, whole_ms
from tests.helpers.checks import (
    assert_autonomous_work_armed,
    assert_settled_once,
    converged,
    quiescent,
    say,
    settled,
)
from tests.helpers.hosts import FakeHost
from tests.helpers.polling import eventually
from tests.helpers.sinks import RequiredSink
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.models import to_ms
from threadwarden.workflows.contracts import BEGIN_PASS, FINISH_CAUGHT_UP, host_workflow_id


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A sweeper grace longer than a paused pass: the sweeper must not add passes of its own
    while a test holds one (wakes are deferred anyway; this keeps the counts readable)."""
    return settings.model_copy(update={"sweep_grace_ms": 30_000})


# --- begin's observed generation ------------------------------------------------


async def test_fault_at_begin_before_observes_nothing_and_rearms_nothing(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm("maintenance:begin:before", times=1)
    failpoints.arm("maintenance:retry:before", observe=True)
    failpoints.arm("maintenance:select:before", pause=True)  # the next pass, once it began
    await client.submit(ids, agent_id="scripted", input=say("after a failed begin"))
    await failpoints.reached("maintenance:select:before")

    host = await client.host_status(ids)
    assert failpoints.hits["maintenance:begin:before"] == 1
    assert host.pass_epoch == 1  # only the second begin committed
    assert host.retry is None and host.last_outcome is None and host.last_error is None
    assert "maintenance:retry:before" not in failpoints.hits  # generation unset: no rearm

    failpoints.release("maintenance:select:before")
    await assert_settled_once(client, ids, 1)
    host = await converged(client, ids)
    assert host.retry is None
    assert "maintenance:retry:before" not in failpoints.hits


async def test_fault_at_begin_after_rearms_the_observed_generation_as_auxiliary(
    worker: None, client: ThreadwardenClient, failpoints: Failpoints, ids: str
) -> None:
    failpoints.arm("maintenance:begin:after", times=1)
    failpoints.arm("maintenance:retry:after", pause=True)
    failpoints.arm("claim", observe=True)
    submitted = datetime.now(UTC)
    await client.submit(ids, agent_id="scripted", input=say("after the fault"))
    await failpoints.reached("maintenance:retry:after")
    reached = datetime.now(UTC)

    host = await client.host_status(ids)
    assert host.pass_epoch == 1  # begin committed once: its generation was observed
    assert host.retry is not None
    # nativeOnly is false: the pass failed before any native work ran.
    assert (host.retry.generation, host.retry.native_only, host.retry.stalls) == (
        host.dirty,
        False,
        1,
    )
    assert host.last_outcome == "failed"
    assert host.last_error is not None and "maintenance:begin:after" in host.last_error
    assert "claim" not in failpoints.hits
    assert_autonomous_work_armed(host)
    # §3.6 with no racing mutation and no auxiliary deadline: the alarm is notBefore, and
    # notBefore = now + ceil(b/2 + b/2·j) with b = base = 100 ms, for the rearm's now.
    assert host.alarm_at == host.retry.not_before
    earliest = whole_ms(submitted) + timedelta(milliseconds=50) - CLOCK_SLACK
    latest = reached + timedelta(milliseconds=100) + CLOCK_SLACK
    assert earliest <= host.retry.not_before <= latest

    failpoints.release("maintenance:retry:after")
    status = await assert_settled_once(client, ids, 1)
    assert status.submissions[0].outcome == "completed"
    host = await converged(client, ids)
    assert host.retry is None and failpoints.hits["claim"] == 1


# --- scenario 13: inside an open retry window, auxiliary work only ----------------------------


async def _native_footprint(pool: asyncpg.Pool[Any], host_id: str) -> list[dict[str, Any]]:
    """What recovery, selection or an attempt would change: the host's cursor and binding
    retries, and every submission's state, attempts, epoch and lease."""
    host = await pool.fetch(
        "SELECT last_served_thread_id, binding_retries, retry, processed FROM threadwarden.hosts"
        " WHERE host_id = $1",
        host_id,
    )
    subs = await pool.fetch(
        "SELECT s.submission_id, s.state, s.attempts, s.epoch, s.lease_expires_at,"
        " t.producer_epoch FROM threadwarden.submissions s JOIN threadwarden.threads t"
        " USING (thread_id) WHERE t.host_id = $1 ORDER BY s.submission_id",
        host_id,
    )
    return [dict(r) for r in [*host, *subs]]


async def test_scenario_13_inside_the_retry_window_only_auxiliary_work_runs(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    host, failpoints = FakeHost(1_000), workers.failpoints
    async with workers.running(host=host):
        # A head without a binding: the pass records its binding retry and, having made no
        # progress, a maintenance retry (native_only) that opens the window.
        await client.submit(ids, agent_id="ghost", input={"n": 1})
        row = await eventually(
            lambda: client.host_status(ids),
            lambda h: h.retry is not None and len(h.binding_retries) == 1,
            what="the retry window opened",
        )
        assert row.retry is not None and row.retry.native_only is True
        # Widen the window to ten minutes, so that no pass of this test can outlive it.
        not_before = whole_ms(datetime.now(UTC) + timedelta(minutes=10))
        await pool.execute(
            "UPDATE threadwarden.hosts"
            " SET retry = jsonb_set(retry, '{not_before}', to_jsonb($2::bigint))"
            " WHERE host_id = $1",
            ids,
            to_ms(not_before),
        )
        for location in ("maintenance:begin:before", "maintenance:select:before", "claim"):
            failpoints.arm(location, observe=True)
        before = await _native_footprint(pool, ids)
        waves = host.waves[ids]

        # An early alarm with an auxiliary deadline inside the window: the deadline wins.
        host.deadline = whole_ms(datetime.now(UTC) + timedelta(minutes=1))
        await client.wake(ids, reason="early alarm")
        row = await eventually(
            lambda: client.host_status(ids),
            lambda h: h.alarm_at == host.deadline,
            what="the alarm set to the host's deadline",
        )
        assert row.last_outcome == "caught-up"
        # Then with no auxiliary deadline: max(now + minDelay, notBefore) = notBefore.
        host.deadline = None
        await client.wake(ids, reason="early alarm")
        row = await eventually(
            lambda: client.host_status(ids),
            lambda h: h.alarm_at == not_before,
            what="the alarm set to the window's notBefore",
        )

        passes = failpoints.hits["maintenance:begin:before"]
        assert passes >= 2
        assert host.waves[ids] - waves == passes  # every pass ran its one initial wave...
        assert "maintenance:select:before" not in failpoints.hits  # ...and no selection,
        assert "claim" not in failpoints.hits  # no attempt,
        assert await _native_footprint(pool, ids) == before  # no recovery, nothing native
        assert row.last_outcome == "caught-up" and row.processed < row.dirty
        assert row.retry is not None and row.retry.stalls == 1


# --- scenario 34: publication pending after the drain -----------------------------------------


async def test_scenario_34_blocked_pass_rearms_at_min_of_fallback_and_pending_deadline(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    sink, failpoints = RequiredSink(), workers.failpoints
    async with workers.running(sinks=[sink]):
        await client.submit(ids, agent_id="scripted", input=say("first"))
        await settled(client, ids, 1)  # its records could not be published
        failpoints.arm("maintenance:begin:before", pause=True)
        second = await client.submit(ids, agent_id="scripted", input=say("second"))
        await failpoints.reached("maintenance:begin:before")
        failpoints.arm("maintenance:finish:after", pause=True)
        for location in ("maintenance:select:before", "claim"):
            failpoints.arm(location, observe=True)
        before = await client.host_status(ids)
        released = datetime.now(UTC)  # the pass's finish reads its now after this
        failpoints.release("maintenance:begin:before")
        await failpoints.reached("maintenance:finish:after")
        finished = datetime.now(UTC)

        row = await client.host_status(ids)
        assert row.last_outcome == "caught-up"  # the blocked finish
        assert row.auxiliary_due is not None and row.auxiliary_due.publication is not None
        pending = whole_ms(row.auxiliary_due.publication)  # alarms are kept in whole milliseconds
        # No recovery, no attempt, processed unchanged.
        assert "maintenance:select:before" not in failpoints.hits and "claim" not in failpoints.hits
        assert row.processed == before.processed < row.dirty
        held = (await client.thread_status(ids)).submissions[1]
        assert (held.submission_id, held.state, held.attempts) == (second.submission_id, "ready", 0)
        # alarm = max(now + minDelay, min(now + wakeScanInterval, pending)), for the finish's now
        # somewhere in [released, finished].
        fallback = timedelta(milliseconds=workers.settings.wake_scan_interval_ms)

        def alarm(now: datetime) -> datetime:
            return max(now + MIN_DELAY, min(now + fallback, pending))

        assert row.alarm_at is not None
        assert alarm(released) - CLOCK_SLACK <= row.alarm_at <= alarm(finished) + CLOCK_SLACK
        if finished + MIN_DELAY < pending < released + fallback:
            assert row.alarm_at == pending  # the pending deadline, exactly

        failpoints.release("maintenance:finish:after")
        sink.failing = False
        await assert_settled_once(client, ids, 2)
        await converged(client, ids)


# --- an admission during a pass -------------------------------------------------------------


async def test_a_pass_that_saw_an_admission_skip_its_wake_is_followed_at_once(
    worker: None,
    client: ThreadwardenClient,
    failpoints: Failpoints,
    connections: Connections,
    ids: str,
) -> None:
    await client.submit(ids, agent_id="scripted", input=say("first"))
    await assert_settled_once(client, ids, 1)
    await quiescent(client, connections, ids)
    failpoints.arm("maintenance:finish:before", pause=True, times=1)
    await client.wake(ids)  # a caught-up pass, held before its finish
    await failpoints.reached("maintenance:finish:before")
    receipt = await client.submit(ids, agent_id="scripted", input=say("second"))
    assert not receipt.wake  # the held pass's pre-armed alarm stands for the wake
    failpoints.release("maintenance:finish:before")
    await assert_settled_once(client, ids, 2)

    # The finish saw the generation move (its alarm: the admission's minimum delay); the run
    # began the next pass at once instead of waiting for that alarm.
    temporal = await connect_temporal(connections.temporal_address, "default")
    steps: list[tuple[str, str]] = []
    async for event in temporal.get_workflow_handle(host_workflow_id(ids)).fetch_history_events():
        summary = (  # a JSON string payload
            json.loads(event.user_metadata.summary.data) if event.HasField("user_metadata") else ""
        )
        steps.append((EventType.Name(event.event_type).removeprefix("EVENT_TYPE_"), summary))
    finished = [i for i, (_, s) in enumerate(steps) if s.startswith(FINISH_CAUGHT_UP)]
    assert finished, steps
    after = steps[finished[-1] + 1 :]
    begun = next(i for i, (_, s) in enumerate(after) if s.startswith(BEGIN_PASS))
    waits = [k for k, _ in after[:begun] if k in ("ACTIVITY_TASK_SCHEDULED", "TIMER_STARTED")]
    assert waits == [], after[: begun + 1]
