"""The head attempt: claim the selected thread's head, run its binding, settle exactly once."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from opentelemetry import trace
from temporalio import activity

from activities.errors import domain_errors
from ledger.attempts import Attempts, Claim
from threadwarden.bindings import BindingRegistry, Completed, Failed, Outcome, ThreadRecord
from threadwarden.errors import (
    BindingDigestMismatch,
    BindingUnavailable,
    InvalidInput,
    StaleAttempt,
    StalePass,
)
from threadwarden.failpoints import Failpoints
from threadwarden.validation import canonical_json, validate_input
from workflows import contracts as c

RESERVED_KINDS = frozenset({"settlement"})
"""Record kinds only threadwarden writes."""


class _Context:
    """The `AttemptContext` a binding's handler receives: every write is fenced by the claim."""

    def __init__(self, claim: Claim, attempts: Attempts, yield_after: datetime) -> None:
        self._claim = claim
        self._attempts = attempts
        self._yield_after = yield_after

    @property
    def submission_id(self) -> str:
        return self._claim.submission_id

    @property
    def thread_id(self) -> str:
        return self._claim.thread_id

    @property
    def input(self) -> Any:
        return self._claim.input

    @property
    def history(self) -> list[ThreadRecord]:
        return [ThreadRecord(**r.model_dump()) for r in self._claim.history]

    @property
    def yield_after(self) -> datetime:
        return self._yield_after

    async def append(self, kind: str, body: Any) -> ThreadRecord:
        if kind in RESERVED_KINDS:
            raise InvalidInput("kind", f"a record kind other than {kind!r} (reserved)")
        validate_input("body", body)
        record = await self._attempts.append(self._claim, kind, body)
        return ThreadRecord(**record.model_dump())

    async def tool(
        self, name: str, args: dict[str, Any], run: Callable[[dict[str, Any]], Awaitable[Any]]
    ) -> Any:
        await self.append("tool-call", {"tool": name, "args": args})
        result = await run(args)
        await self.append("tool-result", {"tool": name, "result": result})
        return result

    def heartbeat(self) -> None:
        activity.heartbeat()


def _checked(outcome: object) -> Outcome:
    """Turn an outcome that cannot be recorded into a recordable failure (never a retry loop)."""
    if isinstance(outcome, Failed):
        return outcome
    if not isinstance(outcome, Completed):
        return Failed(f"binding returned {type(outcome).__name__}, expected Completed or Failed")
    try:
        canonical_json(outcome.result)
    except (TypeError, ValueError):
        return Failed("binding result: expected a JSON value")
    return outcome


class AttemptActivities:
    """Runs one attempt on the head of the lane the pass selected."""

    def __init__(
        self,
        attempts: Attempts,
        registry: BindingRegistry,
        *,
        lease_renew_ms: int,
        failpoints: Failpoints,
    ) -> None:
        self._failpoints = failpoints
        self._attempts = attempts
        self._registry = registry
        self._lease_renew_s = lease_renew_ms / 1000

    @activity.defn(name=c.RUN_HEAD)
    @domain_errors
    async def run_head(self, step: c.RunHeadInput) -> c.RunHeadResult:
        digests = {
            agent: self._registry.bindings[agent].digest for agent in self._registry.bindings
        }
        await self._failpoints.hit("claim")
        try:
            claim = await self._attempts.claim_head(
                step.host_id, step.epoch, step.thread_id, bindings=digests
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
                "threadwarden.attempt_id": claim.attempt_id,
                "threadwarden.epoch": claim.epoch,
            }
        )
        outcome = _checked(await self._run_binding(claim, step.yield_after))
        await self._failpoints.hit("settle")
        if isinstance(outcome, Completed):
            await self._attempts.settle(claim, "completed", result=outcome.result)
            return c.RunHeadResult(submission_id=claim.submission_id, outcome="completed")
        await self._attempts.settle(claim, "failed", reason=outcome.reason)
        return c.RunHeadResult(submission_id=claim.submission_id, outcome="failed")

    async def _run_binding(self, claim: Claim, yield_after: datetime) -> object:
        binding = self._registry.bindings[claim.agent_id]
        handler = asyncio.ensure_future(
            binding.handler(_Context(claim, self._attempts, yield_after))
        )
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._keep_lease(claim, handler, lost))
        try:
            return await handler
        except (StaleAttempt, StalePass):
            raise  # a fenced-out attempt must not try to settle
        except asyncio.CancelledError:
            if lost.is_set():  # the renewer stopped a handler whose ownership is gone
                raise StaleAttempt(
                    f"submission {claim.submission_id}: attempt {claim.attempt_id} lost its"
                    " ownership (a newer pass or attempt took over)"
                ) from None
            # Give the head back at once instead of letting the next pass wait out the lease.
            await asyncio.shield(self._attempts.release(claim))
            raise
        except Exception as error:  # the binding's own failure settles the submission failed
            activity.logger.warning("binding %s raised: %r", claim.agent_id, error)
            return Failed(f"binding raised {type(error).__name__}: {error}")
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _keep_lease(
        self, claim: Claim, handler: asyncio.Future[Any], lost: asyncio.Event
    ) -> None:
        """Heartbeat and renew the lease; stop the handler once ownership is gone."""
        while True:
            await asyncio.sleep(self._lease_renew_s)
            activity.heartbeat()
            if not await self._attempts.renew_lease(claim):
                activity.logger.warning("attempt %s lost its ownership", claim.attempt_id)
                lost.set()
                handler.cancel()
                return
