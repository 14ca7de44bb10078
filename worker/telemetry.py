"""Tracing: Temporal's OpenTelemetry interceptor, and an optional console exporter."""

import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from temporalio.contrib.opentelemetry import TracingInterceptor

from threadwarden.worker.settings import Settings

_configured = False


def configure_tracing(settings: Settings) -> None:
    """Install a console-exporting tracer provider when ``otel_console`` is set.

    Applications that configure their own provider (OTLP, …) leave the setting off; the
    interceptor then reports to whatever provider is installed globally.
    """
    global _configured
    if settings.otel_console and not _configured:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        trace.set_tracer_provider(provider)
        _configured = True


def interceptors() -> list[TracingInterceptor]:
    """Client interceptors: workflow, activity and signal spans for every threadwarden call."""
    return [TracingInterceptor()]
