"""One warning per process when the Agents SDK's tracing would send traces to OpenAI without a
real key, or while the models are served elsewhere (issue 30 item 8).

threadwarden leaves tracing to the application: the binding never turns it on or off. At its
first use it reads the SDK's public tracing settings once and, if the default exporter is about
to post to OpenAI in vain (no key, a placeholder key) or to send a local model's conversations
off the machine (``OPENAI_BASE_URL`` names another server), says so and how to turn it off.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from urllib.parse import urlsplit

from agents.tracing import get_trace_provider
from agents.tracing.processors import default_exporter
from agents.tracing.provider import DefaultTraceProvider
from agents.tracing.traces import NoOpTrace

logger = logging.getLogger(__name__)

OPENAI_HOST = "api.openai.com"
"""Where the SDK's default exporter posts (``https://api.openai.com/v1/traces/ingest``)."""

_KEY_SHAPE = re.compile(r"sk-[A-Za-z0-9_-]{32,}")
_PLACEHOLDER_WORDS = (
    "dummy",
    "fake",
    "placeholder",
    "example",
    "changeme",
    "replace",
    "your",
    "xxxx",
    "test",
    "local",
    "not-set",
    "no-key",
)

_lock = threading.Lock()
_checked = False


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _origin(url: str) -> str:
    """``scheme://host:port`` of a URL: no credentials or path in a log line."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "an unparsable URL"
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def looks_like_openai_key(key: str) -> bool:
    """``sk-`` and 32+ key characters, with no placeholder word (``dummy``, ``test``, …)."""
    lowered = key.lower()
    return _KEY_SHAPE.fullmatch(key) is not None and not any(
        word in lowered for word in _PLACEHOLDER_WORDS
    )


def export_concerns() -> list[str]:
    """Why the SDK's trace export would go wrong now; empty when tracing is off, the
    application runs its own trace provider, the default exporter posts elsewhere, or a
    real-looking key goes to OpenAI with models at OpenAI."""
    provider = get_trace_provider()
    if not isinstance(provider, DefaultTraceProvider):
        return []  # the application's own provider: its choice
    # A trace created (never started: no processor sees it) is a no-op when tracing is off,
    # by set_tracing_disabled or OPENAI_AGENTS_DISABLE_TRACING, as the SDK itself decides.
    if isinstance(provider.create_trace("threadwarden tracing check"), NoOpTrace):
        return []
    exporter = default_exporter()
    if _host(exporter.endpoint) != OPENAI_HOST:
        return []  # the default exporter posts to a collector of the application's
    concerns = []
    base_url = os.environ.get("OPENAI_BASE_URL", "")
    if base_url and _host(base_url) != OPENAI_HOST:
        concerns.append(f"the models are served at OPENAI_BASE_URL={_origin(base_url)}")
    key = exporter.api_key  # set_tracing_export_api_key's key, else OPENAI_API_KEY
    if not key:
        concerns.append("it has no API key (each export is skipped with a warning)")
    elif not looks_like_openai_key(key):
        concerns.append("its API key does not look like an OpenAI key (a placeholder?)")
    return concerns


def warn_if_traces_go_to_openai() -> None:
    """Check once per process (at a binding's first use) and log one warning if needed."""
    global _checked
    with _lock:
        if _checked:
            return
        _checked = True
    try:
        concerns = export_concerns()
    except Exception:  # a warning must never fail a turn
        logger.debug("could not read the Agents SDK's tracing settings", exc_info=True)
        return
    if concerns:
        logger.warning(
            "the OpenAI Agents SDK's tracing is on: traces of each run (model requests and"
            " tool calls) would be sent to OpenAI (https://%s), but %s. threadwarden leaves"
            " tracing to the application: turn it off with agents.set_tracing_disabled(True)"
            " or OPENAI_AGENTS_DISABLE_TRACING=1 (or give the export a real key with"
            " agents.set_tracing_export_api_key)",
            OPENAI_HOST,
            "; ".join(concerns),
        )
