"""The attempt context a binding's handler receives: fenced writes, replayed from the journal.

Every operation of the handler (an append, a tool call, an approval request) is one numbered
step. Steps an earlier attempt committed are returned from the journal instead of being done
again, so a re-run after a crash or a yield repeats nothing that was committed.

Errors decide nothing by accident (docs/bindings.md, "Errors"): a failure of threadwarden's own
write is remembered as the attempt's `fault`, so it fails the pass (and is retried) even when
the handler catches it and returns `Failed`; once faulted, the context refuses further steps.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from threadwarden.activities.lease import beat
from threadwarden.activities.live_text import LiveText
from threadwarden.activities.wake import Waker
from threadwarden.bindings import ApprovalDecision, ChildOutcome, SavedCheckpoint, ThreadRecord
from threadwarden.errors import (
    AbortRequested,
    BudgetExceeded,
    InvalidInput,
    PoolExhausted,
    Retryable,
    StaleAttempt,
    StalePass,
    ThreadwardenError,
)
from threadwarden.failpoints import FailpointError, Failpoints
from threadwarden.ledger.admission import payload_digest
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.checkpoints import Checkpoints
from threadwarden.ledger.children import Children
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.models import CallJoined
from threadwarden.ledger.records import HistoryRecord
from threadwarden.validation import check_schema, validate_id, validate_input

T = TypeVar("T")

CLOSE_GATHER_S = 5.0
"""The longest an ended attempt waits for its calls awaited together to finish gathering (a
wait being written) before it cancels them."""

RESERVED_KINDS = frozenset(
    {
        "settlement",
        "tool-call",
        "tool-result",
        "tool-resolution",
        "approval-requested",
        "approval-decision",
        "input-requested",
        "input-answer",
        "message-sent",
        "call-started",
        "call-joined",
        "children-awaited",
        "lineage",
        "budget-spent",
    }
)
"""Record kinds only threadwarden writes (through ``tool``, ``request_approval``, ``ask``)."""


class AttemptStop(BaseException):
    """Ends an attempt without settling. A BaseException, so a handler's ``except Exception``
    cannot swallow it."""


class Suspend(AttemptStop):
    """The submission waits for a person's approval or answer (a stable wait)."""


class UnknownEffect(AttemptStop):
    """A side-effecting tool call was prepared but its result was never recorded."""


class Yield(AttemptStop):
    """The attempt passed ``yield_after``: stop at this committed boundary, resume later."""


class WaitForChildren(AttemptStop):
    """The submission waits for its children (``suspended``); its ownership already ended."""


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
    r = record
    return ThreadRecord(r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step)


def _validate_units(field: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(field, "a non-negative integer", value)


def _joining(children: Children, claim: Claim, step: int) -> Callable[[], Awaitable[CallJoined]]:
    return lambda: children.join(claim, step)


def _child_outcome(body: Any) -> ChildOutcome:
    budget = body.get("budget")
    return ChildOutcome(
        submission_id=body["submission_id"],
        thread_id=body["thread_id"],
        outcome=body["outcome"],
        result=body.get("result"),
        reason=body.get("reason"),
        budget_consumed=None if budget is None else int(budget["consumed"]),
    )


class AttemptContext:
    """The `threadwarden.AttemptContext` threadwarden hands to a binding."""

    def __init__(
        self,
        claim: Claim,
        attempts: Attempts,
        yield_after: datetime,
        *,
        failpoints: Failpoints | None = None,
        children: Children | None = None,
        waker: Waker | None = None,
        checkpoints: Checkpoints | None = None,
        live: LiveText | None = None,
    ) -> None:
        self._claim = claim
        self._live = live
        self._open_step: int | None = None
        """The step whose tool is running (live text belongs to it), else None."""
        self._checkpoints = checkpoints
        self._saved: list[SavedCheckpoint] | None = None
        self._attempts = attempts
        self._children = children
        self._waker = waker
        self._establishing = 0
        self._awaiting: dict[int, tuple[str, asyncio.Future[ChildOutcome]]] = {}
        self._gathering: asyncio.Task[None] | None = None
        self._gatherers: set[asyncio.Task[None]] = set()
        """Every gatherer still running (one may be writing its batch's wait)."""
        self._established = asyncio.Event()
        self._yield_after = yield_after
        self._failpoints = failpoints or Failpoints()
        self.fault: BaseException | None = None
        """The first failure of one of threadwarden's own writes (never a validation of the
        binding's arguments). It decides the attempt whatever the handler made of it."""
        self._journal = {(r.step, r.kind): r for r in claim.journal}
        self._last_committed = max((r.step or 0 for r in claim.journal), default=0)
        self._step = 0
        self._history: list[ThreadRecord] | None = None

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
        if self._history is None:
            self._history = [_record(r) for r in self._claim.history]
        return list(self._history)

    @property
    def yield_after(self) -> datetime:
        return self._yield_after

    @property
    def replaying(self) -> bool:
        return self._step < self._last_committed

    def heartbeat(self) -> None:
        beat()

    async def close(self, *, cut_off: bool) -> None:
        """The attempt ended. Calls awaited together that were still gathering end with it
        (after a fault they write nothing; bounded by `CLOSE_GATHER_S`). Its live text
        stops: a ``cut_off`` attempt's unjournaled text stays for readers until the re-run
        starts the step over; otherwise it goes."""
        for gathering in list(self._gatherers):
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(gathering), CLOSE_GATHER_S)
            gathering.cancel()
        if self._live is not None:
            await self._live.close(keep=cut_off)

    def text_delta(self, text: str) -> None:
        if self._live is None or self._open_step is None or not text:
            return  # outside a tool's run there is no step in progress to stream
        if isinstance(text, str):
            self._live.add(self._open_step, text)

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
        self._open_step = step
        try:
            value = await run(args)
        finally:
            self._open_step = None
        validate_input("result", value)
        # The call ran: its result is recorded even if an abort arrived meanwhile (it lands at
        # the next boundary), so a side effect's outcome is never lost to an abort.
        body = {"tool": name, "result": value}
        if self._live is not None:  # its last live words before the journaled response
            await self._live.flush()
        await self._write("tool-result", body, step, honour_abort=False)
        if self._live is not None:  # the journaled response replaces the step's live text
            await self._live.finish(step)
        return value

    async def request_approval(
        self, reason: str, *, on_deny: Literal["fail", "resume"] = "fail"
    ) -> ApprovalDecision:
        if on_deny not in ("fail", "resume"):
            raise InvalidInput("on_deny", "'fail' or 'resume'", on_deny)
        step = self._next()
        decision = self._journal.get((step, "approval-decision"))
        if decision is not None and isinstance(decision.body, dict):
            body = decision.body
            if body.get("approved") or on_deny == "resume":
                return ApprovalDecision(
                    approved=bool(body.get("approved")),
                    reason=body.get("reason"),
                    operator=body.get("operator"),
                )
            raise Suspend(f"approval at step {step} was denied")  # deny settled the submission
        if (step, "approval-requested") not in self._journal:
            self._expect_new(step, "approval-requested")
            # The deny mutation reads ``on_deny`` from this record: "resume" moves the
            # submission on instead of settling it.
            asked = (
                {"reason": reason} if on_deny == "fail" else {"reason": reason, "on_deny": on_deny}
            )
            await self._write("approval-requested", asked, step, check_yield=False)
        raise Suspend(reason)

    async def ask(self, payload: Any, *, schema: dict[str, Any] | None = None) -> Any:
        validate_input("payload", payload)
        if schema is not None:
            check_schema(schema)
        step = self._next()
        answered = self._journal.get((step, "input-answer"))
        if answered is not None and isinstance(answered.body, dict):
            return answered.body.get("value")
        if (step, "input-requested") not in self._journal:
            self._expect_new(step, "input-requested")
            asked = (
                {"payload": payload} if schema is None else {"payload": payload, "schema": schema}
            )
            await self._write("input-requested", asked, step, check_yield=False)
        raise Suspend(f"a question at step {step}")

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

    @property
    def budget_left(self) -> int | None:
        lineage = self._journal.get((0, "lineage"))
        reserved = lineage.body.get("budget") if lineage is not None else None
        if reserved is None:
            return None
        spent = sum(
            int(r.body["units"]) for (_, kind), r in self._journal.items() if kind == "budget-spent"
        )
        return int(reserved) - spent

    async def spend(self, units: int, note: str | None = None) -> int | None:
        _validate_units("units", units)
        step = self._next()
        committed = self._journal.get((step, "budget-spent"))
        if committed is None:
            self._expect_new(step, "budget-spent")
            left = self.budget_left
            if left is not None and units > left:
                raise BudgetExceeded(f"units: {units} exceed the {left} left of this delegation")
            await self._write("budget-spent", {"units": units, "note": note}, step)
        elif committed.body.get("units") != units:
            raise NonDeterministic(
                f"step {step}", f"the committed spend of {committed.body.get('units')}", units
            )
        return self.budget_left

    async def call_agent(
        self,
        agent_id: str,
        input: Any,
        *,
        thread_id: str | None = None,
        host_id: str | None = None,
        budget: int | None = None,
    ) -> ChildOutcome:
        try:
            return await self._call_agent(agent_id, input, thread_id, host_id, budget)
        except asyncio.CancelledError as error:
            # A call cancelled anywhere (the attempt cut off, a deploy, the handler's own
            # timeout) is a fault: the calls awaited with it must not suspend without it.
            if self.fault is None:
                self.fault = error
            raise

    async def _call_agent(
        self,
        agent_id: str,
        input: Any,
        thread_id: str | None,
        host_id: str | None,
        budget: int | None,
    ) -> ChildOutcome:
        validate_id("agent_id", agent_id)
        if budget is not None:
            _validate_units("budget", budget)
        if thread_id is not None:
            validate_id("thread_id", thread_id)
        if host_id is not None:
            validate_id("host_id", host_id)
        validate_input("input", input)
        if self._children is None:
            raise InvalidInput("call_agent", "an attempt context wired for children")
        step = self._next()
        joined = self._journal.get((step, "call-joined"))
        if joined is not None:
            return _child_outcome(joined.body)
        started = self._journal.get((step, "call-started"))
        if started is None:
            if not self._uncommitted_call(step):
                self._expect_new(step, "call-started")
            self._establishing += 1
            try:
                started = await self._establish(step, agent_id, input, thread_id, host_id, budget)
            finally:
                self._establishing -= 1
                self._established.set()
        elif (
            started.body.get("agent_id"),
            started.body.get("payload_digest"),
            started.body.get("budget"),
        ) != (agent_id, payload_digest(agent_id, None, input), budget) or (
            thread_id is not None and started.body.get("child_thread_id") != thread_id
        ):
            raise NonDeterministic(
                f"step {step}", f"the committed call to {started.body.get('agent_id')}", agent_id
            )
        return await self._await_child(step, str(started.body["child_submission_id"]))

    async def _establish(
        self,
        step: int,
        agent_id: str,
        input: Any,
        thread_id: str | None,
        host_id: str | None,
        budget: int | None,
    ) -> HistoryRecord:
        assert self._children is not None
        children = self._children
        receipt = await self._guarded(
            "attempt:call",
            lambda: children.establish_child(
                self._claim,
                step=step,
                agent_id=agent_id,
                input=input,
                thread_id=thread_id,
                host_id=host_id,
                budget=budget,
            ),
            after=True,
        )
        if receipt.created and self._waker is not None:
            await self._waker.wake(receipt.host_id, reason="child")
        record = HistoryRecord(
            sequence=0,
            record_id="",
            submission_id=self._claim.submission_id,
            kind="call-started",
            body={
                "child_thread_id": receipt.thread_id,
                "child_submission_id": receipt.submission_id,
                "child_host_id": receipt.host_id,
                "agent_id": agent_id,
                "payload_digest": payload_digest(agent_id, None, input),
                "budget": budget,
            },
            step=step,
        )
        self._journal[(step, "call-started")] = record
        self._last_committed = max(self._last_committed, step)
        return record

    async def _await_child(self, step: int, child_submission_id: str) -> ChildOutcome:
        """Wait for the child with every other call of this attempt still establishing or
        waiting (calls awaited together suspend together, in one `children-awaited`)."""
        future: asyncio.Future[ChildOutcome] = asyncio.get_running_loop().create_future()
        self._awaiting[step] = (child_submission_id, future)
        if self._gathering is None:
            self._gathering = asyncio.ensure_future(self._gather_children())
            self._gatherers.add(self._gathering)
            self._gathering.add_done_callback(self._gatherers.discard)
        return await future

    async def _gather_children(self) -> None:
        # Calls started together (asyncio.gather) reach this point in the same turns of the
        # event loop: let the others in, and wait for those still establishing.
        await asyncio.sleep(0)
        while self._establishing:
            self._established.clear()
            await self._established.wait()
        batch, self._awaiting, self._gathering = self._awaiting, {}, None
        try:
            if self.fault is not None:  # a call of this batch failed: no wait after a fault
                raise AttemptFaulted(
                    f"attempt {self._claim.attempt_id}: an earlier step failed"
                    f" ({type(self.fault).__name__}); no wait for children"
                ) from self.fault
            outcomes = await self._wait_or_join(batch)
        except BaseException as error:
            for _, future in batch.values():
                if not future.done():
                    future.set_exception(error)
            return
        for step, (_, future) in batch.items():
            if not future.done():
                future.set_result(outcomes[step])

    async def _wait_or_join(
        self, batch: dict[int, tuple[str, asyncio.Future[ChildOutcome]]]
    ) -> dict[int, ChildOutcome]:
        assert self._children is not None
        children = self._children
        listed = [batch[step][0] for step in sorted(batch)]  # in call order
        wait = await self._guarded(
            "attempt:call-wait",
            lambda: children.suspend_for_children(self._claim, listed),
            after=True,
        )
        if wait.suspended:
            raise WaitForChildren(f"waits for children {', '.join(wait.waiting)}")
        outcomes: dict[int, ChildOutcome] = {}
        for step in sorted(batch):
            joined = await self._guarded(
                "attempt:call-join", _joining(children, self._claim, step), after=True
            )
            self._last_committed = max(self._last_committed, step)
            outcomes[step] = _child_outcome(joined.model_dump())
        return outcomes

    async def save_checkpoint(
        self,
        meta: Any,
        data: bytes = b"",
        *,
        carry: bool = False,
        records: Sequence[tuple[str, Any]] = (),
        step: int | None = None,
    ) -> None:
        validate_input("meta", meta)
        if step is None:
            step = self._step
        elif not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= self._step:
            raise InvalidInput("step", f"an integer from 0 to {self._step} (steps taken)", step)
        if not isinstance(data, bytes):
            raise InvalidInput("data", "bytes", type(data).__name__)
        for kind, body in records:
            if kind in RESERVED_KINDS:
                raise InvalidInput("records", f"record kinds other than {kind!r} (reserved)")
            validate_input("records", body)
        store = self._wired_checkpoints()
        self._check_fault()
        listed = list(records)
        await self._guarded(
            "attempt:checkpoint",
            lambda: store.save(
                self._claim, step=step, meta=meta, data=data, carry=carry, records=listed
            ),
        )
        if self._saved is not None:
            self._saved.append(SavedCheckpoint(self._claim.submission_id, step, meta, data, carry))

    async def checkpoints(self) -> list[SavedCheckpoint]:
        store = self._wired_checkpoints()
        if self._saved is None:
            rows = await self._guarded(None, lambda: store.load(self._claim))
            self._saved = [
                SavedCheckpoint(r.submission_id, r.step, r.meta, r.data, r.carry) for r in rows
            ]
        return list(self._saved)

    @property
    def steps_taken(self) -> int:
        return self._step

    def advance_to(self, step: int) -> None:
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise InvalidInput("step", "a non-negative integer", step)
        self._step = max(self._step, step)

    def _wired_checkpoints(self) -> Checkpoints:
        if self._checkpoints is None:
            raise InvalidInput("checkpoints", "an attempt context wired for checkpoints")
        return self._checkpoints

    def _check_fault(self) -> None:
        if self.fault is not None:
            # A step after a failed one would leave a gap in the journal that the re-run
            # could never replay.
            raise AttemptFaulted(
                f"attempt {self._claim.attempt_id}: an earlier step failed"
                f" ({type(self.fault).__name__}: {self.fault}); no further step can run"
            ) from self.fault

    def _next(self) -> int:
        self._check_fault()
        self._step += 1
        return self._step

    def _uncommitted_call(self, step: int) -> bool:
        """Whether ``step`` is a call that never committed while later calls did: calls awaited
        together are established concurrently, so a fault in one (its database write cut off)
        can leave its step empty behind committed ones. The re-run establishes it then; any
        other gap in the journal is nondeterminism."""
        if step > self._last_committed or any(s == step for s, _ in self._journal):
            return False
        later = {kind for s, kind in self._journal if s is not None and s > step}
        return later <= {"call-started", "call-joined"}

    def _expect_new(self, step: int, kind: str) -> None:
        if step <= self._last_committed:
            kinds = sorted(k for s, k in self._journal if s == step)
            raise NonDeterministic(f"step {step}", f"one of the committed {kinds}", kind)

    async def _guarded(
        self, failpoint: str | None, write: Callable[[], Awaitable[T]], *, after: bool = False
    ) -> T:
        """Run one of threadwarden's writes (after its failpoint; ``after``: also once it
        committed, at ``{failpoint}:after``); remember how it failed."""
        try:
            if failpoint is not None:
                await self._failpoints.hit(failpoint)
            written = await write()
            if after and failpoint is not None:
                await self._failpoints.hit(f"{failpoint}:after")
            return written
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
        honour_abort: bool = True,
    ) -> ThreadRecord:
        record = await self._guarded(
            failpoint,
            lambda: self._attempts.append(
                self._claim, kind, body, step=step, honour_abort=honour_abort
            ),
        )
        self._journal[(step, kind)] = record
        self._last_committed = max(self._last_committed, step)
        if check_yield and datetime.now(UTC) >= self._yield_after:
            raise Yield(f"yield_after {self._yield_after.isoformat()} passed at step {step}")
        return _record(record)
