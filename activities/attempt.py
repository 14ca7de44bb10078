"""The head attempt: claim the selected thread's head, run its binding, settle exactly once.

Settlement is staged (reserve, then append + finalize) so recovery can finish it from the
reservation. An attempt may also stop without settling: it yields (``ready``), waits for an
approval (``suspended``) or for an operator's decision on a side effect (``unknown``).
"""

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from opentelemetry import trace
from temporalio import activity

from threadwarden.activities.context import (
    DECISIVE,
    INFRASTRUCTURE,
    AttemptContext,
    AttemptStop,
    Suspend,
    UnknownEffect,
    WaitForChildren,
    Yield,
)
from threadwarden.activities.errors import domain_errors
from threadwarden.activities.lease import LeaseKeeper, beat
from threadwarden.activities.lease import stop as lease_stop
from threadwarden.activities.live_text import LiveText
from threadwarden.activities.pass_steps import INLINE_GRACE_MS, PassSteps, describe
from threadwarden.activities.wake import Waker
from threadwarden.bindings import BindingRegistry, Completed, Failed, Outcome, Yielded
from threadwarden.errors import (
    AbortRequested,
    BindingDigestMismatch,
    BindingUnavailable,
    InvalidInput,
)
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.checkpoints import Checkpoints
from threadwarden.ledger.children import Children
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.deltas import Deltas
from threadwarden.ledger.operator import Operator
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import Publications
from threadwarden.validation import validate_input
from threadwarden.workflows import contracts as c

logger = logging.getLogger(__name__)


def _checked(outcome: object) -> Outcome:
    """Turn an outcome that cannot be recorded into a recordable failure (never a retry loop)."""
    if isinstance(outcome, Yielded):
        return outcome
    if isinstance(outcome, Failed):
        # A reason Postgres cannot store (a NUL, a lone surrogate) would fail every pass.
        reason = str(outcome.reason).replace("\x00", "\\0")
        return Failed(reason.encode("utf-8", "replace").decode())
    if not isinstance(outcome, Completed):
        return Failed(
            f"binding returned {type(outcome).__name__}, expected Completed, Failed or Yielded"
        )
    try:
        validate_input("result", outcome.result)
    except InvalidInput as error:
        return Failed(f"binding {error}")
    return outcome


async def _cancel_on_shutdown(task: asyncio.Future[Any]) -> None:
    """Cancel an inline head's attempt once its worker begins to shut down, as the SDK does
    for a regular activity (a local activity would hold the shutdown until it ended)."""
    await activity.wait_for_worker_shutdown()
    task.cancel()


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class _PassFault(Exception):
    """The attempt ended on infrastructure: the pass fails and is retried, nothing settles."""

    def __init__(self, reason: str, *, owned: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.owned = owned
        """Whether the attempt still holds the head (and should give it back)."""


class HeadRunner:
    """Runs one attempt on the head the pass selected, then the pass's steps after it: one
    instance per worker, given to both the ``run_head`` activity and ``begin_pass`` (which runs
    an inline head itself when nothing else of its pass is due)."""

    def __init__(
        self,
        attempts: Attempts,
        registry: BindingRegistry,
        *,
        lease_ms: int,
        lease_renew_ms: int,
        failpoints: Failpoints,
        projection: Projection,
        publications: Publications,
        steps: PassSteps,
        children: Children,
        operator: Operator,
        waker: Waker,
        checkpoints: Checkpoints,
        deltas: Deltas | None = None,
    ) -> None:
        self._checkpoints = checkpoints
        self._deltas = deltas
        self._children = children
        self._operator = operator
        self._waker = waker
        self._steps = steps
        self._publications = publications
        self._failpoints = failpoints
        self._projection = projection
        self._attempts = attempts
        self._registry = registry
        self._lease_s = lease_ms / 1000
        self._lease_renew_s = lease_renew_ms / 1000

    async def run(self, step: c.RunHeadInput) -> c.RunHeadResult:
        """The head attempt, its binding-retry record and (when asked) the pass's finish.

        Dispatched (a regular activity on the agent's queue) it heartbeats throughout, so a
        dead worker is noticed within the heartbeat timeout and the pass deadline's
        cancellation arrives promptly. Inline (a local activity of the pass) it runs for the
        inline budget: past it the attempt yields at its next committed step, and one still in
        a step after the grace is cut off; either way the head goes back (``handed_off``) and
        its later attempts are dispatched. An inline attempt whose worker shuts down gives the
        head back too (``shutdown``; the SDK neither cancels a local activity nor heartbeats it).
        """
        inline = activity.info().is_local
        if inline and activity.is_worker_shutdown():
            return c.RunHeadResult(shutdown=True)  # claim nothing on a stopping worker
        now = datetime.now(UTC)
        left = (step.pass_deadline - now).total_seconds()
        cut, yield_after = left, step.yield_after
        if inline:
            budget = self._steps.limits.inline_budget_ms / 1000
            cut = min(left, budget + INLINE_GRACE_MS / 1000)
            yield_after = min(yield_after, now + timedelta(seconds=budget))
        # The attempt in a task of its own: the shutdown watch cancels it, not this step (whose
        # own cancellation stays the SDK's and the pass deadline's).
        attempt = asyncio.ensure_future(self._attempt(step, yield_after))
        beside = asyncio.create_task(_cancel_on_shutdown(attempt) if inline else self._heartbeat())
        try:
            try:
                async with asyncio.timeout(max(cut, 0.001)):
                    result = await attempt
            except TimeoutError:  # the attempt released its claim before the timeout ended it
                if cut >= left:
                    activity.logger.warning("attempt on %s hit the pass deadline", step.thread_id)
                    return c.RunHeadResult(failure=c.PASS_DEADLINE_ERROR, native_failure=True)
                result = c.RunHeadResult(submission_id=step.submission_id, stopped="ready")
            except asyncio.CancelledError:
                if inline and activity.is_worker_shutdown() and not _cancelling():  # the watch
                    return c.RunHeadResult(submission_id=step.submission_id, shutdown=True)
                raise
            if inline:  # the attempt is over: a shutdown from here on lets the pass finish
                await _stopped(beside)
            if result.failure is not None:  # the pass failed: its durable retry is what follows
                return result
            if inline and result.stopped == "ready":  # past its budget: yielded or cut off
                result.handed_off = True
                await self._hand_off(step.submission_id)
            return await self._steps.after_head(step, result)
        finally:
            await _stopped(beside)

    async def _hand_off(self, submission_id: str) -> None:
        """Dispatch the head's later attempts; best effort: should this fail, the next one runs
        inline once more, bounded by the same budget."""
        try:
            await self._attempts.hand_off(submission_id)
        except Exception as error:
            activity.logger.warning("handing %s over failed: %r", submission_id, error)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._lease_renew_s)
            beat()

    async def _attempt(self, step: c.RunHeadInput, yield_after: datetime) -> c.RunHeadResult:
        bindings = self._registry.bindings
        digests = {agent: binding.digest for agent, binding in bindings.items()}
        kinds = {
            agent: binding.history_kinds
            for agent, binding in bindings.items()
            if binding.history_kinds is not None
        }
        await self._failpoints.hit("claim")
        try:
            claim = await self._attempts.claim_head(
                step.host_id,
                step.epoch,
                step.thread_id,
                bindings=digests,
                submission_id=step.submission_id,
                history_kinds=kinds,
            )
        except (BindingUnavailable, BindingDigestMismatch) as error:
            # Logged by the binding-retry step, at error level at most once per 15 minutes.
            return c.RunHeadResult(submission_id=error.submission_id, binding_error=str(error))
        if claim is None:
            return c.RunHeadResult()
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
            outcome = _checked(await self._run_binding(claim, yield_after))
        except AbortRequested:
            return await self._abort(claim)
        except AttemptStop as stop:
            return await self._stop(claim, stop)
        except _PassFault as fault:
            activity.logger.warning(
                "attempt on %s failed the pass (nothing settled, retried with backoff): %s",
                claim.thread_id,
                fault.reason,
            )
            if fault.owned:
                await self._release(claim)
            return c.RunHeadResult(
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
    ) -> c.RunHeadResult:
        await self._failpoints.hit("settle")
        marker = await self._attempts.settle(claim, outcome, result=result, reason=reason)
        if marker is not None and marker.recorded:  # a child: its parent may go on
            await self._waker.wake(marker.parent_host_id, reason="child-settled")
        await self._apply_committed(claim)
        return c.RunHeadResult(
            submission_id=claim.submission_id, outcome=outcome, admitted_at=claim.admitted_at
        )

    async def _apply_committed(self, claim: Claim) -> None:
        """Refresh the thread's summary and publish the attempt's records; best effort (the
        pass's backfill and publication drain catch up)."""
        try:
            await self._projection.apply_committed(claim.thread_id)
        except Exception as error:  # a disposable projection never fails a settled attempt
            activity.logger.warning("projection of %s failed: %r", claim.thread_id, error)
            with contextlib.suppress(Exception):  # the backfill comes back for it
                await self._projection.mark_due(claim.host_id)
        await self._publications.publish_committed(claim.host_id)

    async def _abort(self, claim: Claim) -> c.RunHeadResult:
        """Settle ``aborted``; a parent first aborts each unfinished child (once: the child's
        abort is idempotent) and joins every child's real outcome (a racing settlement wins),
        waiting (``suspended``) while some child has not settled yet."""
        unjoined = await self._children.unjoined(claim.submission_id)
        for child in unjoined:
            if not child.settled:
                aborted = await self._operator.abort(child.submission_id)
                if aborted.changed:
                    await self._waker.wake(aborted.host_id, reason="abort")
                await self._failpoints.hit("attempt:child-abort:after")
        if unjoined:
            unjoined = await self._children.unjoined(claim.submission_id)
            pending = [child.submission_id for child in unjoined if not child.settled]
            if pending:
                wait = await self._children.suspend_for_children(claim, pending)
                if wait.suspended:
                    return await self._stop(claim, WaitForChildren("aborting its children"))
            for child in unjoined:
                await self._children.join(claim, child.step)
        reason = await self._attempts.abort_reason(claim.submission_id)
        return await self._settle(claim, "aborted", reason=reason)

    async def _stop(self, claim: Claim, stop: AttemptStop) -> c.RunHeadResult:
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
            await self._attempts.stop(claim, state)
        await self._apply_committed(claim)
        return c.RunHeadResult(submission_id=claim.submission_id, stopped=state)

    async def _run_binding(self, claim: Claim, yield_after: datetime) -> object:
        """Run the handler beside the lease keeper; return its outcome, or raise what decides
        the attempt instead (`_PassFault`, fencing, an abort, a stop)."""
        binding = self._registry.bindings[claim.agent_id]
        context = AttemptContext(
            claim,
            self._attempts,
            yield_after,
            failpoints=self._failpoints,
            children=self._children,
            waker=self._waker,
            checkpoints=self._checkpoints,
            live=LiveText(self._deltas, claim) if self._deltas is not None else None,
        )
        handler = asyncio.ensure_future(binding.handler(context))
        lease = LeaseKeeper(
            self._attempts,
            claim,
            failpoints=self._failpoints,
            lease_s=self._lease_s,
            renew_s=self._lease_renew_s,
        )
        renewer = asyncio.create_task(lease.keep(handler))
        error: BaseException | None = None
        outcome: object = None
        cut_off = True  # until the handler ends by itself
        try:
            outcome = await handler
            cut_off = False
        except asyncio.CancelledError:
            if lease.lost is None or _cancelling():
                await self._release(claim)  # give the head back instead of waiting out the lease
                raise
            error = _PassFault(lease.lost, owned=False)
        except (Exception, AttemptStop) as raised:
            error, cut_off = raised, False
        finally:
            await lease_stop(renewer)
            await context.close(cut_off=cut_off)
        if _cancelling():  # the handler swallowed an outside cancellation
            await self._release(claim)
            raise asyncio.CancelledError()
        _judge(claim, context, lease, error)
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
            await asyncio.shield(self._attempts.release(claim))
        except Exception as error:
            activity.logger.warning("releasing attempt %s failed: %r", claim.attempt_id, error)


def _judge(
    claim: Claim, context: AttemptContext, lease: LeaseKeeper, error: BaseException | None
) -> None:
    """Raise what decides the attempt regardless of how its handler ended, if anything does:
    a lost lease, then a fault of threadwarden's own writes, then an infrastructure error."""
    if lease.lost is not None and not isinstance(error, WaitForChildren):
        # (A wait for children ends the ownership itself: a renewal refused after it is no
        # loss.)
        raise _PassFault(lease.lost, owned=False)
    fault = context.fault
    if isinstance(fault, DECISIVE):
        raise fault
    if fault is not None:
        raise _PassFault(f"attempt {claim.attempt_id}: {describe(fault)}", owned=True)
    if isinstance(error, _PassFault):
        raise error
    if isinstance(error, INFRASTRUCTURE):  # by type only: the binding's text may quote payload
        raise _PassFault(
            f"attempt {claim.attempt_id}: the binding raised {type(error).__name__}", owned=True
        )


def _cancelling() -> bool:
    """Whether the running task (the activity) is being cancelled from outside."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class AttemptActivities:
    """The ``run_head`` activity: registered on the agent queues (a dispatched head) and on the
    main task queue (an inline head, run as a local activity of its pass)."""

    def __init__(self, runner: HeadRunner) -> None:
        self._runner = runner

    @activity.defn(name=c.RUN_HEAD)
    @domain_errors
    async def run_head(self, step: c.RunHeadInput) -> c.RunHeadResult:
        """The head attempt, its binding-retry record and (when asked) the pass's finish."""
        return await self._runner.run(step)
