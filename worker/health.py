"""The worker's one HTTP endpoint: ``/metrics`` (Prometheus text: threadwarden's and the Temporal
SDK's series), ``/healthz`` (the process is up and the ledger answers) and ``/readyz`` (the
worker is polling). A few lines of asyncio, so the worker needs no web framework."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from threadwarden.worker.metrics import WorkerTelemetry

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0
"""Longest wait of ``/healthz`` for the ledger (a connection and ``SELECT 1``)."""
REQUEST_TIMEOUT_S = 10.0
"""Longest wait for a client's request line and headers."""
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def scrape_url(bind: tuple[str, int] | None) -> str | None:
    """Where the endpoint bound to ``bind`` is scraped (a wildcard host: on loopback)."""
    if bind is None:
        return None
    host = bind[0] if bind[0] not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{bind[1]}/metrics"


class MetricsEndpoint:
    """Serves one worker's `WorkerTelemetry` and its health checks on ``host:port``."""

    def __init__(
        self,
        telemetry: WorkerTelemetry,
        pool: asyncpg.Pool[Any],
        *,
        ready: Callable[[], bool],
        sdk_metrics: tuple[str, int] | None = None,
    ) -> None:
        self._sdk_metrics = sdk_metrics
        """Where the Temporal SDK's core renders its metrics (`MeteredRuntime`), if it does."""
        self._telemetry = telemetry
        self._pool = pool
        self._ready = ready
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str | None:
        """``http://host:port/metrics`` once serving."""
        if self._server is None:
            return None
        host, port = self._server.sockets[0].getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/metrics"

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host or None, port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                request = (await reader.readline()).decode("latin-1").split()
                while (await reader.readline()).strip():  # headers: not needed
                    pass
            status, content_type, body = await self._answer(request)
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            if not (request and request[0] == "HEAD"):
                writer.write(body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass  # a client that went away or never spoke
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, request: list[str]) -> tuple[int, str, bytes]:
        text = "text/plain; charset=utf-8"
        if len(request) < 2:
            return 404, text, b"not found\n"
        method, path = request[0], request[1].split("?", 1)[0]
        if path not in ("/metrics", "/healthz", "/readyz"):
            return 404, text, b"not found\n"
        if method not in ("GET", "HEAD"):
            return 405, text, b"GET only\n"
        if path == "/readyz":
            return (200, text, b"ready\n") if self._ready() else (503, text, b"not polling\n")
        if path == "/healthz":
            healthy, detail = await self._ledger_answers()
            return (200 if healthy else 503), text, detail.encode() + b"\n"
        try:
            await self._telemetry.refresh_gauges()
        except Exception as error:  # the counters are still worth serving
            logger.warning("metrics: reading the ledger gauges failed: %r", error)
        own = generate_latest(self._telemetry.registry)
        return 200, CONTENT_TYPE_LATEST, own + await self._sdk_text()

    async def _sdk_text(self) -> bytes:
        """The Temporal SDK's metrics as its core renders them (empty when it does not, or
        does not answer within `HEALTH_TIMEOUT_S`)."""
        if self._sdk_metrics is None:
            return b""
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(*self._sdk_metrics)
                try:
                    writer.write(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
                    await writer.drain()
                    answer = await reader.read()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as error:
            logger.warning("metrics: the Temporal SDK's metrics were not read: %r", error)
            return b""
        head, _, body = answer.partition(b"\r\n\r\n")
        return body if head.split(b" ", 2)[1:2] == [b"200"] else b""

    async def _ledger_answers(self) -> tuple[bool, str]:
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                await self._pool.fetchval("SELECT 1")
        except Exception as error:
            return False, f"ledger unreachable: {type(error).__name__}"
        return True, "ok"


@contextlib.asynccontextmanager
async def serving(
    endpoint: MetricsEndpoint, bind: tuple[str, int]
) -> AsyncIterator[MetricsEndpoint]:
    """Serve while the block runs. An address already in use (another worker on the machine)
    is logged and the worker runs without the endpoint rather than not at all."""
    try:
        await endpoint.start(*bind)
    except OSError as error:
        logger.warning(
            "metrics endpoint %s:%d not served (%s); set THREADWARDEN_METRICS_ADDRESS",
            *bind,
            error.strerror or error,
        )
    else:
        logger.info("metrics on %s", endpoint.url)
    try:
        yield endpoint
    finally:
        await endpoint.stop()
