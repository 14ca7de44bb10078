"""Reading an agent binding's journal out of a thread's records."""

from __future__ import annotations

from typing import Any


def bodies(records: list[dict[str, Any]], kind: str, **match: Any) -> list[Any]:
    """The bodies of ``kind`` records whose body has every ``match`` item, in order."""
    return [
        r["body"]
        for r in records
        if r["kind"] == kind
        and isinstance(r["body"], dict)
        and all(r["body"].get(k) == v for k, v in match.items())
    ]


def model_steps(records: list[dict[str, Any]]) -> list[Any]:
    """The recorded model responses (``tool-result`` of ``model-request``), in order."""
    return [b["result"] for b in bodies(records, "tool-result", tool="model-request")]
