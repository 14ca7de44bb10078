"""A record in a few words: what ``threadwarden watch`` prints for each record (``--verbose``
prints the whole body). A model's reply is shown as its text, whichever framework journaled
it (pydantic-ai, the OpenAI Agents SDK, LangGraph: see `threadwarden.agents`)."""

from __future__ import annotations

import json
from typing import Any

MODEL_TOOL = "model-request"
"""The tool name agent adapters journal a model request under
(`threadwarden.agents._core.steps`)."""
WIDTH = 200
"""The longest summary printed on one line (a longer one ends with an ellipsis)."""


def summary(kind: str, body: Any) -> str:
    """One line saying what the record holds."""
    fields = body if isinstance(body, dict) else {}
    if kind == "message" and isinstance(fields.get("text"), str):
        return _line(fields["text"])
    if kind == "tool-call" and isinstance(fields.get("tool"), str):
        if fields["tool"] == MODEL_TOOL:
            return _line(f"asks the model {_compact(fields.get('args', {}).get('model', ''))}")
        return _line(f"calls {fields['tool']} {_compact(fields.get('args', {}))}")
    if kind == "tool-result" and isinstance(fields.get("tool"), str):
        if fields["tool"] == MODEL_TOOL:
            return _line(reply_text(fields.get("result")))
        return _line(f"{fields['tool']} returned {_compact(fields.get('result'))}")
    if kind == "settlement" and isinstance(fields.get("outcome"), str):
        detail = fields.get("reason") if fields.get("result") is None else fields["result"]
        text = detail if isinstance(detail, str) else _compact(detail)
        return _line(f"{fields['outcome']}: {text}" if detail is not None else fields["outcome"])
    return _line(_compact(body))


def reply_text(result: Any) -> str:
    """The text of a journaled model response, or what it asked for instead (tool calls)."""
    texts: list[str] = []
    calls: list[str] = []
    if isinstance(result, dict):
        response = result.get("response")
        if isinstance(response, dict) and isinstance(response.get("parts"), list):
            _pydantic_ai(response["parts"], texts, calls)
        elif isinstance(response, dict) and isinstance(response.get("data"), dict):
            _langgraph(response["data"], texts, calls)
        _openai_agents(result.get("output"), texts, calls)
    if any(t.strip() for t in texts):
        return " ".join(t.strip() for t in texts if t.strip())
    if calls:
        return f"(the model calls {', '.join(calls)})"
    return _compact(result)


def _pydantic_ai(parts: list[Any], texts: list[str], calls: list[str]) -> None:
    """A pydantic-ai ``ModelResponse``'s parts: text parts and tool calls."""
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("part_kind") == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif part.get("part_kind") == "tool-call":
            calls.append(str(part.get("tool_name")))


def _langgraph(data: dict[str, Any], texts: list[str], calls: list[str]) -> None:
    """A LangChain ``AIMessage`` as ``message_to_dict`` records it: content and tool calls."""
    texts += _content_texts(data.get("content"))
    calls += [str(c.get("name")) for c in data.get("tool_calls") or [] if isinstance(c, dict)]


def _openai_agents(output: Any, texts: list[str], calls: list[str]) -> None:
    """The OpenAI Agents SDK's output items: messages and function calls."""
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts += _content_texts(item.get("content"))
        elif item.get("type") == "function_call":
            calls.append(str(item.get("name")))


def _content_texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    texts = []
    for piece in content if isinstance(content, list) else []:
        if isinstance(piece, str):
            texts.append(piece)
        elif isinstance(piece, dict) and isinstance(piece.get("text"), str):
            texts.append(piece["text"])
    return texts


def _compact(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


def _line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= WIDTH else flat[: WIDTH - 1] + "…"
