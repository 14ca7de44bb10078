"""The agent runtime API applications implement: bindings, the attempt context, outcomes.

A *binding* runs one submission's work. threadwarden calls its handler inside a fenced attempt:
every record the handler appends is checked against the attempt's ownership before it is written,
so a stale attempt can never change the thread.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from threadwarden._outcomes import (
    ApprovalDecision,
    ChildOutcome,
    Completed,
    Failed,
    Outcome,
    SavedCheckpoint,
    Yielded,
)
from threadwarden.errors import InvalidInput
from threadwarden.validation import validate_id

__all__ = [
    "SUMMARY",
    "ApprovalDecision",
    "AttemptContext",
    "Binding",
    "BindingRegistry",
    "ChildOutcome",
    "Completed",
    "Failed",
    "Handler",
    "Memory",
    "Outcome",
    "SavedCheckpoint",
    "ThreadRecord",
    "Yielded",
]


SUMMARY = "summary"
"""The record kind of a summary of a thread's older turns, written by a binding that compacts
its memory. Its body is ``{"of": KIND, "first": SEQUENCE, "last": SEQUENCE, "turns": N,
"text": STR}``: it stands for every record of the thread up to and including sequence
``last`` (``of``: the kind of the transcript records it summarizes; ``first``: the oldest
sequence it covers; ``turns``: how many turns). The records it covers stay in the thread; a
binding whose ``history_kinds`` include it loads the newest summary and what follows it
(`Binding`; the agent adapters: docs/agents.md, "Long threads")."""


@dataclass(frozen=True)
class ThreadRecord:
    """One canonical record of a thread's history, as a binding sees it."""

    sequence: int
    record_id: str
    submission_id: str
    kind: str
    body: Any
    step: int | None = None


class AttemptContext(Protocol):
    """What a binding's handler may do during one attempt."""

    @property
    def submission_id(self) -> str: ...

    @property
    def thread_id(self) -> str: ...

    @property
    def input(self) -> Any: ...

    @property
    def history(self) -> list[ThreadRecord]:
        """Canonical records of earlier submissions of the thread, as the binding's
        ``history_kinds`` select them (`Binding`): nothing for an empty set; with `SUMMARY`
        among them, the newest summary first, then every record of the other kinds after the
        last sequence it covers, oldest first (all of them when there is no summary yet);
        otherwise the newest 1,000 records of those kinds (of every kind by default), oldest
        first."""
        ...

    @property
    def yield_after(self) -> datetime:
        """After this instant the handler should stop at its next committed boundary."""
        ...

    @property
    def replaying(self) -> bool:
        """True while the handler re-executes steps an earlier attempt already committed."""
        ...

    @property
    def live_text(self) -> bool:
        """Whether readers see what `text_delta` forwards: False when the worker's
        ``live_text`` setting is off (`text_delta` then does nothing). The agent adapters
        stream a model's response only when it is True and the text goes to readers, and
        otherwise ask for the whole response: a stream costs the worker its chunks' parsing."""
        ...

    def text_delta(self, text: str) -> None:
        """Forward a fragment of the text being generated for the step in progress (the
        model request inside a ``tool`` call): readers see it live (the API's ``event: delta``,
        ``watch``, the console). Never journaled; a replayed step sends none; a write that
        fails is dropped. The agent adapters call it for every text delta of a streamed
        response (docs/agents.md, "Streaming")."""
        ...

    async def append(self, kind: str, body: Any) -> ThreadRecord:
        """Append a canonical record (a journal step), fenced by this attempt's ownership.

        On a re-run, a step already committed is returned instead of written again.
        """
        ...

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
        """Prepare (record the call), run, then record and return the result.

        On a re-run, a recorded result is returned without running the tool again. A
        ``side_effect`` call that was prepared but never got its result is *unknown*: it is never
        replayed automatically, the submission waits for an operator. Give an
        ``idempotency_key`` when running the tool twice is safe; such calls simply run again.

        ``expected_ms``: how long the call is expected to take (a model request, a sleep), for
        an inline binding (`Binding`): an inline attempt that has less than that left of its
        budget yields before the call (nothing of it recorded), and the dispatched attempt
        runs it once (`before_long_step`).
        """
        ...

    def before_long_step(self, expected_ms: int) -> None:
        """Declare that the step about to start (work that is not a `tool` call, or more than
        one) is expected to take ``expected_ms``. For an inline binding (`Binding`) only: an
        inline attempt that has less than that left of its budget yields here, at the committed
        boundary before the step (raising a `BaseException`: never swallow it), so the step
        runs once, on the dispatched attempt. Otherwise, and while replaying, it does nothing.
        """
        ...

    async def request_approval(
        self, reason: str, *, on_deny: Literal["fail", "resume"] = "fail"
    ) -> ApprovalDecision:
        """Wait for a person: the submission is suspended until approved or denied.

        Approved, the call returns an approved `ApprovalDecision` (on the re-run). Denied, the
        submission settles ``failed`` (``on_deny="fail"``, the default), or, with
        ``on_deny="resume"``, it runs again and the call returns the denial with the operator's
        reason, so the binding can go on (an agent tells its model the tool was refused).
        """
        ...

    async def ask(self, payload: Any, *, schema: dict[str, Any] | None = None) -> Any:
        """Ask a person and wait for the answer: the submission is suspended (``waiting_for``
        ``input``, holding no claim), the inbox lists ``payload`` (any JSON: a question, a
        form), and the call returns the value an operator gives (`threadwarden answer`, the
        client's ``answer()``), journaled once, on the re-run. ``schema`` (a JSON Schema) is
        checked here and the answer is validated against it before anything is written.
        """
        ...

    async def send_message(
        self, thread_id: str, input: Any, *, agent_id: str, host_id: str | None = None
    ) -> str:
        """Send ``input`` to another thread as a new submission for ``agent_id``; returns the
        message id.

        The message is committed with this step (a ``message-sent`` record) and delivered at
        least once by the host's maintenance pass; the destination accepts it at most once, and
        its submission links back to this thread. ``host_id`` places a new destination thread
        on that host (by default the thread is its own host). On a re-run the committed step
        returns the same message id and nothing is sent again.
        """
        ...

    async def call_agent(
        self,
        agent_id: str,
        input: Any,
        *,
        thread_id: str | None = None,
        host_id: str | None = None,
        budget: int | None = None,
    ) -> ChildOutcome:
        """Delegate ``input`` to ``agent_id`` as a child submission and wait for its outcome.

        The child is admitted once per call (its thread id, by default, and its idempotency
        key derive from this submission and the call's journal step), on its own thread
        (``thread_id``, on ``host_id``). The attempt then ends without settling: the submission
        waits (``suspended``, ``waiting_for`` ``child``) without holding a claim, and runs again
        once the child settled; the re-run replays its steps and the call returns the child's
        canonical outcome, recorded once (``call-joined``). Calls awaited together (for example
        with ``asyncio.gather``) are waited for together. The wait ends the attempt through a
        ``BaseException``: never swallow one.

        ``budget`` reserves that many units (an application-defined unit: tokens, cents, tool
        calls) for the child, together with its admission; the child spends them with `spend`
        and the join settles the account once (``budget_consumed``; the rest is released).
        """
        ...

    @property
    def budget_left(self) -> int | None:
        """What is left of the budget this submission's delegation reserved for it (None: it
        was given none, it is not limited)."""
        ...

    async def spend(self, units: int, note: str | None = None) -> int | None:
        """Record spending ``units`` of the budget (a journal step; a re-run does not spend
        again); returns what is left. Raises `BudgetExceeded`, recording nothing, when more
        than is left; without a budget it only records."""
        ...

    async def save_checkpoint(
        self,
        meta: Any,
        data: bytes = b"",
        *,
        carry: bool = False,
        records: Sequence[tuple[str, Any]] = (),
        step: int | None = None,
    ) -> None:
        """Save state to resume from (a framework's checkpoint), fenced by this attempt.

        Not a journal step: it remembers the journal position it holds the work of (``step``,
        at most `steps_taken`; by default `steps_taken`), so a binding that resumes from it
        calls `advance_to` with that step and its later steps line up with the journal.
        ``carry`` marks state the thread's next submission may start from; a carried one whose
        ``meta`` is a JSON object with ``"delta": true`` holds only what changed since the
        carried ones before it (`checkpoints` returns them back to the newest one that does
        not).
        ``records`` (kind and JSON body each, kinds other than threadwarden's own) are appended
        in the same transaction, as plain records: what the saved step did, for ``watch`` and
        the console. A stale attempt saves nothing.
        """
        ...

    async def checkpoints(self) -> list[SavedCheckpoint]:
        """The thread's carried checkpoints (of its earlier submissions for the same agent that
        settled completed: the newest that is not marked ``"delta": true`` in its ``meta`` and
        every one after it, none if there is none), then every checkpoint this submission
        saved, oldest first. One read, on first use, bounded by those rows."""
        ...

    @property
    def steps_taken(self) -> int:
        """The journal steps this attempt has taken or skipped (`advance_to`) so far."""
        ...

    def advance_to(self, step: int) -> None:
        """Move the step counter forward to ``step`` (never back): the steps up to it belong
        to work a resumed checkpoint already holds, the next step is ``step + 1``."""
        ...

    def heartbeat(self) -> None:
        """Tell threadwarden the attempt is alive (long handlers should call it now and then)."""
        ...


Handler = Callable[[AttemptContext], Awaitable[Outcome]]


@dataclass(frozen=True)
class Memory:
    """How an agent adapter keeps a long thread inside its model's context (docs/agents.md,
    "Long threads"). Compaction adds a `SUMMARY` record and never removes one.

    ``budget_tokens``: when the next request would carry more than this (tokens as the adapter
    estimates them, about four characters each), the oldest turns not yet summarized are
    summarized first, keeping at least ``keep_turns`` turns verbatim. None: nothing is
    summarized until the model refuses a request for its length; then the adapter summarizes
    and sends it again, once (also with a budget). ``summarizer``: the model that writes
    summaries (that framework's model object; default: the agent's own).
    """

    budget_tokens: int | None = None
    keep_turns: int = 4
    summarizer: Any = None

    def __post_init__(self) -> None:
        budget = self.budget_tokens
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
        ):
            raise InvalidInput("budget_tokens", "a positive number of tokens, or None", budget)
        keep = self.keep_turns
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise InvalidInput("keep_turns", "a number of turns, 0 or more", keep)


@dataclass(frozen=True)
class Binding:
    """An agent definition that can run submissions addressed to ``agent_id``.

    ``digest`` identifies the exact definition (model, prompt, toolkit). Work pinned to one digest
    never runs under another.

    ``history_kinds`` names the record kinds the handler reads from `AttemptContext.history`;
    the claim loads only those, and what it loads decides what a turn costs on a long thread:

    - an empty set loads nothing (a binding whose memory is elsewhere, or that has none);
    - a set with `SUMMARY` loads the thread's newest ``summary`` record (first), then every
      record of the other kinds after the last sequence it covers, oldest first, with no limit
      (before the first summary: every record of those kinds). The binding compacts (writes a
      newer summary) to keep this small; nothing is ever dropped unsaid;
    - any other set, or None (the default: every kind), loads the newest 1,000 records of
      those kinds: an older record is not loaded, and nothing says so.

    ``inline`` declares the handler's turns short (seconds, not minutes): a pass whose worker
    has this binding runs the head there, as a local activity inside the pass's workflow task,
    instead of dispatching it to the agent's task queue (no activity task, no heartbeats; with
    nothing else of the pass due, begin runs it and a pass is one local activity). A worker
    without the binding still routes the head to the agent's queue. The attempt runs there for
    the worker's inline budget, then hands the head over at a committed boundary; the budget
    never cuts a step in flight, so an inline binding declares each step that may run long
    (``expected_ms`` of `AttemptContext.tool`, `AttemptContext.before_long_step`): such a
    step does not start inline when it would outlive the budget. Leave ``inline`` false for
    turns that wait on a model for long: a local activity holds its workflow task open,
    heartbeating it every few seconds into the history.
    """

    agent_id: str
    digest: str
    handler: Handler
    history_kinds: frozenset[str] | None = None
    inline: bool = False

    def __post_init__(self) -> None:
        validate_id("agent_id", self.agent_id)
        if not self.digest:
            raise InvalidInput("digest", "a non-empty definition digest")
        if self.history_kinds is not None and (
            isinstance(self.history_kinds, str)
            or not all(isinstance(k, str) and k for k in self.history_kinds)
        ):
            raise InvalidInput(
                "history_kinds", "a set of record kinds (non-empty strings)", self.history_kinds
            )


@dataclass
class BindingRegistry:
    """The bindings one worker can run, by agent id."""

    bindings: dict[str, Binding] = field(default_factory=dict)

    def register(self, binding: Binding) -> None:
        """Add a binding; registering a second binding for the same agent id is an error."""
        if binding.agent_id in self.bindings:
            raise InvalidInput("agent_id", "an agent id registered once", binding.agent_id)
        self.bindings[binding.agent_id] = binding

    def get(self, agent_id: str) -> Binding | None:
        """The binding for ``agent_id``, or None when this worker has none."""
        return self.bindings.get(agent_id)

    def agent_ids(self) -> list[str]:
        """Registered agent ids, sorted."""
        return sorted(self.bindings)
