"""An attempt's calls to other agents (`JournaledContext.call_agent`): each call admits a child
once (``call-started``), and calls awaited together suspend the attempt together, in one
``children-awaited`` wait, or join the children's outcomes (``call-joined``) on the re-run.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from threadwarden.activities.endings import AttemptFaulted, NonDeterministic, WaitForChildren
from threadwarden.activities.journal import Journal
from threadwarden.activities.wake import Waker
from threadwarden.bindings import ChildOutcome, ThreadRecord
from threadwarden.ledger.admission import payload_digest
from threadwarden.ledger.child_establishment import call_started_body
from threadwarden.ledger.children import Children
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.models import CallJoined

CLOSE_GATHER_S = 5.0
"""The longest an ended attempt waits for its calls awaited together to finish gathering (a
wait being written) before it cancels them."""


@dataclass(frozen=True)
class Call:
    """One `call_agent` request, its arguments validated."""

    agent_id: str
    input: Any = field(repr=False)  # payload: never in a log line
    thread_id: str | None
    host_id: str | None
    budget: int | None

    @property
    def digest(self) -> str:
        """The payload digest its ``call-started`` record keeps (a re-run's call must match)."""
        return payload_digest(self.agent_id, None, self.input)


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


class ChildCalls:
    """The calls of one attempt, on its journal."""

    def __init__(self, journal: Journal, children: Children, waker: Waker | None) -> None:
        self._journal = journal
        self._children = children
        self._waker = waker
        self._establishing = 0
        self._awaiting: dict[int, tuple[str, asyncio.Future[ChildOutcome]]] = {}
        self._gathering: asyncio.Task[None] | None = None
        self._gatherers: set[asyncio.Task[None]] = set()
        """Every gatherer still running (one may be writing its batch's wait)."""
        self._established = asyncio.Event()

    async def call(self, call: Call) -> ChildOutcome:
        """One call: replayed, established, or waited for."""
        try:
            return await self._call(call)
        except asyncio.CancelledError as error:
            # A call cancelled anywhere (the attempt cut off, a deploy, the handler's own
            # timeout) is a fault: the calls awaited with it must not suspend without it.
            if self._journal.fault is None:
                self._journal.fault = error
            raise

    async def close(self) -> None:
        """The attempt ended: calls awaited together that were still gathering end with it
        (after a fault they write nothing; bounded by `CLOSE_GATHER_S`)."""
        for gathering in list(self._gatherers):
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(gathering), CLOSE_GATHER_S)
            gathering.cancel()

    async def _call(self, call: Call) -> ChildOutcome:
        journal = self._journal
        step = journal.next()
        joined = journal.record(step, "call-joined")
        if joined is not None:
            return _child_outcome(joined.body)
        started = journal.record(step, "call-started")
        if started is None:
            if not journal.uncommitted_call(step):
                journal.expect_new(step, "call-started")
            self._establishing += 1
            try:
                started = await self._establish(step, call)
            finally:
                self._establishing -= 1
                self._established.set()
        elif (
            started.body.get("agent_id"),
            started.body.get("payload_digest"),
            started.body.get("budget"),
        ) != (call.agent_id, call.digest, call.budget) or (
            call.thread_id is not None and started.body.get("child_thread_id") != call.thread_id
        ):
            raise NonDeterministic(
                f"step {step}",
                f"the committed call to {started.body.get('agent_id')}",
                call.agent_id,
            )
        return await self._await_child(step, str(started.body["child_submission_id"]))

    async def _establish(self, step: int, call: Call) -> ThreadRecord:
        claim, children = self._journal.claim, self._children
        receipt = await self._journal.guarded(
            "attempt:call",
            # The call's fields are the request's own arguments.
            lambda: children.establish_child(claim, step=step, **vars(call)),
            after=True,
        )
        if receipt.created and self._waker is not None:
            await self._waker.wake(receipt.host_id, reason="child")
        record = ThreadRecord(
            sequence=0,
            record_id="",
            submission_id=claim.submission_id,
            kind="call-started",
            body=call_started_body(
                receipt, agent_id=call.agent_id, digest=call.digest, budget=call.budget
            ),
            step=step,
        )
        self._journal.commit(step, record)
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
            fault = self._journal.fault
            if fault is not None:  # a call of this batch failed: no wait after a fault
                raise AttemptFaulted(
                    f"attempt {self._journal.claim.attempt_id}: an earlier step failed"
                    f" ({type(fault).__name__}); no wait for children"
                ) from fault
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
        claim, children = self._journal.claim, self._children
        listed = [batch[step][0] for step in sorted(batch)]  # in call order
        wait = await self._journal.guarded(
            "attempt:call-wait",
            lambda: children.suspend_for_children(claim, listed),
            after=True,
        )
        if wait.suspended:
            raise WaitForChildren(f"waits for children {', '.join(wait.waiting)}")
        outcomes: dict[int, ChildOutcome] = {}
        for step in sorted(batch):
            joined = await self._journal.guarded(
                "attempt:call-join", _joining(children, claim, step), after=True
            )
            self._journal.commit(step)
            outcomes[step] = _child_outcome(joined.model_dump())
        return outcomes
