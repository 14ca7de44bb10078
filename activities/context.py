"""The attempt context a binding's handler receives: fenced writes, replayed from the journal.

Every operation of the handler (an append, a tool call, an approval request) is one numbered
step. Steps an earlier attempt committed are returned from the journal instead of being done
again, so a re-run after a crash or a yield repeats nothing that was committed.

Errors decide nothing by accident (docs/bindings.md, "Errors"): a failure of threadwarden's own
write is remembered as the attempt's `fault`, so it fails the pass (and is retried) even when
the handler catches it and returns `Failed`; once faulted, the context refuses further steps.
"""

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity

from threadwarden.bindings import ThreadRecord
from threadwarden.errors import (
    AbortRequested,
    InvalidInput,
    PoolExhausted,
    Retryable,
    StaleAttempt,
    StalePass,
    ThreadwardenError,
)
from threadwarden.failpoints import FailpointError, Failpoints
from threadwarden.ledger.attempts import Attempts, Claim
from threadwarden.ledger.records import HistoryRecord
from threadwarden.validation import validate_id, validate_input

T = TypeVar("T")

RESERVED_KINDS = frozenset(
    {
        "settlement",
        "tool-call",
        "tool-result",
        "tool-resolution",
        "approval-requested",
        "approval-decision",
        "message-sent",
    }
)
"""Record kinds only threadwarden writes (through ``tool`` and ``request_approval``)."""


class AttemptStop(BaseException):
    """Ends an attempt without settling. A BaseException, so a handler's ``except Exception``
    cannot swallow it."""


class Suspend(AttemptStop):
    """The submission waits for a person's approval (a stable wait)."""


class UnknownEffect(AttemptStop):
    """A side-effecting tool call was prepared but its result was never recorded."""


class Yield(AttemptStop):
    """The attempt passed ``yield_after``: stop at this committed boundary, resume later."""


class NonDeterministic(InvalidInput):
    """A re-run handler asked for a different step than the one committed."""


class AttemptFaulted(ThreadwardenError):
    """A step asked for after an earlier step of this attempt failed on infrastructure: the
    attempt can make no more progress (it fails the pass and is retried later)."""


DECISIVE = (AbortRequested, StaleAttempt, StalePass)
"""Errors of the context's writes that decide the attempt themselves: an operator's abort
settles it ``aborted``; fencing ends it without settling (another owner has the head)."""

INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    Retryable,
    AttemptFaulted,
    PoolExhausted,
    FailpointError,
)
"""Errors that fail the pass instead of settling the submission ``failed`` even when the
handler raises them itself: the binding's explicit `Retryable`, and threadwarden's own
(pool, injected) faults. Any error of the context's own writes fails the pass through the
context's remembered fault; the handler's own network or database errors are its own verdict
(`Retryable` asks for a retry)."""


def _record(record: HistoryRecord) -> ThreadRecord:
    return ThreadRecord(**record.model_dump())


class AttemptContext:
    """The `threadwarden.AttemptContext` threadwarden hands to a binding."""

    def __init__(
        self,
        claim: Claim,
        attempts: Attempts,
        yield_after: datetime,
        *,
        failpoints: Failpoints | None = None,
    ) -> None:
        self._claim = claim
        self._attempts = attempts
        self._yield_after = yield_after
        self._failpoints = failpoints or Failpoints()
        self.fault: BaseException | None = None
        """The first failure of one of threadwarden's own writes (never a validation of the
        binding's arguments). It decides the attempt whatever the handler made of it."""
        self._journal = {(r.step, r.kind): r for r in claim.journal}
        self._last_committed = max((r.step or 0 for r in claim.journal), default=0)
        self._step = 0

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
        return [_record(r) for r in self._claim.history]

    @property
    def yield_after(self) -> datetime:
        return self._yield_after

    @property
    def replaying(self) -> bool:
        return self._step < self._last_committed

    def heartbeat(self) -> None:
        activity.heartbeat()

    async def append(self, kind: str, body: Any) -> ThreadRecord:
        if kind in RESERVED_KINDS:
            raise InvalidInput("kind", f"a record kind other than {kind!r} (reserved)")
        validate_input("body", body)
        step = self._next()
        committed = self._journal.get((step, kind))
        if committed is not None:
            if committed.body != body:
                raise NonDeterministic(
                    f"step {step}", f"the committed {kind} record {committed.body!r}", body
                )
            return _record(committed)
        self._expect_new(step, kind)
        return await self._write(kind, body, step, failpoint="attempt:append")

    async def tool(
        self,
        name: str,
        args: dict[str, Any],
        run: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        side_effect: bool = False,
        idempotency_key: str | None = None,
    ) -> Any:
        validate_input("args", args)
        step = self._next()
        result = self._journal.get((step, "tool-result"))
        if result is not None:
            return result.body.get("result") if isinstance(result.body, dict) else None
        call = self._journal.get((step, "tool-call"))
        if call is None:
            self._expect_new(step, "tool-call")
            body = {
                "tool": name,
                "args": args,
                "side_effect": side_effect,
                "idempotency_key": idempotency_key,
            }
            await self._write("tool-call", body, step, failpoint="attempt:tool", check_yield=False)
        elif side_effect and not idempotency_key and (step, "tool-resolution") not in self._journal:
            raise UnknownEffect(f"tool {name} at step {step}")
        value = await run(args)
        validate_input("result", value)
        await self._write("tool-result", {"tool": name, "result": value}, step)
        return value

    async def request_approval(self, reason: str) -> None:
        step = self._next()
        decision = self._journal.get((step, "approval-decision"))
        if decision is not None and isinstance(decision.body, dict):
            if decision.body.get("approved"):
                return
            raise Suspend(f"approval at step {step} was denied")  # deny settles the submission
        if (step, "approval-requested") not in self._journal:
            self._expect_new(step, "approval-requested")
            await self._write("approval-requested", {"reason": reason}, step, check_yield=False)
        raise Suspend(reason)

    async def send_message(
        self, thread_id: str, input: Any, *, agent_id: str, host_id: str | None = None
    ) -> str:
        validate_id("thread_id", thread_id)
        validate_id("agent_id", agent_id)
        if host_id is not None:
            validate_id("host_id", host_id)
        validate_input("input", input)
        step = self._next()
        sent = self._journal.get((step, "message-sent"))
        if sent is None:
            self._expect_new(step, "message-sent")
            record = await self._guarded(
                "attempt:send_message",
                lambda: self._attempts.send_message(
                    self._claim,
                    step=step,
                    thread_id=thread_id,
                    agent_id=agent_id,
                    input=input,
                    host_id=host_id,
                ),
            )
            self._journal[(step, "message-sent")] = record
            self._last_committed = max(self._last_committed, step)
            sent = record
        elif (sent.body["to_thread"], sent.body["input"]) != (thread_id, input):
            raise NonDeterministic(
                f"step {step}", f"the committed message to {sent.body['to_thread']}", thread_id
            )
        return str(sent.body["message_id"])

    def _next(self) -> int:
        if self.fault is not None:
            # A step after a failed one would leave a gap in the journal that the re-run
            # could never replay.
            raise AttemptFaulted(
                f"attempt {self._claim.attempt_id}: an earlier step failed"
                f" ({type(self.fault).__name__}: {self.fault}); no further step can run"
            ) from self.fault
        self._step += 1
        return self._step

    def _expect_new(self, step: int, kind: str) -> None:
        if step <= self._last_committed:
            kinds = sorted(k for s, k in self._journal if s == step)
            raise NonDeterministic(f"step {step}", f"one of the committed {kinds}", kind)

    async def _guarded(self, failpoint: str | None, write: Callable[[], Awaitable[T]]) -> T:
        """Run one of threadwarden's writes (after its failpoint); remember how it failed."""
        try:
            if failpoint is not None:
                await self._failpoints.hit(failpoint)
            return await write()
        except InvalidInput:  # a value the binding passed: its own, deterministic mistake
            raise
        except (Exception, asyncio.CancelledError) as error:
            # A cancelled write (the handler's own timeout around it) may or may not have
            # committed: a fault too, so the handler cannot go on past it.
            if self.fault is None:
                self.fault = error
            raise

    async def _write(
        self,
        kind: str,
        body: Any,
        step: int,
        *,
        failpoint: str | None = None,
        check_yield: bool = True,
    ) -> ThreadRecord:
        record = await self._guarded(
            failpoint, lambda: self._attempts.append(self._claim, kind, body, step=step)
        )
        self._journal[(step, kind)] = record
        self._last_committed = max(self._last_committed, step)
        if check_yield and datetime.now(UTC) >= self._yield_after:
            raise Yield(f"yield_after {self._yield_after.isoformat()} passed at step {step}")
        return _record(record)
