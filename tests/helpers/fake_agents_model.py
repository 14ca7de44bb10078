"""The Agents SDK fake for unit tests: threadwarden's `FunctionModel` (a function of the input
items answers each request, and every request's input is kept), and the SDK's item builders."""

from __future__ import annotations

from typing import Any

from agents.testing import assistant_message, function_call

from threadwarden.agents.openai_agents.testing import FunctionModel

FakeModel = FunctionModel

__all__ = ["FakeModel", "assistant_message", "function_call", "last_tool_output"]


def last_tool_output(items: list[dict[str, Any]]) -> str | None:
    """The output of the last item when it is a tool call's output."""
    last = items[-1] if items else {}
    return str(last["output"]) if last.get("type") == "function_call_output" else None
