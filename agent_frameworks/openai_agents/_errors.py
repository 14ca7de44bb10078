"""The Agents SDK's and the OpenAI client's errors sorted as docs/bindings.md (Errors) says:
transient endpoint trouble is `Retryable`; a rejected request, too many turns or an output that
failed validation is the binding's verdict, `Failed` with the reason."""

from __future__ import annotations

import openai
from agents.exceptions import MaxTurnsExceeded, ModelBehaviorError

from threadwarden.agents._core.errors import run_failure, short, transient_status
from threadwarden.bindings import Failed
from threadwarden.errors import Retryable


def verdict(error: Exception) -> Failed | None:
    """`Failed` for the binding's own verdicts, None for errors that are not the model's;
    raises `Retryable` (from ``error``) for transient endpoint trouble."""
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        if transient_status(status):
            raise Retryable(f"model endpoint: HTTP {status}") from error
        return Failed(f"model endpoint rejected the request: HTTP {status}: {short(error.message)}")
    if isinstance(error, openai.APIConnectionError):  # timeouts included
        raise Retryable(f"model endpoint: {type(error).__name__}: {error}") from error
    return run_failure(error, usage_limit=MaxTurnsExceeded, bad_output=ModelBehaviorError)
