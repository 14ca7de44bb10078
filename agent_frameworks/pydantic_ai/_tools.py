"""The pydantic-ai toolsets wrapped so that each tool call is one journal step of the attempt
(`AttemptContext.tool`): recorded, replayed on a re-run, and (unless idempotent) a side effect
that becomes ``unknown`` when interrupted mid-call. What a tool raises instead of returning (it
needs approval, its call is deferred to a person, it asks the model to retry) is recorded as a
marked result and raised again on replay."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ApprovalRequired, CallDeferred, ModelRetry, RunContext, WrapperToolset
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import to_jsonable_python

from threadwarden.agents.pydantic_ai._delegation import DELEGATION
from threadwarden.bindings import AttemptContext

APPROVAL_REQUIRED = "threadwarden:approval-required"
"""Marks a recorded tool result that was a request for approval, not a value."""
RETRY = "threadwarden:retry"
"""Marks a recorded tool result that asked the model to try again (its message)."""
CALL_DEFERRED = "threadwarden:call-deferred"
"""The recorded result of a tool call that deferred itself (pydantic-ai `CallDeferred`): its
metadata and kind; the binding asks a person (``ctx.ask``) for the call's result."""


@dataclass
class JournaledToolset(WrapperToolset[Any]):
    """A toolset whose calls run through ``ctx.tool``: recorded, replayed on a re-run, and
    (unless idempotent) a side effect that becomes ``unknown`` when interrupted mid-call."""

    ctx: AttemptContext | None = None
    idempotent: Collection[str] = field(default_factory=frozenset)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        assert self.ctx is not None
        if DELEGATION in (tool.tool_def.metadata or {}):  # a journal step of its own
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        async def run(_: dict[str, Any]) -> Any:
            try:
                value = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            except ApprovalRequired as asked:  # nothing ran: the tool wants a person first
                return {APPROVAL_REQUIRED: to_jsonable_python(asked.metadata, fallback=str)}
            except CallDeferred as deferred:  # its result comes from a person (ctx.ask)
                metadata = to_jsonable_python(deferred.metadata, fallback=str)
                return {CALL_DEFERRED: {"metadata": metadata, "kind": deferred.kind}}
            except ModelRetry as retry:
                return {RETRY: retry.message}
            return to_jsonable_python(value, fallback=str)

        args = to_jsonable_python(tool_args, fallback=str)
        result = await self.ctx.tool(name, args, run, side_effect=name not in self.idempotent)
        if isinstance(result, dict) and APPROVAL_REQUIRED in result:
            raise ApprovalRequired(result[APPROVAL_REQUIRED])
        if isinstance(result, dict) and isinstance(result.get(CALL_DEFERRED), dict):
            deferred = result[CALL_DEFERRED]
            raise CallDeferred(deferred.get("metadata"), kind=deferred.get("kind", "external"))
        if isinstance(result, dict) and RETRY in result:
            raise ModelRetry(str(result[RETRY]))
        return result


def journaled(
    toolset: AbstractToolset[Any], ctx: AttemptContext, idempotent: Collection[str]
) -> JournaledToolset:
    """Wrap one of the agent's toolsets for this attempt."""
    return JournaledToolset(wrapped=toolset, ctx=ctx, idempotent=idempotent)
