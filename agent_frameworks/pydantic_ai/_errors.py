"""pydantic-ai's errors sorted per SPEC §8: transient endpoint trouble is `Retryable` (the pass
retries with backoff, replaying the journal); a rejected request, a usage limit or an output
that failed validation is the binding's verdict, `Failed` with the reason."""

from __future__ import annotations

from pydantic_ai import ModelHTTPError, UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
)

from threadwarden.agents.pydantic_ai._journal import BudgetSpent
from threadwarden.bindings import Failed
from threadwarden.errors import Retryable

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses below 500 that say "try again later", not "this request is wrong"."""

_TRANSIENT = (
    ModelConnectionError,
    ModelRequestTimeout,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
)


def _short(text: object, limit: int = 300) -> str:
    shown = str(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def verdict(error: Exception) -> Failed | None:
    """`Failed` for the binding's own verdicts, None for errors that are not the model's;
    raises `Retryable` (from ``error``) for transient endpoint trouble."""
    if isinstance(error, ModelHTTPError):
        status = error.status_code
        if status in RETRYABLE_STATUS or status >= 500:
            raise Retryable(f"model {error.model_name}: HTTP {status}") from error
        body = _short(error.body)
        return Failed(f"model {error.model_name} rejected the request: HTTP {status}: {body}")
    if isinstance(error, _TRANSIENT):
        raise Retryable(f"model {error.model_name}: {type(error).__name__}: {error}") from error
    if isinstance(error, ModelAPIError):
        return Failed(f"model {error.model_name} refused the request: {_short(error)}")
    if isinstance(error, UsageLimitExceeded):
        return Failed(f"usage limit: {error}")
    if isinstance(error, UnexpectedModelBehavior):
        return Failed(f"model output: {_short(error)}")
    if isinstance(error, BudgetSpent):
        return Failed(f"budget: {error}")
    return None
