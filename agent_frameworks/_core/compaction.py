"""Long threads, for every model adapter: what the next request remembers of the thread, and
compaction (docs/agents.md, "Long threads").

A thread's memory is its newest `SUMMARY` record, if any, and the turns after the last sequence
it covers (each a completed turn's transcript record). When the next request would carry more
than the budget, or the model refused a request for its length, the oldest turns not yet
covered are folded into a new summary, keeping the newest ``keep_turns`` verbatim: each fold is
one journaled model request (the adapter's ``ask``) whose instructions ask for a summary, and one
`SUMMARY` record. A fold is sized to fit: it carries the previous summary and as many of the
oldest turns as the limit allows, so a thread far past the model's context is summarized a few
turns at a time. Nothing is rewritten or deleted; a re-run replays the same folds from the
journal (the decisions depend only on the thread's records and on journaled answers).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from threadwarden.bindings import SUMMARY, AttemptContext, Memory, ThreadRecord

CHARS_PER_TOKEN = 4
"""How the adapters estimate tokens: about four characters of text each."""

SUMMARY_INSTRUCTIONS = (
    "You write the memory of a long conversation between a user and an assistant. Summarize"
    " the conversation below for the assistant, who will continue it without seeing it: keep"
    " the facts, names, numbers, decisions, what the user asked for and what is still open."
    " When an earlier summary is given, fold it into the new one: nothing it holds may be lost."
    " Answer with the summary only."
)
"""The instructions of every summary request (a model that writes summaries may key on them)."""

SUMMARY_PREAMBLE = "Summary of the conversation so far (its earlier turns, summarized):\n"
"""How a summary opens where a request carries it, before the turns after it."""


def tokens(text: str) -> int:
    """``text``'s size in tokens, as the adapters estimate it."""
    return -(-len(text) // CHARS_PER_TOKEN)


class TooLong(Exception):
    """The model refused a request for its length (its context window is smaller)."""

    def __init__(self, model: str, message: str, size: int) -> None:
        super().__init__(f"model {model} refused a request of about {size} tokens: {message}")
        self.size = size


def refusal(message: str, size: int) -> dict[str, Any]:
    """What a model step records when the model refused the request for its length (journaled
    like an answer: a re-run replays the refusal and compacts the same way)."""
    return {"refused": "too-long", "message": message, "tokens": size}


def refused(recorded: Any) -> bool:
    """Whether a recorded model step is a refusal for length."""
    return isinstance(recorded, dict) and recorded.get("refused") == "too-long"


_TOO_LONG_SIGNS = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "context window",
    "too many tokens",
)


def says_too_long(text: object) -> bool:
    """Whether an endpoint's error text says the request was too long for the model."""
    shown = str(text).lower()
    return any(sign in shown for sign in _TOO_LONG_SIGNS)


@dataclass(frozen=True)
class Turn:
    """One completed earlier turn: its transcript record's sequence and body, as text (rendered
    when first asked for: a turn with no budget to weigh it and nothing to summarize is never
    rendered)."""

    sequence: int
    body: Any
    render: Callable[[Any], str] = field(repr=False, compare=False)

    @functools.cached_property
    def text(self) -> str:
        return self.render(self.body)

    @property
    def tokens(self) -> int:
        return tokens(self.text)


@dataclass(frozen=True)
class Summary:
    """The newest summary: the turns up to transcript sequence ``last`` in ``text``."""

    first: int
    last: int
    turns: int
    text: str
    extra: dict[str, Any] = field(default_factory=dict)
    """What the adapter keeps beside the text (pydantic-ai: the standing system prompts)."""

    def body(self, transcript: str) -> dict[str, Any]:
        return {
            "of": transcript,
            "first": self.first,
            "last": self.last,
            "turns": self.turns,
            "text": self.text,
            **self.extra,
        }

    @property
    def message(self) -> str:
        """The summary as a request carries it."""
        return SUMMARY_PREAMBLE + self.text


@dataclass(frozen=True)
class Recall:
    """What the next request remembers of the thread: the newest summary, then the turns after
    it, oldest first."""

    summary: Summary | None
    turns: list[Turn]

    @property
    def tokens(self) -> int:
        held = tokens(self.summary.message) if self.summary is not None else 0
        return held + sum(t.tokens for t in self.turns)


def newest_summary(history: list[ThreadRecord], transcript: str) -> Summary | None:
    """The thread's newest summary of ``transcript`` turns, if any."""
    for record in reversed(history):
        body = record.body
        if record.kind == SUMMARY and isinstance(body, dict) and body.get("of") == transcript:
            known = {"of", "first", "last", "turns", "text"}
            return Summary(
                first=int(body["first"]),
                last=int(body["last"]),
                turns=int(body["turns"]),
                text=str(body["text"]),
                extra={k: v for k, v in body.items() if k not in known},
            )
    return None


def memory_kinds(transcript: str) -> frozenset[str]:
    """The record kinds an adapter whose turns are ``transcript`` records reads from the
    thread's history (`Binding.history_kinds`): those, the settlements that say which turns
    completed, and summaries (the claim then loads the newest summary and what follows it)."""
    return frozenset({"settlement", SUMMARY, transcript})


def completed_turns(history: list[ThreadRecord], kind: str) -> Iterator[ThreadRecord]:
    """The ``kind`` records of earlier submissions that settled ``completed``, oldest first:
    the exchanges that count as the conversation (a failed or aborted turn does not)."""
    completed = {
        r.submission_id
        for r in history
        if r.kind == "settlement"
        and isinstance(r.body, dict)
        and r.body.get("outcome") == "completed"
    }
    for record in history:
        if record.kind == kind and record.submission_id in completed:
            yield record


def recall(history: list[ThreadRecord], transcript: str, render: Callable[[Any], str]) -> Recall:
    """The thread's memory from ``ctx.history``: its newest summary and the completed turns
    whose ``transcript`` records come after the last one it covers."""
    summary = newest_summary(history, transcript)
    after = summary.last if summary is not None else -1
    turns = [
        Turn(sequence=r.sequence, body=r.body, render=render)
        for r in completed_turns(history, transcript)
        if r.sequence > after
    ]
    return Recall(summary, turns)


Ask = Callable[[str, str], Awaitable[str]]
"""One journaled summary request: (instructions, the conversation as text) to the summary's
text; raises `TooLong` when the model refused it for its length."""
Extra = Callable[[Summary | None, list[Turn]], dict[str, Any]]
"""What an adapter keeps beside a new summary's text, from the previous summary and the turns
the new one folds in."""


def conversation(summary: Summary | None, turns: list[Turn]) -> str:
    """A summary request's text: the earlier summary, then the turns to fold in."""
    parts = [f"Earlier summary:\n{summary.text}"] if summary is not None else []
    parts += [t.text for t in turns]
    return "\n\n".join(parts)


def _fitting(summary: Summary | None, pending: list[Turn], limit: int) -> Iterator[Turn]:
    """The oldest of ``pending`` whose summary request stays within ``limit`` tokens (one at
    least: a single turn is summarized on its own or not at all)."""
    size = tokens(SUMMARY_INSTRUCTIONS) + (tokens(summary.text) if summary is not None else 0)
    for n, turn in enumerate(pending):
        size += turn.tokens
        if n and size > limit:
            return
        yield turn


@dataclass
class Compactor:
    """Folds a thread's oldest turns into summaries for one attempt of an adapter."""

    ctx: AttemptContext
    memory: Memory
    transcript: str
    ask: Ask
    extra: Extra | None = None

    def over_budget(self, held: Recall, prompt: str) -> bool:
        """Whether the next request, carrying ``held`` and ``prompt``, passes the budget."""
        budget = self.memory.budget_tokens
        return budget is not None and held.tokens + tokens(prompt) > budget

    def can_compact(self, held: Recall) -> bool:
        return len(held.turns) > self.memory.keep_turns

    async def compact(self, held: Recall, *, limit: int | None = None) -> Recall:
        """``held`` with every turn but the newest ``keep_turns`` folded into the summary.

        Each summary request stays within ``limit`` tokens (default: the budget; neither: no
        limit); one the model refuses for its length is tried again with half as much, until a
        single turn does not fit (`TooLong`)."""
        keep = self.memory.keep_turns
        pending = held.turns[: max(0, len(held.turns) - keep)]
        summary = held.summary
        limit = limit if limit is not None else self.memory.budget_tokens
        while pending:
            folded = list(_fitting(summary, pending, limit)) if limit else list(pending)
            text = conversation(summary, folded)
            try:
                written = await self.ask(SUMMARY_INSTRUCTIONS, text)
            except TooLong as refused_request:
                if len(folded) == 1:
                    raise
                limit = max(1, refused_request.size // 2)
                continue
            summary = Summary(
                first=summary.first if summary is not None else folded[0].sequence,
                last=folded[-1].sequence,
                turns=(summary.turns if summary is not None else 0) + len(folded),
                text=written,
                extra=self.extra(summary, folded) if self.extra is not None else {},
            )
            await self.ctx.append(SUMMARY, summary.body(self.transcript))
            pending = pending[len(folded) :]
        return Recall(summary, held.turns[max(0, len(held.turns) - keep) :])


@dataclass
class HeldMemory:
    """One attempt's memory of the thread: what its run was given for the turns before it
    (``given``, as ``build`` makes the framework's messages from a `Recall`) and what its
    requests carry in its place once an overflow compacted it (``carried``)."""

    compactor: Compactor
    held: Recall
    build: Callable[[Recall], list[Any]]
    given: list[Any]
    carried: list[Any]

    def rewrite(self, messages: list[Any]) -> list[Any]:
        """A request's messages with the history the run was given replaced by what is
        carried (the run keeps its history at the head of every request)."""
        if self.carried is self.given:
            return messages
        return [*self.carried, *messages[len(self.given) :]]

    async def overflowed(self, model: str, size: int, message: str) -> None:
        """Compact after the model refused a request of ``size`` tokens for its length: every
        turn but the kept ones into the summary, each summary request within half that size."""
        if not self.compactor.can_compact(self.held):
            raise TooLong(model, f"{message} (no earlier turn left to summarize)", size)
        self.held = await self.compactor.compact(self.held, limit=max(1, size // 2))
        self.carried = self.build(self.held)


async def within_context(
    model: str, memory: HeldMemory | None, step: Callable[[], Awaitable[Any]]
) -> Any:
    """A model step's recorded answer (``step`` takes it, the request built from ``memory``'s
    messages as they are then). When the model refused the request for its length: with the
    run's ``memory``, the thread is compacted and the step taken again, once, carrying the
    summary instead of the turns it folds in; else, or refused again, `TooLong`."""
    recorded = await step()
    if not refused(recorded):
        return recorded
    if memory is None:
        raise TooLong(model, recorded["message"], recorded["tokens"])
    await memory.overflowed(model, recorded["tokens"], recorded["message"])
    recorded = await step()
    if refused(recorded):
        message = f"{recorded['message']} (still too long after summarizing)"
        raise TooLong(model, message, recorded["tokens"])
    return recorded


async def remember(
    compactor: Compactor,
    history: list[ThreadRecord],
    prompt: str,
    *,
    render: Callable[[Any], str],
    build: Callable[[Recall], list[Any]],
) -> HeldMemory:
    """A turn's memory of the thread (its records as ``render`` reads them), compacted first
    when the request with ``prompt`` would pass the budget."""
    held = recall(history, compactor.transcript, render)
    if compactor.over_budget(held, prompt) and compactor.can_compact(held):
        held = await compactor.compact(held)
    given = build(held)
    return HeldMemory(compactor, held, build, given, given)


def dumps(value: Any) -> str:
    """Compact JSON of a tool's arguments or result, for a summary request's text."""
    return value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
