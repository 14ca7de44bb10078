"""The attempt context a binding's handler receives (`JournaledContext`): each of its operations
(an append, a tool call, an approval request, a question, a message, a spend, a checkpoint) one
journaled step, replayed from the journal (`activities/journal.py`) on a re-run, so a re-run
after a crash or a yield repeats nothing that was committed. Calls to other agents are
`activities/child_calls.py`'s.
"""

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from threadwarden.activities.child_calls import Call, ChildCalls
from threadwarden.activities.endings import NonDeterministic, Suspend, UnknownEffect
from threadwarden.activities.journal import RESERVED_KINDS, Journal, check_count
from threadwarden.activities.lease import beat
from threadwarden.activities.live_text import LiveText
from threadwarden.bindings import ApprovalDecision, ChildOutcome, SavedCheckpoint, ThreadRecord
from threadwarden.errors import BudgetExceeded, InvalidInput
from threadwarden.ledger.checkpoints import Checkpoints
from threadwarden.validation import check_schema, validate_id, validate_input


def _check_request(thread_id: str | None, agent_id: str, host_id: str | None, input: Any) -> None:
    """Validate a request to another thread (a message, a call), raising `InvalidInput`."""
    if thread_id is not None:
        validate_id("thread_id", thread_id)
    validate_id("agent_id", agent_id)
    if host_id is not None:
        validate_id("host_id", host_id)
    validate_input("input", input)


class JournaledContext:
    """The implementation of `threadwarden.AttemptContext` threadwarden hands to a binding:
    every step journaled in the ledger and replayed from it on a re-run."""

    def __init__(
        self,
        journal: Journal,
        *,
        calls: ChildCalls | None = None,
        checkpoints: Checkpoints | None = None,
        live: LiveText | None = None,
    ) -> None:
        """``calls`` and ``checkpoints`` wire `call_agent` and the checkpoints (without, they
        raise `InvalidInput`); ``live`` streams `text_delta` to readers (without, it does
        nothing)."""
        self._journal = journal
        self._claim = journal.claim
        self._calls = calls
        self._checkpoints = checkpoints
        self._saved: list[SavedCheckpoint] | None = None
        self._live = live
        self._open_step: int | None = None
        """The step whose tool is running (live text belongs to it), else None."""
        self._history: list[ThreadRecord] | None = None

    @property
    def fault(self) -> BaseException | None:
        """The first failure of one of threadwarden's own writes (`Journal.fault`): it decides
        the attempt whatever the handler made of it."""
        return self._journal.fault

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
            self._history = list(self._claim.history)
        return list(self._history)

    @property
    def yield_after(self) -> datetime:
        return self._journal.yield_after

    @property
    def replaying(self) -> bool:
        return self._journal.replaying

    def heartbeat(self) -> None:
        beat()

    async def close(self, *, cut_off: bool) -> None:
        """The attempt ended. Calls awaited together that were still gathering end with it
        (`ChildCalls.close`). Its live text stops: a ``cut_off`` attempt's unjournaled text
        stays for readers until the re-run starts the step over; otherwise it goes."""
        if self._calls is not None:
            await self._calls.close()
        if self._live is not None:
            await self._live.close(keep=cut_off)

    @property
    def live_text(self) -> bool:
        return self._live is not None

    def text_delta(self, text: str) -> None:
        if self._live is None or self._open_step is None or not text:
            return  # outside a tool's run there is no step in progress to stream
        if isinstance(text, str):
            self._live.add(self._open_step, text)

    async def append(self, kind: str, body: Any) -> ThreadRecord:
        if kind in RESERVED_KINDS:
            raise InvalidInput("kind", f"a record kind other than {kind!r} (reserved)")
        validate_input("body", body)
        step = self._journal.next()
        committed = self._journal.record(step, kind)
        if committed is not None:
            if committed.body != body:
                raise NonDeterministic(
                    f"step {step}", f"the committed {kind} record {committed.body!r}", body
                )
            return committed
        self._journal.expect_new(step, kind)
        return await self._journal.write(kind, body, step, failpoint="attempt:append")

    async def tool(
        self,
        name: str,
        args: dict[str, Any],
        run: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        side_effect: bool = False,
        idempotency_key: str | None = None,
        expected_ms: int | None = None,
    ) -> Any:
        validate_input("args", args)
        if expected_ms is not None:
            check_count("expected_ms", expected_ms)
        journal = self._journal
        step = journal.next()
        result = journal.record(step, "tool-result")
        if result is not None:
            return result.body.get("result") if isinstance(result.body, dict) else None
        call = journal.record(step, "tool-call")
        if call is None:
            journal.expect_new(step, "tool-call")
        elif side_effect and not idempotency_key and not journal.has(step, "tool-resolution"):
            raise UnknownEffect(f"tool {name} at step {step}")
        if expected_ms is not None:  # before anything of the step: its call is not written yet
            journal.make_room(expected_ms, f"tool {name!r} at step {step}")
        if call is None:
            body = {
                "tool": name,
                "args": args,
                "side_effect": side_effect,
                "idempotency_key": idempotency_key,
            }
            await journal.write(
                "tool-call", body, step, failpoint="attempt:tool", check_yield=False
            )
        self._open_step = step
        try:
            with journal.timing.step():
                value = await run(args)
        finally:
            self._open_step = None
        validate_input("result", value)
        # The call ran: its result is recorded even if an abort arrived meanwhile (it lands at
        # the next boundary), so a side effect's outcome is never lost to an abort.
        body = {"tool": name, "result": value}
        if self._live is not None:  # its last live words before the journaled response
            await self._live.flush(step)
        await journal.write("tool-result", body, step, honour_abort=False)
        if self._live is not None:  # the journaled response replaces the step's live text
            await self._live.finish(step)
        return value

    def before_long_step(self, expected_ms: int) -> None:
        check_count("expected_ms", expected_ms)
        if not self._journal.replaying:  # a replayed step takes no time
            self._journal.make_room(expected_ms, f"a step after step {self._journal.step}")

    async def request_approval(
        self, reason: str, *, on_deny: Literal["fail", "resume"] = "fail"
    ) -> ApprovalDecision:
        if on_deny not in ("fail", "resume"):
            raise InvalidInput("on_deny", "'fail' or 'resume'", on_deny)
        step = self._journal.next()
        decision = self._journal.record(step, "approval-decision")
        if decision is not None and isinstance(decision.body, dict):
            body = decision.body
            if body.get("approved") or on_deny == "resume":
                return ApprovalDecision(
                    approved=bool(body.get("approved")),
                    reason=body.get("reason"),
                    operator=body.get("operator"),
                )
            raise Suspend(f"approval at step {step} was denied")  # deny settled the submission
        if not self._journal.has(step, "approval-requested"):
            self._journal.expect_new(step, "approval-requested")
            # The deny mutation reads ``on_deny`` from this record: "resume" moves the
            # submission on instead of settling it.
            asked = (
                {"reason": reason} if on_deny == "fail" else {"reason": reason, "on_deny": on_deny}
            )
            await self._journal.write("approval-requested", asked, step, check_yield=False)
        raise Suspend(reason)

    async def ask(self, payload: Any, *, schema: dict[str, Any] | None = None) -> Any:
        validate_input("payload", payload)
        if schema is not None:
            check_schema(schema)
        step = self._journal.next()
        answered = self._journal.record(step, "input-answer")
        if answered is not None and isinstance(answered.body, dict):
            return answered.body.get("value")
        if not self._journal.has(step, "input-requested"):
            self._journal.expect_new(step, "input-requested")
            asked = (
                {"payload": payload} if schema is None else {"payload": payload, "schema": schema}
            )
            await self._journal.write("input-requested", asked, step, check_yield=False)
        raise Suspend(f"a question at step {step}")

    async def send_message(
        self, thread_id: str, input: Any, *, agent_id: str, host_id: str | None = None
    ) -> str:
        _check_request(thread_id, agent_id, host_id, input)
        step = self._journal.next()
        sent = self._journal.record(step, "message-sent")
        if sent is None:
            self._journal.expect_new(step, "message-sent")
            sent = await self._journal.guarded(
                "attempt:send_message",
                lambda: self._journal.attempts.send_message(
                    self._claim,
                    step=step,
                    thread_id=thread_id,
                    agent_id=agent_id,
                    input=input,
                    host_id=host_id,
                ),
            )
            self._journal.commit(step, sent)
        elif (sent.body["to_thread"], sent.body["input"]) != (thread_id, input):
            raise NonDeterministic(
                f"step {step}", f"the committed message to {sent.body['to_thread']}", thread_id
            )
        return str(sent.body["message_id"])

    @property
    def budget_left(self) -> int | None:
        lineage = self._journal.record(0, "lineage")
        reserved = lineage.body.get("budget") if lineage is not None else None
        if reserved is None:
            return None
        spent = sum(int(body["units"]) for body in self._journal.kind_bodies("budget-spent"))
        return int(reserved) - spent

    async def spend(self, units: int, note: str | None = None) -> int | None:
        check_count("units", units)
        step = self._journal.next()
        committed = self._journal.record(step, "budget-spent")
        if committed is None:
            self._journal.expect_new(step, "budget-spent")
            left = self.budget_left
            if left is not None and units > left:
                raise BudgetExceeded(f"units: {units} exceed the {left} left of this delegation")
            await self._journal.write("budget-spent", {"units": units, "note": note}, step)
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
        if budget is not None:
            check_count("budget", budget)
        _check_request(thread_id, agent_id, host_id, input)
        if self._calls is None:
            raise InvalidInput("call_agent", "an attempt context wired for children")
        return await self._calls.call(Call(agent_id, input, thread_id, host_id, budget))

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
        taken = self._journal.step
        if step is None:
            step = taken
        elif not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= taken:
            raise InvalidInput("step", f"an integer from 0 to {taken} (steps taken)", step)
        if not isinstance(data, bytes):
            raise InvalidInput("data", "bytes", type(data).__name__)
        for kind, body in records:
            if kind in RESERVED_KINDS:
                raise InvalidInput("records", f"record kinds other than {kind!r} (reserved)")
            validate_input("records", body)
        store = self._wired_checkpoints()
        self._journal.check_fault()
        listed = list(records)
        await self._journal.guarded(
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
            rows = await self._journal.guarded(None, lambda: store.load(self._claim))
            self._saved = [
                SavedCheckpoint(r.submission_id, r.step, r.meta, r.data, r.carry) for r in rows
            ]
        return list(self._saved)

    @property
    def steps_taken(self) -> int:
        return self._journal.step

    def advance_to(self, step: int) -> None:
        check_count("step", step)
        self._journal.step = max(self._journal.step, step)

    def _wired_checkpoints(self) -> Checkpoints:
        if self._checkpoints is None:
            raise InvalidInput("checkpoints", "an attempt context wired for checkpoints")
        return self._checkpoints
