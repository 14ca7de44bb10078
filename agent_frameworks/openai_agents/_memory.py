"""The thread as the Agents SDK's input items.

Each completed turn appends one ``openai-agents-items`` record just before it settles: the
turn's items in the Responses input format (`RunResult.to_input_list`, without the earlier
turns it was given): the user message, model messages, tool calls and their outputs. A later
turn's input is those records of the thread's earlier submissions that settled ``completed``,
oldest first (within the newest 1,000 records of those kinds
that ``ctx.history`` holds: `MEMORY_KINDS`), then its prompt.
"""

from __future__ import annotations

from typing import Any

from agents.items import TResponseInputItem
from pydantic_core import to_jsonable_python

from threadwarden.agents._common import memory_kinds, transcripts
from threadwarden.bindings import ThreadRecord

TRANSCRIPT = "openai-agents-items"
"""The record kind holding one completed turn's items."""

MEMORY_KINDS = memory_kinds(TRANSCRIPT)
"""The record kinds the binding reads from the thread's history."""


def earlier_items(history: list[ThreadRecord]) -> list[TResponseInputItem]:
    """The earlier completed turns' items, in order."""
    items: list[TResponseInputItem] = []
    for body in transcripts(history, TRANSCRIPT):
        if isinstance(body, dict) and isinstance(body.get("items"), list):
            items.extend(body["items"])
    return items


def transcript(items: list[TResponseInputItem], earlier: int) -> dict[str, Any]:
    """The record body for one turn: its items after the ``earlier`` ones it was given."""
    return {"items": to_jsonable_python(items[earlier:], fallback=str)}
