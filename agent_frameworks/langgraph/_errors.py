"""A graph's errors sorted as docs/bindings.md (Errors) says: transient trouble of a model or
service a node calls is `Retryable` (the pass retries with backoff, resuming from the last
checkpoint); the graph's own errors (a node's exception, the recursion limit, an invalid
update) are its verdict, `Failed` with the reason."""

from __future__ import annotations

from langgraph.errors import GraphRecursionError, InvalidUpdateError

from threadwarden.agents._core.errors import short, transient_status
from threadwarden.bindings import Failed
from threadwarden.errors import Retryable, ThreadwardenError

_TRANSIENT_NAMES = ("Timeout", "Connection", "RateLimit", "Overloaded", "Unavailable")
"""Error class names model clients give transient trouble (openai's ``APIConnectionError``,
``APITimeoutError``, ``RateLimitError``; httpx's ``ConnectTimeout``; anthropic's
``OverloadedError``...), matched by name: the adapter depends on no model client."""


def _transient(error: Exception) -> bool:
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return transient_status(status)
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    return any(name in cls.__name__ for cls in type(error).__mro__ for name in _TRANSIENT_NAMES)


def verdict(error: Exception) -> Failed | None:
    """`Failed` for the graph's own errors, None for threadwarden's (raised again for the
    runtime to judge); raises `Retryable` (from ``error``) for transient trouble."""
    if isinstance(error, ThreadwardenError):
        return None
    if isinstance(error, GraphRecursionError):
        return Failed(f"graph: {short(error)}")
    if isinstance(error, InvalidUpdateError):
        return Failed(f"graph: invalid update: {short(error)}")
    if _transient(error):
        raise Retryable(f"{type(error).__name__}: {short(error)}") from error
    return Failed(f"graph raised {type(error).__name__}: {short(error)}")
