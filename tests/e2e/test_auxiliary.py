"""The auxiliary scope of a pass: host waves and their allowance (scenarios 30–32), the
required-publication gate (34) and one projection batch per pass, only when due (33)."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from tests.helpers.checks import assert_settled_once, converged, say, settled
from tests.helpers.hosts import FakeHost
from tests.helpers.idle import idle_host
from tests.helpers.polling import eventually
from tests.helpers.sinks import RequiredSink
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import connect_temporal
from threadwarden.config.settings import Settings
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.scripted import scripted_binding
from threadwarden.workflows import contracts


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The tests' settings with a sweeper grace longer than any pass here. Passes with a hung or
    stubborn host wave last up to the wave's bound (or the 5 s a wave may ignore its
    cancellation); with the 200 ms grace the sweeper would find each pass's pre-armed alarm
    overdue and wake the host into one more such pass (docs/operations.md, "A pass longer than
    the grace")."""
    return settings.model_copy(update={"sweep_grace_ms": 30_000})


@pytest.mark.parametrize("allowance", [0, 300_001, 1.5, math.nan, "1000"])
async def test_scenario_30_invalid_host_allowance_fails_the_pass_after_the_native_work(
    workers: Workers, client: ThreadwardenClient, ids: str, allowance: object
) -> None:
    host = FakeHost(allowance)
    workers.failpoints.arm("maintenance:retry:after", pause=True)  # hold the failed pass's rearm
    async with workers.running(host=host):
        await client.submit(ids, agent_id="scripted", input=say("native first"))
        await workers.failpoints.reached("maintenance:retry:after")
        status = await client.thread_status(ids)  # the head ran before the pass failed
        assert [(s.state, s.outcome) for s in status.submissions] == [("settled", "completed")]
        row = await client.host_status(ids)
        assert row.last_error is not None
        assert "host dispatch allowance: Declare an integer" in row.last_error
        assert row.retry is not None and row.retry.native_only is False
        assert row.processed < row.dirty
        assert host.waves == {}  # no wave runs under an invalid allowance


async def test_scenario_31_a_wave_ignoring_the_end_of_native_work_is_cut_off(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    host = FakeHost(500, hang=True)
    async with workers.running(host=host):
        await client.submit(ids, agent_id="scripted", input=say("not held up"))
        await settled(client, ids, 1)
        row = await converged(client, ids)  # the passes succeeded: a timeout is no failure
        assert row.last_error is None and row.retry is None and row.last_outcome != "failed"
        await eventually(
            lambda: asyncio.sleep(0, len(host.cancelled)),
            lambda cancelled: cancelled >= host.waves[ids],
            what="every hung wave cancelled",
        )
        handle = await _host_workflow(workers, ids)
        await eventually(
            handle.describe,
            lambda d: d.status == WorkflowExecutionStatus.COMPLETED,
            what="the host's run completed",
        )
        status = await handle.query(contracts.STATUS_QUERY, result_type=contracts.WorkflowStatus)
        assert status.last_pass is not None and status.last_pass.host_timed_out
        assert status.last_pass.outcome != "failed"
        # Each pass joined its hung wave on a timer of min(allowance, dispatch_until - now) —
        # the allowance here, the pass deadline being minutes away — then cancelled it.
        timers, cancelled_waves = await _joins(handle)
        assert timers.count(timedelta(milliseconds=500)) == cancelled_waves == host.waves[ids]
        assert all(t == timedelta(milliseconds=500) or t > timedelta(minutes=1) for t in timers)


async def _host_workflow(workers: Workers, host_id: str) -> WorkflowHandle[Any, Any]:
    temporal = await connect_temporal(
        workers.connections.temporal_address, workers.settings.temporal_namespace
    )
    return temporal.get_workflow_handle(contracts.host_workflow_id(host_id))


async def _joins(handle: WorkflowHandle[Any, Any]) -> tuple[list[timedelta], int]:
    """The run's timers (their durations) and how many host waves it cancelled."""
    timers: list[timedelta] = []
    waves: set[int] = set()
    cancelled = 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            timers.append(event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta())
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == contracts.HOST_WAVE:
                waves.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED:
            scheduled = event.activity_task_cancel_requested_event_attributes.scheduled_event_id
            cancelled += scheduled in waves
    return timers, cancelled


class StubbornHost(FakeHost):
    """A host plug-in whose waves swallow their cancellation and run on until ``stop``; it
    counts the waves running at once and logs wave starts, ends and the finishes' deadline
    reads."""

    def __init__(self, allowance: object) -> None:
        super().__init__(allowance)
        self.stop = asyncio.Event()
        self.running = 0
        self.most_running = 0
        self.events: list[str] = []

    async def wave(self, host_id: str, *, dispatch_until: datetime) -> bool:
        self.waves[host_id] = self.waves.get(host_id, 0) + 1
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        self.events.append("start")
        try:
            while not self.stop.is_set():
                try:
                    await self.stop.wait()
                except asyncio.CancelledError:
                    self.cancelled.append(1)  # and carry on regardless
        finally:
            self.running -= 1
            self.events.append("end")
        return False

    async def pending_deadline(self, host_id: str) -> datetime | None:
        self.events.append("finish")  # read by every finish (and failure rearm) of a pass
        return self.deadline


async def test_a_wave_that_swallows_its_cancellation_holds_the_pass_and_never_overlaps(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    host = StubbornHost(300)
    try:
        async with workers.running(host=host):
            await client.submit(ids, agent_id="scripted", input=say("first"))
            await settled(client, ids, 1)
            await eventually(
                lambda: asyncio.sleep(0, len(host.cancelled)), bool, what="the wave cut off"
            )
            handle = await _host_workflow(workers, ids)
            # The cancelled wave's activity keeps waiting for it (heartbeating, each beat
            # counted in its details) instead of leaving it behind...
            await eventually(
                lambda: _beats_waiting(handle),
                lambda beats: beats >= 3,
                what="the wave's activity waiting for the cancelled wave",
            )
            await client.submit(ids, agent_id="scripted", input=say("second"))  # a wake
            # ... and the pass waits for it: no finish, no second wave.
            assert host.events == ["start"]
            assert (await client.thread_status(ids)).submissions[1].state != "settled"
            host.stop.set()
            await settled(client, ids, 2)
            row = await converged(client, ids)
            assert row.last_error is None and row.retry is None
        assert host.most_running == 1
        assert host.events[:3] == ["start", "end", "finish"]
        assert host.waves[ids] >= 2
    finally:
        host.stop.set()


async def _beats_waiting(handle: WorkflowHandle[Any, Any]) -> int:
    """Heartbeats of the host wave activity spent waiting for its cancelled wave."""
    described = await handle.describe()
    for pending in described.raw_description.pending_activities:
        payloads = pending.heartbeat_details.payloads
        if pending.activity_type.name == contracts.HOST_WAVE and payloads:
            return int(json.loads(payloads[0].data))
    return 0


async def test_scenario_32_caught_up_pass_runs_one_wave_and_rearms_at_the_hosts_deadline(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    host = FakeHost(1_000)
    async with workers.running(host=host):
        await idle_host(client, workers.connections, ids, "then quiet")
        before = host.waves[ids]
        host.deadline = datetime.now(UTC) + timedelta(minutes=5)
        await client.wake(ids, reason="test")
        row = await eventually(
            lambda: client.host_status(ids),
            lambda h: (
                h.alarm_at is not None and h.alarm_at > datetime.now(UTC) + timedelta(minutes=1)
            ),
            what="the alarm set from the host's deadline",
        )
        assert row.alarm_at is not None
        assert abs(row.alarm_at - host.deadline) <= timedelta(milliseconds=1)  # ms precision
        assert host.waves[ids] == before + 1  # one initial wave on the caught-up pass
        host.deadline = None
        await client.wake(ids, reason="test")
        row = await eventually(
            lambda: client.host_status(ids),
            lambda h: h.alarm_at is None,
            what="the alarm cleared once nothing is pending",
        )
        assert host.waves[ids] == before + 2
        assert row.processed == row.dirty


async def test_scenario_34_pending_required_publication_holds_native_work(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    sink = RequiredSink()
    async with workers.running(sinks=[sink]):
        await client.submit(ids, agent_id="scripted", input=say("first"))
        await settled(client, ids, 1)  # its records could not be published
        second = await client.submit(ids, agent_id="scripted", input=say("second"))
        start = (await client.host_status(ids)).pass_epoch
        row = await eventually(
            lambda: client.host_status(ids),
            lambda h: h.pass_epoch >= start + 3,
            what="several blocked passes",
        )
        status = await client.thread_status(ids)
        held = status.submissions[1]
        assert (held.submission_id, held.state, held.attempts) == (second.submission_id, "ready", 0)
        assert row.processed < row.dirty
        assert row.auxiliary_due is not None and row.auxiliary_due.publication is not None
        # The alarm is min(native fallback, pending deadline): never later than the fallback.
        alarm = await pool.fetchrow(
            "SELECT alarm_at, updated_at FROM threadwarden.hosts WHERE host_id = $1", ids
        )
        assert alarm is not None and alarm["alarm_at"] is not None
        fallback = timedelta(milliseconds=workers.settings.wake_scan_interval_ms)
        assert alarm["alarm_at"] <= alarm["updated_at"] + fallback
        sink.failing = False
        await assert_settled_once(client, ids, 2)
        await converged(client, ids)
    first_records = {r.record_id for r in sink.published}
    assert {f"{ids}:1", f"{ids}:2"} <= first_records


async def test_scenario_34_pending_required_publication_holds_recovery_of_a_stalled_attempt(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """Brief §3.5: recovery belongs to the native path, after the publication gate. A stalled
    attempt (its worker died, its lease lapsed) is not recovered while a required publication
    is pending; it is once the sink publishes."""
    receipt = await client.submit(ids, agent_id="scripted", input=say("stalled"))
    settings = workers.settings
    begun = await Maintenance(pool, settings.timing).begin(ids, datetime.now(UTC))
    digests = {"scripted": scripted_binding().digest}
    attempts = Attempts(pool, lease_ms=settings.lease_ms)
    claim = await attempts.claim_head(ids, begun.epoch, ids, bindings=digests)
    assert claim is not None and claim.submission_id == receipt.submission_id
    # It committed a record before it died, never published: the required sink waits for it.
    await attempts.append(claim, "note", {"by": "the worker that died"})
    await pool.execute(  # the worker holding the claim died: its lease ran out
        "UPDATE threadwarden.submissions SET lease_expires_at = clock_timestamp() - interval '1 s'"
        " WHERE submission_id = $1",
        claim.submission_id,
    )
    stalled = await _submission(pool, claim.submission_id)
    sink = RequiredSink()
    async with workers.running(sinks=[sink]):
        await eventually(
            lambda: client.host_status(ids),
            lambda h: h.pass_epoch >= begun.epoch + 3,
            what="several publication-blocked passes",
        )
        assert await _submission(pool, claim.submission_id) == stalled  # not recovered
        sink.failing = False
        await assert_settled_once(client, ids, 1)
        await converged(client, ids)
    recovered = await _submission(pool, claim.submission_id)
    assert recovered["attempts"] == stalled["attempts"] + 1  # recovered, then run once more


async def _submission(pool: asyncpg.Pool[Any], submission_id: str) -> dict[str, Any]:
    row = await pool.fetchrow(
        "SELECT state, attempts, epoch, attempt_id, lease_expires_at, outcome"
        " FROM threadwarden.submissions WHERE submission_id = $1",
        submission_id,
    )
    assert row is not None
    return dict(row)


async def test_scenario_33_one_projection_batch_per_pass_and_only_when_due(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    failpoints = workers.failpoints
    async with workers.running():
        await idle_host(client, workers.connections, ids)  # the passes counted are the test's own
        failpoints.arm("projection", observe=True)
        failpoints.arm("maintenance:finish:after", observe=True)
        await client.wake(ids, reason="test")  # a caught-up pass with every summary fresh
        await eventually(
            lambda: asyncio.sleep(0, failpoints.hits.get("maintenance:finish:after", 0)),
            lambda finished: finished >= 1,
            what="a caught-up pass",
        )
        assert failpoints.hits.get("projection", 0) == 0  # nothing due: no batch ran
        # 60 threads on the host without summaries: two batches (50 + 10), one per pass.
        await pool.executemany(
            "INSERT INTO threadwarden.threads (thread_id, host_id) VALUES ($1, $2)",
            [(f"{ids}-{n:02d}", ids) for n in range(60)],
        )
        failpoints.arm("maintenance:finish:before", pause=True, times=1)
        await client.rebuild_projection(ids)
        await failpoints.reached("maintenance:finish:before")
        assert await _summaries(pool, ids) == 50  # the first pass backfilled one batch
        assert failpoints.hits["projection"] == 1
        failpoints.release("maintenance:finish:before")
        await eventually(
            lambda: _summaries(pool, ids), lambda n: n == 61, what="the rest backfilled"
        )
        await converged(client, ids)
        assert failpoints.hits["projection"] == 2


async def _summaries(pool: asyncpg.Pool[Any], host_id: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM threadwarden.thread_summaries WHERE host_id = $1", host_id
        )
    )
