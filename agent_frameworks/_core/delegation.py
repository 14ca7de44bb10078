"""Delegation to another threadwarden agent, for every adapter's delegation tool: the attempt
the run's tools call agents from, the tool's name, and the child submission
(`AttemptContext.call_agent`, a journal step of its own)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from threadwarden.bindings import AttemptContext

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
