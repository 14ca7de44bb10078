"""The head attempt: claim the selected thread's head, run its binding, settle exactly once.

Settlement is staged (reserve, then append + finalize) so recovery can finish it from the
reservation. An attempt may also stop without settling: it yields (``ready``), waits for an
approval (``suspended``) or for an operator's decision on a side effect (``unknown``). What
decides the attempt whatever its handler made of it is judged in `activities/endings.py`.
"""

import asyncio
import contextlib
import logging
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from opentelemetry import trace
from temporalio import activity

from threadwarden.activities.child_calls import ChildCalls
from threadwarden.activities.context import JournaledContext
from threadwarden.activities.endings import (
    DECISIVE,
    AttemptStop,
    PassFault,
    Suspend,
    UnknownEffect,
    WaitForChildren,
    Yield,
    ended_by_itself,
    judge,
    recordable,
)
from threadwarden.activities.errors import domain_errors
from threadwarden.activities.journal import Journal
from threadwarden.activities.lease import LeaseKeeper, beat
from threadwarden.activities.lease import stop as lease_stop
from threadwarden.activities.live_text import LiveText
from threadwarden.activities.pass_steps import INLINE_HARD_BOUND_MS, PassSteps, describe
from threadwarden.activities.wake import Waker
from threadwarden.bindings import BindingRegistry, Completed, Failed, Yielded
from threadwarden.errors import AbortRequested, BindingDigestMismatch, BindingUnavailable
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.checkpoints import Checkpoints
from threadwarden.ledger.children import Children
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.deltas import Deltas
from threadwarden.ledger.operator import Operator
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import Publications
from threadwarden.workflows import contracts

logger = logging.getLogger(__name__)


async def _cancel_on_shutdown(task: asyncio.Future[Any]) -> None:
    """Cancel an inline head's attempt once its worker begins to shut down, as the SDK does
    for a regular activity (a local activity would hold the shutdown until it ended)."""
    await activity.wait_for_worker_shutdown()
    task.cancel()


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass(eq=False)
class HeadRunner:
    """Runs one attempt on the head the pass selected, then the pass's steps after it: one
    instance per worker, given to both the ``run_head`` activity and ``begin_pass`` (which runs
    an inline head itself when nothing else of its pass is due)."""

    attempts: Attempts
    registry: BindingRegistry
    _: KW_ONLY
    lease_ms: int
    lease_renew_ms: int
    failpoints: Failpoints
    projection: Projection
    publications: Publications
    steps: PassSteps
    children: Children
    operator: Operator
    waker: Waker
    checkpoints: Checkpoints
    deltas: Deltas | None = None

    async def run(self, step: contracts.RunHeadInput) -> contracts.RunHeadResult:
        """The head attempt, its binding-retry record and (when asked) the pass's finish.

        Dispatched (a regular activity on the agent's queue) it heartbeats throughout, so a
        dead worker is noticed within the heartbeat timeout and the pass deadline's
        cancellation arrives promptly. Inline (a local activity of the pass) it runs for the
        inline budget and hands its head over at a committed boundary (``handed_off``: its
        later attempts are dispatched): past the budget at its next committed step, or before a
        step declared too long for what is left of it (`Journal.make_room`). The budget never
        cuts a step in flight; only a hung one is, at `INLINE_HARD_BOUND_MS`. An inline
        attempt whose worker shuts down gives the head back at once (``shutdown``; the SDK
        neither cancels a local activity nor heartbeats it).
        """
        inline = activity.info().is_local
        if inline and activity.is_worker_shutdown():
            return contracts.RunHeadResult(shutdown=True)  # claim nothing on a stopping worker
        now = datetime.now(UTC)
        left = (step.pass_deadline - now).total_seconds()
        cut, yield_after, inline_until = left, step.yield_after, None
        if inline:
            cut = min(left, INLINE_HARD_BOUND_MS / 1000)
            inline_until = now + timedelta(milliseconds=self.steps.limits.inline_budget_ms)
            yield_after = min(yield_after, inline_until)
        # The attempt in a task of its own: the shutdown watch cancels it, not this step (whose
        # own cancellation stays the SDK's and the pass deadline's).
        attempt = asyncio.ensure_future(self._attempt(step, yield_after, inline_until))
        beside = asyncio.create_task(_cancel_on_shutdown(attempt) if inline else self._heartbeat())
        try:
            try:
                async with asyncio.timeout(max(cut, 0.001)):
                    result = await attempt
            except TimeoutError:  # the attempt released its claim before the timeout ended it
                if cut >= left:
                    activity.logger.warning("attempt on %s hit the pass deadline", step.thread_id)
                    return contracts.RunHeadResult(
                        failure=contracts.PASS_DEADLINE_ERROR, native_failure=True
                    )
                activity.logger.warning(
                    "inline attempt on %s cut off at its hard bound (%d ms) inside a step that"
                    " did not declare so long a length; it runs again on the agent's queue",
                    step.thread_id,
                    INLINE_HARD_BOUND_MS,
                )
                result = contracts.RunHeadResult(submission_id=step.submission_id, stopped="ready")
            except asyncio.CancelledError:
                if inline and activity.is_worker_shutdown() and not _cancelling():  # the watch
                    return contracts.RunHeadResult(submission_id=step.submission_id, shutdown=True)
                raise
            if inline:  # the attempt is over: a shutdown from here on lets the pass finish
                await _stopped(beside)
            if result.failure is not None:  # the pass failed: its durable retry is what follows
                return result
            if inline and result.stopped == "ready":  # yielded to its budget (or hung)
                result.handed_off = True
                await self._hand_off(step.submission_id)
            return await self.steps.after_head(step, result)
        finally:
            await _stopped(beside)

    async def _hand_off(self, submission_id: str) -> None:
        """Dispatch the head's later attempts; best effort: should this fail, the next one runs
        inline once more, bounded by the same budget."""
        try:
            await self.attempts.hand_off(submission_id)
        except Exception as error:
            activity.logger.warning("handing %s over failed: %r", submission_id, error)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease_renew_ms / 1000)
            beat()

    async def _attempt(
        self, step: contracts.RunHeadInput, yield_after: datetime, inline_until: datetime | None
    ) -> contracts.RunHeadResult:
        bindings = self.registry.bindings
        digests = {agent: binding.digest for agent, binding in bindings.items()}
        kinds = {
            agent: binding.history_kinds
            for agent, binding in bindings.items()
            if binding.history_kinds is not None
        }
        await self.failpoints.hit("claim")
        try:
            claim = await self.attempts.claim_head(
                step.host_id,
                step.epoch,
                step.thread_id,
                bindings=digests,
                submission_id=step.submission_id,
                history_kinds=kinds,
                serve_ms=step.serve_ms,
            )
        except (BindingUnavailable, BindingDigestMismatch) as error:
            # Logged by the binding-retry step, at error level at most once per 15 minutes.
            return contracts.RunHeadResult(
                submission_id=error.submission_id, binding_error=str(error)
            )
        if claim is None:
            return contracts.RunHeadResult()
        trace.get_current_span().set_attributes(
            {
                "threadwarden.host_id": step.host_id,
                "threadwarden.thread_id": claim.thread_id,
                "threadwarden.submission_id": claim.submission_id,
                "threadwarden.agent_id": claim.agent_id,
                "threadwarden.attempt_id": claim.attempt_id,
                "threadwarden.epoch": claim.epoch,
            }
        )
        if claim.abort_requested:  # a parent asked to abort: its children first
            return await self._abort(claim)
        try:
            outcome = recordable(await self._run_binding(claim, yield_after, inline_until))
        except AbortRequested:
            return await self._abort(claim)
        except AttemptStop as stop:
            return await self._stop(claim, stop)
        except PassFault as fault:
            activity.logger.warning(
                "attempt on %s failed the pass (nothing settled, retried with backoff): %s",
                claim.thread_id,
                fault.reason,
            )
            if fault.owned:
                await self._release(claim)
            return contracts.RunHeadResult(
                submission_id=claim.submission_id, failure=fault.reason, native_failure=True
            )
        if isinstance(outcome, Yielded):
            return await self._stop(claim, Yield("the binding yielded"))
        if isinstance(outcome, Completed):
            return await self._settle(claim, "completed", result=outcome.result)
        return await self._settle(claim, "failed", reason=outcome.reason)

    async def _settle(
        self,
        claim: Claim,
        outcome: Literal["completed", "failed", "aborted"],
        *,
        result: Any = None,
        reason: str | None = None,
    ) -> contracts.RunHeadResult:
        await self.failpoints.hit("settle")
        marker = await self.attempts.settle(claim, outcome, result=result, reason=reason)
        if marker is not None and marker.recorded:  # a child: its parent may go on
            await self.waker.wake(marker.parent_host_id, reason="child-settled")
        return contracts.RunHeadResult(
            submission_id=claim.submission_id,
            outcome=outcome,
            admitted_at=claim.admitted_at,
            committed_view=await self._apply_committed(claim),
        )

    async def _apply_committed(self, claim: Claim) -> Any:
        """Refresh the thread's summary and publish the attempt's records (one statement with
        only the built-in sink, which also reads the host for the pass's finish: returned);
        best effort (the pass's backfill and publication drain catch up)."""
        committed = await self.publications.publish_committed(
            claim.host_id, refresh=[claim.thread_id], view=True
        )
        if committed.refreshed:
            return committed.view
        try:  # the summary on its own (another sink publishes, or the one statement failed)
            await self.projection.apply_committed(claim.thread_id)
        except Exception as error:  # a disposable projection never fails a settled attempt
            activity.logger.warning("projection of %s failed: %r", claim.thread_id, error)
            with contextlib.suppress(Exception):  # the backfill comes back for it
                await self.projection.mark_due(claim.host_id)
        return None

    async def _abort(self, claim: Claim) -> contracts.RunHeadResult:
        """Settle ``aborted``; a parent first aborts each unfinished child (once: the child's
        abort is idempotent) and joins every child's real outcome (a racing settlement wins),
        waiting (``suspended``) while some child has not settled yet."""
        unjoined = await self.children.unjoined(claim.submission_id)
        for child in unjoined:
            if not child.settled:
                aborted = await self.operator.abort(child.submission_id)
                if aborted.changed:
                    await self.waker.wake(aborted.host_id, reason="abort")
                await self.failpoints.hit("attempt:child-abort:after")
        if unjoined:
            unjoined = await self.children.unjoined(claim.submission_id)
            pending = [child.submission_id for child in unjoined if not child.settled]
            if pending:
                wait = await self.children.suspend_for_children(claim, pending)
                if wait.suspended:
                    return await self._stop(claim, WaitForChildren("aborting its children"))
            for child in unjoined:
                await self.children.join(claim, child.step)
        reason = await self.attempts.abort_reason(claim.submission_id)
        return await self._settle(claim, "aborted", reason=reason)

    async def _stop(self, claim: Claim, stop: AttemptStop) -> contracts.RunHeadResult:
        state: Literal["ready", "suspended", "unknown"] = (
            "suspended"
            if isinstance(stop, (Suspend, WaitForChildren))
            else "unknown"
            if isinstance(stop, UnknownEffect)
            else "ready"
        )
        # An expected wait: one line, no activity-context dict, never the stop's text (an
        # approval reason is payload).
        waits = {"suspended": "waits for a person", "unknown": "waits for an operator's decision"}
        if isinstance(stop, WaitForChildren):
            waits["suspended"] = "waits for its children"
        logger.info(
            "submission %s on %s %s (%s)",
            claim.submission_id,
            claim.thread_id,
            waits.get(state, "yielded; it stays at the head"),
            type(stop).__name__,
        )
        if not isinstance(stop, WaitForChildren):  # that wait already ended the ownership
            await self.attempts.stop(claim, state)
        return contracts.RunHeadResult(
            submission_id=claim.submission_id,
            stopped=state,
            committed_view=await self._apply_committed(claim),
        )

    async def _run_binding(
        self, claim: Claim, yield_after: datetime, inline_until: datetime | None
    ) -> object:
        """Run the handler beside the lease keeper; return its outcome, or raise what decides
        the attempt instead (`PassFault`, fencing, an abort, a stop)."""
        binding = self.registry.bindings[claim.agent_id]
        journal = Journal(
            claim,
            self.attempts,
            yield_after,
            self.failpoints,
            inline_until=inline_until,
            quick=not binding.inline,
        )
        context = JournaledContext(
            journal,
            calls=ChildCalls(journal, self.children, self.waker),
            checkpoints=self.checkpoints,
            live=LiveText(self.deltas, claim) if self.deltas is not None else None,
        )
        handler = asyncio.ensure_future(binding.handler(context))
        lease = LeaseKeeper(
            self.attempts,
            claim,
            failpoints=self.failpoints,
            lease_s=self.lease_ms / 1000,
            renew_s=self.lease_renew_ms / 1000,
        )
        renewer = asyncio.create_task(lease.keep(handler))
        error: BaseException | None = None
        outcome: object = None
        cut_off = True  # until the handler ends by itself
        try:
            outcome = await handler
            cut_off = False
            journal.check_overrun(f"the end of the handler, after step {journal.step}")
        except asyncio.CancelledError:
            if lease.lost is None or _cancelling():
                await self._release(claim)  # give the head back instead of waiting out the lease
                raise
            error = PassFault(lease.lost, owned=False)
        except (Exception, AttemptStop) as raised:
            error, cut_off = raised, False
        finally:
            await lease_stop(renewer)
            await context.close(cut_off=cut_off)
        if _cancelling():  # the handler swallowed an outside cancellation
            await self._release(claim)
            raise asyncio.CancelledError()
        ended = ended_by_itself(lost=lease.lost, fault=context.fault, error=error)
        self.steps.quick.note(claim.agent_id, binding.digest, journal.timing, ended=ended)
        judge(claim, lost=lease.lost, fault=context.fault, error=error)
        if error is None:
            return outcome
        if isinstance(error, (AttemptStop, *DECISIVE)):
            raise error  # a fenced-out or aborted attempt must not settle as the binding said
        activity.logger.warning(  # the text (it may quote payload) is the recorded reason
            "binding %s raised %s on %s", claim.agent_id, type(error).__name__, claim.submission_id
        )
        return Failed(f"binding raised {describe(error)}")

    async def _release(self, claim: Claim) -> None:
        """Give the head back (``ready``) at once; shielded and best effort: if it fails, the
        lease lapses and the next pass's recovery takes the head back."""
        try:
            await asyncio.shield(self.attempts.release(claim))
        except Exception as error:
            activity.logger.warning("releasing attempt %s failed: %r", claim.attempt_id, error)


def _cancelling() -> bool:
    """Whether the running task (the activity) is being cancelled from outside."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class AttemptActivities:
    """The ``run_head`` activity: registered on the agent queues (a dispatched head) and on the
    main task queue (an inline head, run as a local activity of its pass)."""

    def __init__(self, runner: HeadRunner) -> None:
        self._runner = runner

    @activity.defn(name=contracts.RUN_HEAD)
    @domain_errors
    async def run_head(self, step: contracts.RunHeadInput) -> contracts.RunHeadResult:
        """The head attempt, its binding-retry record and (when asked) the pass's finish."""
        return await self._runner.run(step)
