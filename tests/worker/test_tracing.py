"""OTLP export of traces, configured by the standard ``OTEL_*`` variables, against an in-process
OTLP/HTTP collector stub: client → workflow → activity → SQL spans with threadwarden's ids, and
no payload."""

from __future__ import annotations

import gzip
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.helpers.polling import eventually
from tests.helpers.workers import QUEUED, with_queued_scripted
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.otel import OtelEnvironment, otel_environment
from threadwarden.config.settings import Settings
from threadwarden.worker.runtime import running_worker
from threadwarden.worker.telemetry import configure_tracing


class Collector:
    """An OTLP/HTTP receiver: POST /v1/traces with a protobuf ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                collector.requests.append(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Span]:
        return [
            span
            for request in list(self.requests)
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def text(self) -> str:
        """Everything the collector received, as text (resources, attributes, events)."""
        return "\n".join(str(request) for request in list(self.requests))


@pytest.fixture
def collector() -> Iterator[Collector]:
    """A running collector stub."""
    stub = Collector()
    thread = threading.Thread(target=stub.server.serve_forever, daemon=True)
    thread.start()
    yield stub
    stub.server.shutdown()
    stub.server.server_close()


def attributes(span: Span) -> dict[str, Any]:
    return {a.key: getattr(a.value, a.value.WhichOneof("value") or "") for a in span.attributes}


def ancestors(span: Span, by_id: dict[bytes, Span]) -> list[Span]:
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


def test_otel_environment_reads_the_standard_variables() -> None:
    assert otel_environment({}) == OtelEnvironment((), "http/protobuf", None)
    endpoint_only = otel_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert endpoint_only.traces_exporter == ("otlp",)
    assert otel_environment({"OTEL_TRACES_EXPORTER": "none"}).traces_exporter == ()
    both = otel_environment(
        {"OTEL_TRACES_EXPORTER": "otlp, console", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}
    )
    assert both == OtelEnvironment(("otlp", "console"), "grpc", None)


async def test_otlp_export_carries_threadwarden_ids_from_client_to_sql_and_no_payload(
    settings: Settings,
    connections: Connections,
    collector: Collector,
    ids: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "threadwarden-trace-test")
    processors = configure_tracing(settings)
    assert processors, "an OTLP exporter to this collector is new to the process"
    marker = f"payload-{uuid.uuid4().hex}"
    thread = f"{ids}-traced"
    try:
        async with (  # a dispatched head (an inline one runs inside begin_pass)
            running_worker(settings, connections, with_queued_scripted()),
            ThreadwardenClient.connect(settings, connections) as client,
        ):
            receipt = await client.submit(thread, agent_id=QUEUED, input=[{"say": marker}])
            assert (await client.result(receipt.submission_id, timeout=60)).outcome == "completed"

        def chained(spans: list[Span]) -> bool:
            by_id = {s.span_id: s for s in spans}
            for span in spans:
                if "db.system" not in str(span.attributes):
                    continue
                names = [a.name for a in ancestors(span, by_id)]
                # The workflow's spans are the children of the client's span that started it:
                # the activity's runs under the span of the workflow scheduling it.
                if names == [
                    "RunActivity:run_head",
                    "StartActivity:run_head",
                    "SignalWithStartWorkflow:ThreadHost",
                ]:
                    return True
            return False

        async def flushed() -> list[Span]:
            for processor in processors:
                processor.force_flush()
            return collector.spans()

        spans = await eventually(flushed, chained, what="client → workflow → activity → SQL")
    finally:
        for processor in processors:
            processor.shutdown()
    head = [s for s in spans if s.name == "RunActivity:run_head"]
    assert {
        "threadwarden.host_id": thread,
        "threadwarden.thread_id": thread,
        "threadwarden.submission_id": receipt.submission_id,
        "threadwarden.agent_id": QUEUED,
    }.items() <= attributes(head[0]).items()
    client_span = next(s for s in spans if s.name == "SignalWithStartWorkflow:ThreadHost")
    assert attributes(client_span)["threadwarden.host_id"] == thread
    by_id = {s.span_id: s for s in spans}
    for name in ("RunWorkflow:ThreadHost", "StartActivity:run_head"):
        workflow = next(s for s in spans if s.name == name)
        assert attributes(workflow)["threadwarden.host_id"] == thread
        assert by_id[workflow.parent_span_id] == client_span
    assert marker not in collector.text()
