"""A tool call that needs a person, as every adapter asks for it: one inbox wait
(`AttemptContext.request_approval`, ``on_deny="resume"``) whose denial the model hears."""

from __future__ import annotations

import json
from typing import Any

from threadwarden.bindings import AttemptContext


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
