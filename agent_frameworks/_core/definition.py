"""The digest of what defines an agent: each adapter's ``_definition.read_definition`` reads
the framework's definition (model, instructions, tools, output; a graph's nodes and edges), and
`digest` hashes it with the framework's name and the memory settings that change its requests
(`memory_definition`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from threadwarden.bindings import Memory


def digest(framework: str, definition: dict[str, Any]) -> str:
    """A short, stable hash of what defines an agent (model, instructions, tools, output)."""
    text = json.dumps({"framework": framework, **definition}, sort_keys=True, default=repr)
    return f"{framework}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def memory_definition(memory: Memory) -> dict[str, Any]:
    """What of ``memory`` defines the agent (its digest): a budget, ``keep_turns`` and a
    summarizer change which requests a turn makes; the default adds nothing."""
    if memory == Memory():
        return {}
    summarizer = memory.summarizer
    name = summarizer if summarizer is None or isinstance(summarizer, str) else repr(summarizer)
    shown = getattr(summarizer, "model_name", None) or getattr(summarizer, "model", None) or name
    return {
        "memory": {
            "budget_tokens": memory.budget_tokens,
            "keep_turns": memory.keep_turns,
            "summarizer": None if summarizer is None else str(shown),
        }
    }
