"""A `ToolNode`'s calls through ``ctx.tool``: each is a journal step, a side effect unless its
tool is listed as idempotent, and recorded as the content the model sees."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.graph import StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from pydantic_core import to_jsonable_python

from threadwarden.bindings import AttemptContext
from threadwarden.errors import InvalidInput

INTERRUPTED = "threadwarden:interrupted"
"""The recorded result of a tool call that raised LangGraph's ``interrupt``: it asked a
question instead of returning. The step is closed (no unknown effect); a re-run that replays
it runs the tool again, which interrupts again, as LangGraph re-runs code before an interrupt."""
FAILED = "threadwarden:tool-error"
"""Marks a recorded result that was the tool's error message (``handle_tool_errors``)."""

_UNWRAPPED = "_threadwarden_unwrapped"
"""Where a journaled `ToolNode` keeps the wrapper it had of its own (None: it had none)."""

_Execute = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
_Wrapper = Callable[[ToolCallRequest, _Execute], Awaitable[ToolMessage | Command[Any]]]


class _Run:
    """The attempt a graph runs in: its context and the lock that orders its tool calls."""

    def __init__(self, ctx: AttemptContext) -> None:
        self.ctx = ctx
        self.lock = asyncio.Lock()  # FIFO: calls a ToolNode gathers take steps in call order


_current: ContextVar[_Run | None] = ContextVar("threadwarden_langgraph_run", default=None)


def current() -> _Run | None:
    """The attempt the running graph belongs to, if it runs inside one."""
    return _current.get()


@contextmanager
def running(ctx: AttemptContext) -> Iterator[None]:
    """Make ``ctx`` the attempt whose journal the graph's tool nodes write to."""
    token = _current.set(_Run(ctx))
    try:
        yield
    finally:
        _current.reset(token)


def tool_nodes(builder: StateGraph[Any, Any, Any, Any]) -> dict[str, ToolNode]:
    """The graph's `ToolNode` nodes, by node name."""
    return {
        name: spec.runnable
        for name, spec in builder.nodes.items()
        if isinstance(spec.runnable, ToolNode)
    }


def journal_tools(node: ToolNode, idempotent: frozenset[str]) -> None:
    """Route ``node``'s calls through the current attempt's ``ctx.tool`` (around any wrapper
    the node already had); outside an attempt the node runs as it would."""
    # A node bound again (the same builder in a second binding) is wrapped around what it
    # had before threadwarden's first wrapper, not around that wrapper: one journal step a call.
    inner: _Wrapper | None = getattr(node, _UNWRAPPED, node._awrap_tool_call)
    setattr(node, _UNWRAPPED, inner)

    async def wrapped(request: ToolCallRequest, execute: _Execute) -> ToolMessage | Command[Any]:
        async def call(req: ToolCallRequest) -> ToolMessage | Command[Any]:
            return await (execute(req) if inner is None else inner(req, execute))

        run = _current.get()
        if run is None:
            return await call(request)
        return await _journaled(run, request, call, idempotent)

    node._awrap_tool_call = wrapped


async def _journaled(
    run: _Run, request: ToolCallRequest, call: _Execute, idempotent: frozenset[str]
) -> ToolMessage | Command[Any]:
    tool_call = request.tool_call
    name = tool_call["name"]
    args = to_jsonable_python(tool_call["args"], fallback=str)
    interrupted: list[GraphBubbleUp] = []

    async def execute(_: dict[str, Any]) -> Any:
        try:
            message = await call(request)
        except GraphBubbleUp as interrupt:  # closed as asked, raised once recorded
            interrupted.append(interrupt)
            return INTERRUPTED
        if not isinstance(message, ToolMessage):
            raise InvalidInput(f"tool {name}", "a tool that returns a result, not a Command")
        content = to_jsonable_python(message.content, fallback=str)
        return {FAILED: content} if message.status == "error" else content

    async with run.lock:
        result = await run.ctx.tool(name, args, execute, side_effect=name not in idempotent)
    if interrupted:
        raise interrupted[0]
    if result == INTERRUPTED:  # replayed: the tool interrupts again, before its answer
        return await call(request)
    status = "error" if isinstance(result, dict) and set(result) == {FAILED} else "success"
    content = result[FAILED] if status == "error" else result
    return ToolMessage(
        content=content if isinstance(content, (str, list)) else json.dumps(content),
        name=name,
        tool_call_id=tool_call["id"],
        status=status,
    )
