"""A graph's questions to people: LangGraph asks with ``interrupt()`` inside a node, and each
pending interrupt is a question in the inbox (``ctx.ask``, one journal step each, in order); the
answers resume the graph (``Command(resume=...)``).

LangGraph has no approval flag on a tool of its own (nothing like pydantic-ai's
``requires_approval`` or the Agents SDK's ``needs_approval``), so this adapter makes no
``request_approval`` inbox wait: a graph that wants a tool call approved asks with ``interrupt()``
in the tool or a node before it, and the answer is the decision.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from pydantic_core import to_jsonable_python

from threadwarden.bindings import AttemptContext


async def answers(
    ctx: AttemptContext, graph: CompiledStateGraph[Any, Any, Any, Any], config: RunnableConfig
) -> Command[Any] | None:
    """The resume of an interrupted graph: each pending ``interrupt`` is a question
    (``ctx.ask``, one journal step each, in order; its ``response_schema`` the answer's JSON
    Schema); None when nothing is pending."""
    state = await graph.aget_state(config)
    if not state.interrupts:
        return None
    given = {}
    for pending in state.interrupts:
        schema = getattr(pending, "response_schema", None)
        given[pending.id] = await ctx.ask(
            to_jsonable_python(pending.value, fallback=repr),
            schema=schema if isinstance(schema, dict) else None,
        )
    return Command(resume=given)
