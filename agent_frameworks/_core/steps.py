"""What every adapter's turn takes and journals alike: the user turn from the submission's
input, and the tool name each model request is journaled under."""

from __future__ import annotations

from typing import Any

from threadwarden.errors import InvalidInput

MODEL_TOOL = "model-request"
"""The ``ctx.tool`` name under which each model request is journaled (``tool-call`` /
``tool-result`` records: the result holds the response and its token usage)."""


def user_prompt(value: Any) -> str:
    """The submission's input as the new user turn: a JSON string or ``{"prompt": string}``."""
    if isinstance(value, str) and value:
        return value
    prompt = value.get("prompt") if isinstance(value, dict) and set(value) == {"prompt"} else None
    if isinstance(prompt, str) and prompt:
        return prompt
    raise InvalidInput("input", 'a non-empty JSON string or {"prompt": "..."}', value)
