"""What every framework adapter shares: the user turn, digests, approvals,
the model steps' tokens spent from a delegation's budget, the errors every adapter judges
alike, and the unwrapping of the runtime's stops from exception groups."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace

from threadwarden.agents._compaction import TooLong
from threadwarden.bindings import AttemptContext, Failed
from threadwarden.errors import BudgetExceeded, InvalidInput

MODEL_TOOL = "model-request"
"""The ``ctx.tool`` name under which each model request is journaled (``tool-call`` /
``tool-result`` records: the result holds the response and its token usage)."""

APPROVAL_REQUIRED = "threadwarden:approval-required"
"""Marks a recorded tool result that was a request for approval, not a value."""
RETRY = "threadwarden:retry"
"""Marks a recorded tool result that asked the model to try again (its message)."""
CALL_DEFERRED = "threadwarden:call-deferred"
"""The recorded result of a tool call that deferred itself (pydantic-ai `CallDeferred`): its
metadata and kind; the binding asks a person (``ctx.ask``) for the call's result."""
RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses below 500 that say "try again later", not "this request is wrong"."""


_tracer = trace.get_tracer("threadwarden.agents")
_attempt: ContextVar[AttemptContext | None] = ContextVar("threadwarden_attempt", default=None)


@contextmanager
def attempt(ctx: AttemptContext) -> Iterator[None]:
    """Make ``ctx`` the attempt that delegation tools of this run call agents from."""
    token = _attempt.set(ctx)
    try:
        yield
    finally:
        _attempt.reset(token)


def delegation_name(agent_id: str) -> str:
    """The tool name of a delegation to ``agent_id`` (``ask_`` and the id, made a valid name)."""
    return "ask_" + re.sub(r"[^A-Za-z0-9_-]", "_", agent_id)


async def delegate(agent_id: str, request: str, budget: int | None) -> Any:
    """Run ``request`` as a child submission for ``agent_id`` (`AttemptContext.call_agent`, a
    journal step of its own) and return what the calling model sees: the child's result, or
    what became of it."""
    ctx = _attempt.get()
    if ctx is None:
        raise RuntimeError(f"{delegation_name(agent_id)}: called outside a threadwarden attempt")
    outcome = await ctx.call_agent(agent_id, {"prompt": request}, budget=budget)
    if outcome.outcome == "completed":
        return outcome.result
    return f"{agent_id} {outcome.outcome}: {outcome.reason}"


def model_span(framework: str, model: str, ctx: AttemptContext) -> AbstractContextManager[Any]:
    """The span of one model request really sent (a replayed step sends none)."""
    return _tracer.start_as_current_span(
        "threadwarden.agents.model_request",
        attributes={
            "threadwarden.agents.framework": framework,
            "threadwarden.agents.model": model,
            "threadwarden.submission_id": ctx.submission_id,
            "threadwarden.thread_id": ctx.thread_id,
        },
    )


class BudgetSpent(Exception):
    """The delegation's budget cannot pay for a model step's tokens (the run fails)."""


async def spend(ctx: AttemptContext, model: str, usage: dict[str, int]) -> None:
    """Pay a model step's recorded tokens from the delegation's budget; `BudgetSpent` when it
    cannot. Without a budget nothing is paid (the usage is in the step's record)."""
    if ctx.budget_left is None:
        return
    tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    try:
        await ctx.spend(tokens, note=f"{MODEL_TOOL} {model}")
    except BudgetExceeded as error:
        raise BudgetSpent(str(error)) from error


def user_prompt(value: Any) -> str:
    """The submission's input as the new user turn: a JSON string or ``{"prompt": string}``."""
    if isinstance(value, str) and value:
        return value
    prompt = value.get("prompt") if isinstance(value, dict) and set(value) == {"prompt"} else None
    if isinstance(prompt, str) and prompt:
        return prompt
    raise InvalidInput("input", 'a non-empty JSON string or {"prompt": "..."}', value)


def digest(framework: str, definition: dict[str, Any]) -> str:
    """A short, stable hash of what defines an agent (model, instructions, tools, output)."""
    text = json.dumps({"framework": framework, **definition}, sort_keys=True, default=repr)
    return f"{framework}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def approval_reason(tool: str, args: Any) -> str:
    """The inbox line for a tool call that needs a person: the tool and its arguments."""
    shown = json.dumps(args, sort_keys=True, default=str)
    if len(shown) > 400:
        shown = shown[:397] + "..."
    return f"tool {tool} wants to run with {shown}"


def denial_message(tool: str, reason: str | None) -> str:
    """What the model is told when an operator denied a tool call."""
    return f"The operator denied the call to {tool}" + (f": {reason}" if reason else ".")


async def approve(ctx: AttemptContext, tool: str, args: Any) -> str | None:
    """Ask a person (an inbox wait); None when approved, else the denial the model hears."""
    decision = await ctx.request_approval(approval_reason(tool, args), on_deny="resume")
    return None if decision.approved else denial_message(tool, decision.reason)


def transient_status(status: int) -> bool:
    """Whether an endpoint's HTTP status says "try again later" (a 5xx or `RETRYABLE_STATUS`)."""
    return status in RETRYABLE_STATUS or status >= 500


def short(text: object, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, for a reason."""
    shown = str(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def run_failure(
    error: Exception, *, usage_limit: type[Exception], bad_output: type[Exception]
) -> Failed | None:
    """`Failed` for what every model adapter judges alike: the framework's ``usage_limit``
    error, its error for an output the model got wrong (``bad_output``), a spent budget
    (`BudgetSpent`), a request too long for the model even after summarizing (`TooLong`);
    else None."""
    if isinstance(error, usage_limit):
        return Failed(f"usage limit: {error}")
    if isinstance(error, bad_output):
        return Failed(f"model output: {short(error)}")
    if isinstance(error, BudgetSpent):
        return Failed(f"budget: {error}")
    if isinstance(error, TooLong):
        return Failed(f"context: {error}")
    return None


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def judged(raised: BaseException, verdict: Callable[[Exception], Failed | None]) -> Failed:
    """The turn's `Failed` for an error its run raised, or raise what decides otherwise.

    The runtime ends an attempt (an approval wait, an unknown side effect, a yield) with a
    `BaseException` that a framework running tools in a task group may wrap in a group: it is
    raised bare, for the runtime to see. Of any other group, its first error is judged.
    ``verdict`` sorts the framework's errors (`Failed`, or raises `Retryable`); what it does
    not know is raised again (the runtime settles it as the binding's own error).
    """
    leaves = list(_leaves(raised))
    for leaf in leaves:
        if not isinstance(leaf, Exception):
            raise leaf
    error = leaves[0] if leaves else raised
    assert isinstance(error, Exception)
    failed = verdict(error)
    if failed is None:
        raise error
    return failed
