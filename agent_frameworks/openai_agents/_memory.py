"""The thread as the Agents SDK's input items.

Each completed turn appends one ``openai-agents-items`` record just before it settles: the
turn's items in the Responses input format (`RunResult.to_input_list`, without the earlier
turns it was given): the user message, model messages, tool calls and their outputs. A later
turn's input is the thread's newest summary, if any (a system message), then those records of
the turns after it that settled ``completed``, oldest first
(`threadwarden.agents._core.compaction`), then its prompt.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.items import TResponseInputItem
from pydantic_core import to_jsonable_python

from threadwarden.agents._core.compaction import Recall, dumps, memory_kinds

TRANSCRIPT = "openai-agents-items"
"""The record kind holding one completed turn's items."""

MEMORY_KINDS = memory_kinds(TRANSCRIPT)
"""The record kinds the binding reads from the thread's history."""


def _items(body: Any) -> list[Any]:
    items = body.get("items") if isinstance(body, dict) else None
    return items if isinstance(items, list) else []


def _content(content: Any) -> str:
    if isinstance(content, list):  # content parts: input_text, output_text, refusal …
        return "".join(
            str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict)
        )
    return dumps(content)


def _line(item: dict[str, Any]) -> str | None:
    kind = item.get("type")
    if kind == "function_call":
        return f"assistant called {item.get('name')}({item.get('arguments')})"
    if kind == "function_call_output":
        return f"tool returned: {_content(item.get('output'))}"
    role = item.get("role")
    if role in ("user", "assistant"):
        return f"{role}: {_content(item.get('content'))}"
    return None  # reasoning, system messages: not the conversation


def render_items(items: Iterable[Any]) -> str:
    """Input items as the lines a summary request reads."""
    lines = (_line(i) for i in items if isinstance(i, dict))
    return "\n".join(line for line in lines if line is not None)


def render(body: Any) -> str:
    """One turn's record as text."""
    return render_items(_items(body))


def earlier_items(held: Recall) -> list[TResponseInputItem]:
    """The items a turn's requests carry for the thread before it: the summary as a system
    message, then the kept turns' items."""
    items: list[TResponseInputItem] = []
    if held.summary is not None:
        items.append({"role": "system", "content": held.summary.message})
    for turn in held.turns:
        items.extend(_items(turn.body))
    return items


def transcript(items: list[TResponseInputItem], earlier: int) -> dict[str, Any]:
    """The record body for one turn: its items after the ``earlier`` ones it was given."""
    return {"items": to_jsonable_python(items[earlier:], fallback=str)}
