"""The auxiliary work of a pass: publication, message delivery, host waves, projection backfill.

The workflow runs these beside the native work (SPEC §2 "auxiliary scope"). Each bounds
itself: delivery by each claim's own deadline, a host wave by the plug-in's allowance, a
backfill batch by ``projection_timeout_ms``. Timeouts are persisted or silent, never failures;
errors surface to the workflow, which fails the pass only after the native opportunity.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import TypeVar

from opentelemetry import trace
from temporalio import activity
from temporalio.client import Client

from activities.errors import domain_errors
from activities.wake import wake_host
from ledger.messages import PERMANENT, DeliveryClaim, Messages
from ledger.models import Receipt
from ledger.projection import Projection
from ledger.publication import Publications
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from workflows import contracts as c

logger = logging.getLogger(__name__)
T = TypeVar("T")

HEARTBEAT_EVERY_S = 1.0
"""How often a long auxiliary activity heartbeats (cancellation arrives with heartbeats)."""
CANCEL_GRACE_S = 5.0
"""How long a cancelled wave or delivery may take to stop before the activity gives up on it."""


class AuxiliaryActivities:
    """One instance per worker, holding the outboxes and the application's host plug-in."""

    def __init__(
        self,
        *,
        publications: Publications,
        messages: Messages,
        projection: Projection,
        host: HostMaintenance | None,
        client: Client,
        task_queue: str,
        failpoints: Failpoints,
        claim_timeout_ms: int,
        projection_timeout_ms: int,
    ) -> None:
        self._publications = publications
        self._messages = messages
        self._projection = projection
        self._host = host
        self._client = client
        self._task_queue = task_queue
        self._failpoints = failpoints
        self._claim_timeout_ms = claim_timeout_ms
        self._projection_timeout_s = projection_timeout_ms / 1000

    @activity.defn(name=c.DRAIN_PUBLICATIONS)
    @domain_errors
    async def drain_publications(self, step: c.PassStepInput) -> c.PublicationResult:
        """One bounded drain; a sink failure is persisted (backoff), never raised."""
        published = await self._publications.drain(step.host_id)
        return c.PublicationResult(
            published=published, pending=await self._publications.gate(step.host_id)
        )

    @activity.defn(name=c.DELIVER_MESSAGES)
    @domain_errors
    async def deliver_messages(self, step: c.DeliverInput) -> c.DeliverResult:
        """Deliver the host's due messages, each bounded by its claim's deadline."""
        result = c.DeliverResult()
        while datetime.now(UTC) < step.dispatch_until:
            claim = await self._messages.claim_due(
                step.host_id, claim_timeout_ms=self._claim_timeout_ms
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
            await self._messages.retry_later(claim, "delivery timed out at its claim deadline")
            logger.warning("message %s: delivery timed out; retry persisted", message_id)
            return "retried"
        except PERMANENT as error:
            await self._messages.reject(claim, str(error))
            logger.error("message %s rejected by its destination: %s", message_id, error)
            return "rejected"
        except Exception as error:  # persisted and retried with backoff, never lost
            await self._messages.retry_later(claim, f"{type(error).__name__}: {error}")
            logger.warning("message %s: delivery failed (%r); retry persisted", message_id, error)
            return "retried"
        if receipt is None:
            return "retried"  # a newer claim owns it now
        await self._wake(receipt)
        return "delivered"

    async def _accept(self, claim: DeliveryClaim) -> Receipt | None:
        await self._failpoints.hit("delivery:accept")  # inside the claim's bound
        return await self._messages.accept(claim)

    async def _wake(self, receipt: Receipt) -> None:
        try:
            await wake_host(
                self._client, receipt.host_id, task_queue=self._task_queue, reason="message"
            )
        except Exception as error:  # a hint: the destination's durable alarm converges anyway
            logger.warning("wake of host %s failed: %r", receipt.host_id, error)

    @activity.defn(name=c.HOST_WAVE)
    @domain_errors
    async def host_wave(self, step: c.HostWaveInput) -> c.HostWaveResult:
        """One wave of the host plug-in, heartbeating so that cancellation reaches it."""
        if self._host is None:
            return c.HostWaveResult(more=False)
        trace.get_current_span().set_attributes(
            {"threadwarden.host_id": step.host_id, "threadwarden.allowance_ms": step.allowance_ms}
        )
        wave = self._host.wave(step.host_id, dispatch_until=step.dispatch_until)
        return c.HostWaveResult(more=await _heartbeating(wave))

    @activity.defn(name=c.BACKFILL_PROJECTION)
    @domain_errors
    async def backfill_projection(self, step: c.PassStepInput) -> c.BackfillResult:
        """At most one batch, under the projection timeout; a timeout is silent."""
        return await self.bounded_backfill(step.host_id)

    async def bounded_backfill(self, host_id: str) -> c.BackfillResult:
        """One projection batch under ``projection_timeout_ms``; a timeout is silent."""
        try:
            refreshed = await asyncio.wait_for(self._backfill(host_id), self._projection_timeout_s)
        except TimeoutError:
            logger.debug("projection backfill of %s timed out", host_id)
            return c.BackfillResult(timed_out=True)
        return c.BackfillResult(refreshed=refreshed)

    async def _backfill(self, host_id: str) -> int:
        await self._failpoints.hit("projection")  # inside the bound: a pause here times out
        return await self._projection.backfill(host_id)


async def host_deadline(host: HostMaintenance | None, host_id: str) -> datetime | None:
    """The plug-in's pending deadline; a failing read counts as none (it is logged)."""
    if host is None:
        return None
    try:
        return await host.pending_deadline(host_id)
    except Exception as error:
        logger.warning("host plug-in pending_deadline(%s) failed: %r", host_id, error)
        return None


async def _heartbeating(work: Awaitable[T]) -> T:
    """Await ``work`` while heartbeating; cancelling the activity cancels the work."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_S)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()
            # Bounded: a plug-in that swallows its cancellation must not hold the activity
            # (and a worker's shutdown) forever.
            finished, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
            if finished:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    task.result()
            else:
                logger.warning(
                    "auxiliary work ignored its cancellation for %s s; left behind", CANCEL_GRACE_S
                )
