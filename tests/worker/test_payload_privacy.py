"""Payload bodies (inputs, record bodies, tool args and results, binding results, operator
notes) stay in Postgres: never in log lines, span attributes, search attributes, memo or the
host workflows' Temporal histories."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.helpers.checks import settled
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.config.settings import Settings
from threadwarden.workflows import contracts

MARKER = "PAYLOAD-MARKER-7f3e91"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span finished during the test, from the process's SDK tracer provider."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # the processor stays registered; a shut exporter drops what it gets


def _span_text(exporter: InMemorySpanExporter) -> str:
    return "\n".join(
        f"{span.name} {dict(span.attributes or {})} {[e.attributes for e in span.events]}"
        for span in exporter.get_finished_spans()
    )


async def test_payloads_never_reach_logs_spans_or_workflow_histories(
    worker: None,
    client: ThreadwardenClient,
    settings: Settings,
    connections: Connections,
    caplog: pytest.LogCaptureFixture,
    spans: InMemorySpanExporter,
    ids: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    to = f"{ids}-to"
    script: list[dict[str, Any]] = [
        {"say": MARKER},
        {"tool": "lookup", "args": {"q": MARKER}},
        {"send": {"thread": to, "input": [{"say": MARKER}]}},
        {"approval": MARKER},
    ]
    first = await client.submit(ids, agent_id="scripted", input=script)
    await client.submit(ids, agent_id="scripted", input=[{"fail": MARKER}])
    await eventually(
        lambda: client.thread_status(ids),
        lambda s: s.submissions[0].state == "suspended",
        timeout_s=60,
        what="the approval requested",
    )
    await client.approve(first.submission_id)
    status = await settled(client, ids, 2)
    assert [s.outcome for s in status.submissions] == ["completed", "failed"]
    await settled(client, to, 1)
    assert any(MARKER in str(r["body"]) for r in await client.records(ids))  # it is there

    assert spans.get_finished_spans()  # the exporter saw the activities and workflows
    assert MARKER not in _span_text(spans)
    assert MARKER not in caplog.text
    temporal = await connect_temporal(connections.temporal_address, settings.temporal_namespace)
    for host in (ids, to):
        workflow_id = contracts.host_workflow_id(host)
        runs = [r async for r in temporal.list_workflows(f"WorkflowId = '{workflow_id}'")]
        assert runs
        for run in runs:
            assert MARKER not in str(run.search_attributes) + str(await run.memo())
            handle = temporal.get_workflow_handle(workflow_id, run_id=run.run_id)
            history = await handle.fetch_history()
            assert MARKER not in history.to_json()
