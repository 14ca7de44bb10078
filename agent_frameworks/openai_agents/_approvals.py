"""The Agents SDK's tool approvals as inbox waits: a run that stops with interruptions (a
function tool with ``needs_approval``) has each one decided by a person (`approve`, one inbox
wait each, in the run's order) and is resumed from its state with the decisions; a denial is
the message the model hears."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import RunResult, RunState

from threadwarden.agents._core.approvals import approve
from threadwarden.bindings import AttemptContext

Resume = Callable[[RunState[Any]], Awaitable[RunResult]]
"""Runs the agent again from a state whose interruptions were decided."""


async def approved(ctx: AttemptContext, result: RunResult, resume: Resume) -> RunResult:
    """``result``, or once its interruptions are decided, the result of the resumed run (until
    a run ends without interruptions)."""
    while result.interruptions:  # tools that need approval: one inbox wait each
        state = result.to_state()
        for item in result.interruptions:
            name = item.name or "tool"
            denied = await approve(ctx, name, json.loads(item.arguments or "{}"))
            if denied is None:
                state.approve(item)
            else:
                state.reject(item, rejection_message=denied)
        result = await resume(state)
    return result
