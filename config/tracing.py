"""Temporal's OpenTelemetry interceptor with threadwarden's ids on its spans: every Temporal client
threadwarden connects carries it (the application's client, the worker's, through
`threadwarden.config.connect` or `ThreadwardenPlugin`). Exporting the spans is the worker's
(`threadwarden.worker.telemetry`): without an exporter they cost next to nothing.

Spans carry ids and counts only (``threadwarden.host_id``, ``thread_id``, ``submission_id``,
``agent_id``): no payload reaches a span.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.util.types import Attributes
from temporalio.contrib.opentelemetry import TracingInterceptor

HOST_WORKFLOW_PREFIX = "threadwarden-host/"


def _with_ids(attributes: Attributes) -> Attributes:
    """``attributes`` plus ``threadwarden.host_id`` when they name a host workflow."""
    workflow_id = (attributes or {}).get("temporalWorkflowID")
    if not isinstance(workflow_id, str) or not workflow_id.startswith(HOST_WORKFLOW_PREFIX):
        return attributes
    host_id = workflow_id.removeprefix(HOST_WORKFLOW_PREFIX)
    return {**(attributes or {}), "threadwarden.host_id": host_id}


class ThreadwardenTracingInterceptor(TracingInterceptor):
    """Temporal's tracing interceptor whose client, workflow and activity spans of a host
    workflow also carry ``threadwarden.host_id`` (the activities add the thread, submission
    and agent ids themselves, `threadwarden.worker.metrics`).

    It extends two private hooks of the SDK's interceptor (every span it starts goes through
    them): the public API has no way to add attributes to its spans. The SDK's
    ``OpenTelemetryPlugin`` was tried instead and does not serve (docs/operations.md, Traces).
    """

    @contextmanager
    def _start_as_current_span(
        self, name: str, *, attributes: Attributes, **kwargs: Any
    ) -> Iterator[None]:
        with super()._start_as_current_span(name, attributes=_with_ids(attributes), **kwargs):
            yield

    def _completed_workflow_span(self, params: Any) -> Any:
        tagged = dataclasses.replace(params, attributes=_with_ids(params.attributes))
        return super()._completed_workflow_span(tagged)


def interceptors() -> list[TracingInterceptor]:
    """Client interceptors: workflow, activity and signal spans for every threadwarden call."""
    return [ThreadwardenTracingInterceptor()]
