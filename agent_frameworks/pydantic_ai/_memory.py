"""The thread as pydantic-ai's message history.

Each completed turn appends one ``pydantic-ai-messages`` record just before it settles: the
run's new messages (the user prompt, every model response, tool call and tool return) as
pydantic-ai's own JSON. A later turn's ``message_history`` is the thread's newest summary, if
any, then those records of the turns after it that settled ``completed``, oldest first
(`threadwarden.agents._core.compaction`). Timestamps are left out: a re-run rebuilds the same
record.

A summary travels as system prompt parts at the head of the history: the standing system
prompts of the thread's first turn (pydantic-ai sends an agent's ``system_prompt`` only on a
thread's first request, which the summary replaced), then the summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic_ai import ModelMessagesTypeAdapter
from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart

from threadwarden.agents._core.compaction import Recall, Summary, Turn, dumps, memory_kinds

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


def _messages(body: Any) -> list[Any]:
    messages = body.get("messages") if isinstance(body, dict) else None
    return messages if isinstance(messages, list) else []


def _parts(messages: Iterable[Any]) -> Iterable[dict[str, Any]]:
    for message in messages:
        for part in message.get("parts", []) if isinstance(message, dict) else []:
            if isinstance(part, dict):
                yield part


def _line(part: dict[str, Any]) -> str | None:
    kind = part.get("part_kind")
    if kind == "user-prompt":
        return f"user: {dumps(part.get('content'))}"
    if kind == "text":
        return f"assistant: {part.get('content')}"
    if kind == "tool-call":
        return f"assistant called {part.get('tool_name')}({dumps(part.get('args'))})"
    if kind == "tool-return":
        return f"{part.get('tool_name')} returned: {dumps(part.get('content'))}"
    return None  # system prompts stand apart; thinking and retries are not the conversation


def render_messages(messages: Iterable[Any]) -> str:
    """Messages (pydantic-ai's JSON) as the lines a summary request reads."""
    return "\n".join(line for part in _parts(messages) if (line := _line(part)) is not None)


def render(body: Any) -> str:
    """One turn's record as text."""
    return render_messages(_messages(body))


def standing(previous: Summary | None, folded: list[Turn]) -> dict[str, Any]:
    """The system prompts a summary carries: the previous summary's, or those the thread's
    first turn opened with."""
    if previous is not None:
        return {k: v for k, v in previous.extra.items() if k == "system"}
    prompts = [
        str(part.get("content"))
        for part in _parts(_messages(folded[0].body)[:1])
        if part.get("part_kind") == "system-prompt"
    ]
    return {"system": prompts} if prompts else {}


def message_history(held: Recall) -> list[ModelMessage]:
    """The messages a turn's requests carry for the thread before it: the summary's system
    prompt parts joined to the first kept turn's first request (pydantic-ai would merge two
    requests in a row), then the kept turns' messages."""
    messages: list[ModelMessage] = []
    for turn in held.turns:
        messages.extend(ModelMessagesTypeAdapter.validate_python(_messages(turn.body)))
    if held.summary is None:
        return messages
    parts = [SystemPromptPart(p) for p in held.summary.extra.get("system", [])]
    parts.append(SystemPromptPart(held.summary.message))
    if messages and isinstance(messages[0], ModelRequest):
        first = messages[0]
        messages[0] = ModelRequest(parts=[*parts, *first.parts], instructions=first.instructions)
        return messages
    return [ModelRequest(parts=parts), *messages]
