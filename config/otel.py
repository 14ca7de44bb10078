"""The standard OpenTelemetry variables threadwarden acts on itself (`OtelEnvironment`): which
trace exporters the worker sets up, and for which collector (worker/telemetry.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OtelEnvironment:
    """The standard OpenTelemetry variables threadwarden acts on itself (the exporters read
    ``OTEL_EXPORTER_OTLP_*`` and the SDK ``OTEL_SERVICE_NAME`` on their own)."""

    traces_exporter: tuple[str, ...]
    """``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``; comma-separated). Unset:
    ``otlp`` when an OTLP endpoint variable is set, else none."""
    protocol: str
    """``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
    ``http/protobuf``."""
    endpoint: str | None = None
    """``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter
    reads it itself; kept to tell exporters to different collectors apart)."""


def otel_environment(environ: Mapping[str, str] | None = None) -> OtelEnvironment:
    """The `OtelEnvironment` of ``environ`` (default: the process environment)."""
    env = os.environ if environ is None else environ
    listed = env.get("OTEL_TRACES_EXPORTER")
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if listed is None:
        exporters: tuple[str, ...] = ("otlp",) if endpoint else ()
    else:
        exporters = tuple(
            name.strip().lower() for name in listed.split(",") if name.strip() not in ("", "none")
        )
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    return OtelEnvironment(exporters, protocol.strip().lower(), endpoint)
