"""The span every adapter opens around a model request it really sends (a replayed step sends
none): ``threadwarden.agents.model_request`` with the framework, the model and the turn."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace

from threadwarden.bindings import AttemptContext

_tracer = trace.get_tracer("threadwarden.agents")


def model_span(framework: str, model: str, ctx: AttemptContext) -> AbstractContextManager[Any]:
    """The span of one model request really sent (a replayed step sends none)."""
    return _tracer.start_as_current_span(
        "threadwarden.agents.model_request",
        attributes={
            "threadwarden.agents.framework": framework,
            "threadwarden.agents.model": model,
            "threadwarden.submission_id": ctx.submission_id,
            "threadwarden.thread_id": ctx.thread_id,
        },
    )
