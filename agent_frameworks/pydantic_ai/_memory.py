"""The thread as pydantic-ai's message history.

Each completed turn appends one ``pydantic-ai-messages`` record just before it settles: the
run's new messages (the user prompt, every model response, tool call and tool return) as
pydantic-ai's own JSON. A later turn's ``message_history`` is those records of the thread's
earlier submissions that settled ``completed``, oldest first (within the newest 1,000 records of
those kinds that ``ctx.history`` holds: `MEMORY_KINDS`). Timestamps are left out: a re-run
rebuilds the same record.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ModelMessagesTypeAdapter
from pydantic_ai.messages import ModelMessage

from threadwarden.agents._common import memory_kinds, transcripts
from threadwarden.bindings import ThreadRecord

TRANSCRIPT = "pydantic-ai-messages"
"""The record kind holding one completed turn's messages."""

MEMORY_KINDS = memory_kinds(TRANSCRIPT)
"""The record kinds the binding reads from the thread's history."""

_VOLATILE = frozenset({"timestamp"})
"""Keys a re-run of the same turn would fill differently."""


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def transcript(messages: list[ModelMessage]) -> dict[str, Any]:
    """The record body for one turn's new messages."""
    return {"messages": _stable(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))}


def message_history(history: list[ThreadRecord]) -> list[ModelMessage]:
    """The earlier completed turns' messages, in order."""
    messages: list[ModelMessage] = []
    for body in transcripts(history, TRANSCRIPT):
        if isinstance(body, dict) and isinstance(body.get("messages"), list):
            messages.extend(ModelMessagesTypeAdapter.validate_python(body["messages"]))
    return messages
