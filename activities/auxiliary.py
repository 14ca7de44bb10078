"""The auxiliary work of a pass: publication, message delivery, host waves, projection backfill.

The workflow runs these beside the native work (docs/architecture.md, "The auxiliary scope").
Each bounds itself: a delivery batch by each claim's own deadline, a host wave by the plug-in's
allowance, a backfill batch by ``projection_timeout_ms``. Timeouts are persisted or silent,
never failures; errors surface to the workflow, which fails the pass only after the native
opportunity.

A cancelled host wave is waited for until it has really ended (so that the workflow, which waits
for the cancellation to complete, never starts the host's next wave beside it); the activity
gives up on it only at its own start-to-close deadline or when the worker shuts down, and then
the wave still guards its host on this worker: the host's next wave fails instead of overlapping.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from opentelemetry import trace
from temporalio import activity
from temporalio.client import Client

from threadwarden.activities.errors import domain_errors
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance, HostWaveStillRunning
from threadwarden.ledger.host_work import HostWork
from threadwarden.ledger.messages import DELIVERY_BATCH, PERMANENT, DeliveryClaim, Messages
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import Publications
from threadwarden.views import Receipt
from threadwarden.workflows import auxiliary_contracts, contracts
from threadwarden.workflows.client_calls import wake_host

logger = logging.getLogger(__name__)
T = TypeVar("T")

HEARTBEAT_EVERY_S = 1.0
"""How often a long auxiliary activity heartbeats (cancellation arrives with heartbeats)."""
CANCEL_GRACE_S = 5.0
"""How long a cancelled delivery may take to stop before the activity gives up on it."""


@dataclass(eq=False, kw_only=True)
class AuxiliaryActivities:
    """One instance per worker, holding the outboxes and the application's host plug-in."""

    publications: Publications
    messages: Messages
    projection: Projection
    host: HostMaintenance | None
    host_work: HostWork
    client: Client
    task_queue: str
    failpoints: Failpoints
    claim_timeout_ms: int
    projection_timeout_ms: int
    delivery_batch: int = DELIVERY_BATCH
    _waves: dict[str, asyncio.Task[bool]] = field(default_factory=dict, init=False)
    """The running wave of each host on this worker (also one its activity gave up on)."""

    @activity.defn(name=contracts.DRAIN_PUBLICATIONS)
    @domain_errors
    async def drain_publications(
        self, step: contracts.PassStepInput
    ) -> auxiliary_contracts.PublicationResult:
        """One bounded drain; a sink failure is persisted (backoff), never raised."""
        published = await self.publications.drain(step.host_id)
        return auxiliary_contracts.PublicationResult(
            published=published, pending=await self.publications.gate(step.host_id)
        )

    @activity.defn(name=contracts.DELIVER_MESSAGES)
    @domain_errors
    async def deliver_messages(
        self, step: auxiliary_contracts.DeliverInput
    ) -> auxiliary_contracts.DeliverResult:
        """Deliver one batch of the host's due messages, each bounded by its claim's deadline.

        The batch is the boundary at which delivery stops once the native work finished (the
        workflow starts the next batch only before that); ``more`` says the batch was full.
        """
        result = auxiliary_contracts.DeliverResult()
        for _ in range(self.delivery_batch):
            if datetime.now(UTC) >= step.dispatch_until:
                break
            claim = await self.messages.claim_due(
                step.host_id, claim_timeout_ms=self.claim_timeout_ms
            )
            if claim is None:
                break
            outcome = await _heartbeating(self._deliver(claim))
            if outcome == "delivered":
                result.delivered += 1
            elif outcome == "rejected":
                result.rejected += 1
            else:
                result.retried += 1
        else:
            result.more = True
        trace.get_current_span().set_attributes(
            {
                "threadwarden.host_id": step.host_id,
                "threadwarden.messages.delivered": result.delivered,
                "threadwarden.messages.retried": result.retried,
                "threadwarden.messages.rejected": result.rejected,
            }
        )
        return result

    async def _deliver(self, claim: DeliveryClaim) -> str:
        message_id = claim.message.message_id
        bound = max((claim.deadline - datetime.now(UTC)).total_seconds(), 0.001)
        try:
            receipt = await asyncio.wait_for(self._accept(claim), bound)
        except TimeoutError:
            await self.messages.retry_later(claim, "delivery timed out at its claim deadline")
            logger.warning("message %s: delivery timed out; retry persisted", message_id)
            return "retried"
        except PERMANENT as error:
            await self.messages.reject(claim, str(error))
            logger.error("message %s rejected by its destination: %s", message_id, error)
            return "rejected"
        except Exception as error:  # persisted and retried with backoff, never lost
            await self.messages.retry_later(claim, f"{type(error).__name__}: {error}")
            logger.warning("message %s: delivery failed (%r); retry persisted", message_id, error)
            return "retried"
        if receipt is None:
            return "retried"  # a newer claim owns it now
        await self._wake(receipt)
        return "delivered"

    async def _accept(self, claim: DeliveryClaim) -> Receipt | None:
        await self.failpoints.hit("delivery:accept")  # inside the claim's bound
        return await self.messages.accept(claim)

    async def _wake(self, receipt: Receipt) -> None:
        try:
            await wake_host(
                self.client, receipt.host_id, task_queue=self.task_queue, reason="message"
            )
        except Exception as error:  # a hint: the destination's durable alarm converges anyway
            logger.warning("wake of host %s failed: %r", receipt.host_id, error)

    @activity.defn(name=contracts.HOST_WAVE)
    @domain_errors
    async def host_wave(
        self, step: auxiliary_contracts.HostWaveInput
    ) -> auxiliary_contracts.HostWaveResult:
        """One wave of the host plug-in, heartbeating so that cancellation reaches it; first
        taking the host's due work mark when asked (put back if the wave does not succeed)."""
        running = self._waves.get(step.host_id)
        if running is not None and not running.done():
            raise HostWaveStillRunning(
                f"host {step.host_id}: an earlier wave ignored its cancellation and still runs"
                " on this worker; no wave starts beside it"
            )
        taken = await self.host_work.take_due(step.host_id) if step.take_host_work else None
        if self.host is None:
            return auxiliary_contracts.HostWaveResult(
                more=False
            )  # a mark without a plug-in: nothing to run
        trace.get_current_span().set_attributes(
            {"threadwarden.host_id": step.host_id, "threadwarden.allowance_ms": step.allowance_ms}
        )
        wave = asyncio.ensure_future(
            self.host.wave(step.host_id, dispatch_until=step.dispatch_until)
        )
        self._waves[step.host_id] = wave
        wave.add_done_callback(lambda done: self._forget(step.host_id, done))
        try:
            return auxiliary_contracts.HostWaveResult(more=await _outlasting(wave))
        except BaseException:
            if taken is not None:
                await self._put_back(step.host_id, taken)
            raise

    def _forget(self, host_id: str, wave: asyncio.Task[bool]) -> None:
        if self._waves.get(host_id) is wave:
            del self._waves[host_id]

    async def _put_back(self, host_id: str, taken: datetime) -> None:
        try:
            await self.host_work.put_back(host_id, taken)
        except Exception as error:  # the plug-in's own pending deadline still joins the alarm
            logger.warning("host %s: putting back its work mark failed: %r", host_id, error)

    @activity.defn(name=contracts.BACKFILL_PROJECTION)
    @domain_errors
    async def backfill_projection(
        self, step: contracts.PassStepInput
    ) -> auxiliary_contracts.BackfillResult:
        """At most one batch, under the projection timeout; a timeout is silent."""
        return await self.bounded_backfill(step.host_id)

    async def bounded_backfill(self, host_id: str) -> auxiliary_contracts.BackfillResult:
        """One projection batch under ``projection_timeout_ms``; a timeout is silent."""
        try:
            refreshed = await asyncio.wait_for(
                self._backfill(host_id), self.projection_timeout_ms / 1000
            )
        except TimeoutError:
            logger.debug("projection backfill of %s timed out", host_id)
            return auxiliary_contracts.BackfillResult(timed_out=True)
        return auxiliary_contracts.BackfillResult(refreshed=refreshed)

    async def _backfill(self, host_id: str) -> int:
        await self.failpoints.hit("projection")  # inside the bound: a pause here times out
        return await self.projection.backfill(host_id)


async def host_deadline(host: HostMaintenance | None, host_id: str) -> datetime | None:
    """The plug-in's pending deadline; a failing read counts as none (it is logged)."""
    if host is None:
        return None
    try:
        return await host.pending_deadline(host_id)
    except Exception as error:
        logger.warning("host plug-in pending_deadline(%s) failed: %r", host_id, error)
        return None


async def _beating(task: asyncio.Future[T]) -> T:
    """Await ``task``, heartbeating every `HEARTBEAT_EVERY_S` (cancellation arrives with the
    heartbeats' answers)."""
    while True:
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_S)
        if done:
            return task.result()
        activity.heartbeat()


async def _heartbeating(work: Awaitable[T]) -> T:
    """Await ``work`` while heartbeating; cancelling the activity cancels the work."""
    task = asyncio.ensure_future(work)
    try:
        return await _beating(task)
    finally:
        if not task.done():
            task.cancel()
            # Bounded: a delivery stuck in a destination that swallows its cancellation must
            # not hold the activity (and a worker's shutdown) forever; its claim's deadline
            # makes the message due again.
            finished, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
            if finished:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    task.result()
            else:
                logger.warning(
                    "auxiliary work ignored its cancellation for %s s; left behind", CANCEL_GRACE_S
                )


async def _outlasting(wave: asyncio.Task[bool]) -> bool:
    """Await a host wave while heartbeating. When the activity is cancelled, cancel the wave
    once and keep waiting (heartbeating) until it has ended; give up only at the activity's
    start-to-close deadline or when the worker shuts down."""
    try:
        return await _beating(wave)
    except asyncio.CancelledError:
        await _until_ended(wave)
        raise


async def _until_ended(wave: asyncio.Task[bool]) -> None:
    info = activity.info()
    timeout = info.start_to_close_timeout
    deadline = info.started_time + timeout if timeout else None
    wave.cancel()
    beats = 0
    while not wave.done():
        # The SDK may cancel this activity again (its deadline passed): keep waiting.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({wave}, timeout=HEARTBEAT_EVERY_S)
        if wave.done():
            break
        if activity.is_worker_shutdown() or (deadline and datetime.now(UTC) >= deadline):
            logger.warning(
                "a host wave ignored its cancellation until its activity's end; it still guards"
                " its host on this worker"
            )
            return
        beats += 1
        activity.heartbeat(beats)  # the details count the beats spent waiting
    with contextlib.suppress(asyncio.CancelledError, Exception):
        wave.result()
