"""pydantic-ai's errors sorted as docs/bindings.md (Errors) says: transient endpoint trouble is
`Retryable` (the pass retries with backoff, replaying the journal); a rejected request, a usage
limit or an output that failed validation is the binding's verdict, `Failed` with the reason."""

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

from threadwarden.agents._core.errors import run_failure, short, transient_status
from threadwarden.bindings import Failed
from threadwarden.errors import Retryable

_TRANSIENT = (
    ModelConnectionError,
    ModelRequestTimeout,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
)


def verdict(error: Exception) -> Failed | None:
    """`Failed` for the binding's own verdicts, None for errors that are not the model's;
    raises `Retryable` (from ``error``) for transient endpoint trouble."""
    if isinstance(error, ModelHTTPError):
        status = error.status_code
        if transient_status(status):
            raise Retryable(f"model {error.model_name}: HTTP {status}") from error
        body = short(error.body)
        return Failed(f"model {error.model_name} rejected the request: HTTP {status}: {body}")
    if isinstance(error, _TRANSIENT):
        raise Retryable(f"model {error.model_name}: {type(error).__name__}: {error}") from error
    if isinstance(error, ModelAPIError):
        return Failed(f"model {error.model_name} refused the request: {short(error)}")
    return run_failure(error, usage_limit=UsageLimitExceeded, bad_output=UnexpectedModelBehavior)
