"""Tracing: OTLP export configured by the standard ``OTEL_*`` variables, the console exporter for
local debugging, and SQL spans (asyncpg instrumentation) under the activities. The interceptor
that puts threadwarden's ids on Temporal's spans is every client's (`threadwarden.config.tracing`).

Spans carry ids and counts only (``threadwarden.host_id``, ``thread_id``, ``submission_id``,
``agent_id``; SQL spans the statement text, whose values are always ``$n`` parameters and never
recorded): no payload reaches a span.
"""

from __future__ import annotations

import logging
import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from threadwarden.config.otel import OtelEnvironment, otel_environment
from threadwarden.config.settings import Settings

logger = logging.getLogger(__name__)

_installed: set[str] = set()
"""Exporters this process already feeds (configured once, whatever the number of workers)."""
_sql_instrumented = False


def configure_tracing(
    settings: Settings, environment: OtelEnvironment | None = None
) -> list[SpanProcessor]:
    """Export spans as the settings and the ``OTEL_*`` environment ask; return the span
    processors added now (none when nothing is asked or all were added before).

    ``OTEL_TRACES_EXPORTER`` lists ``otlp`` and/or ``console`` (unset: ``otlp`` when an
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` is set); ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` is
    ``http/protobuf`` (default) or ``grpc``; the exporter reads its endpoint, headers and
    timeouts itself, the SDK ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``. The setting
    ``otel_console`` adds the console exporter. Spans go to the tracer provider installed
    globally when it is the SDK's (an application's own), else to one installed here.
    """
    otel = environment or otel_environment()
    wanted: dict[str, SpanExporter] = {}
    if settings.otel_console or "console" in otel.traces_exporter:
        wanted["console"] = ConsoleSpanExporter(out=sys.stderr)
    if "otlp" in otel.traces_exporter:
        wanted[f"otlp {otel.protocol} {otel.endpoint}"] = _otlp(otel.protocol)
    unknown = set(otel.traces_exporter) - {"otlp", "console"}
    if unknown:
        logger.warning("OTEL_TRACES_EXPORTER: %s not supported (otlp, console)", sorted(unknown))
    new = {key: exporter for key, exporter in wanted.items() if key not in _installed}
    if not new:
        return []
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=Resource.create())
        trace.set_tracer_provider(provider)
    processors: list[SpanProcessor] = []
    for key, exporter in new.items():
        processor = BatchSpanProcessor(exporter)
        provider.add_span_processor(processor)
        processors.append(processor)
        _installed.add(key)
    _instrument_sql(provider)
    return processors


def _otlp(protocol: str) -> SpanExporter:
    if protocol == "grpc":
        return GrpcExporter()
    if protocol != "http/protobuf":
        logger.warning(
            "OTEL_EXPORTER_OTLP_PROTOCOL=%s not supported; using http/protobuf", protocol
        )
    return HttpExporter()


def _instrument_sql(provider: TracerProvider) -> None:
    """asyncpg spans (statement text, never its parameters) under the current activity's span;
    only while spans are exported, so the pass hot path pays nothing otherwise."""
    global _sql_instrumented
    if not _sql_instrumented:
        instrumentor = AsyncPGInstrumentor(capture_parameters=False)  # type: ignore[no-untyped-call]  # the package is untyped
        instrumentor.instrument(tracer_provider=provider)
        _sql_instrumented = True
