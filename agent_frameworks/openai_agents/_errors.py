"""The Agents SDK's and the OpenAI client's errors sorted per SPEC §8: transient endpoint trouble
is `Retryable`; a rejected request, too many turns or an output that failed validation is the
binding's verdict, `Failed` with the reason."""

from __future__ import annotations

import openai
from agents.exceptions import MaxTurnsExceeded, ModelBehaviorError

from threadwarden.agents.openai_agents._model import BudgetSpent
from threadwarden.bindings import Failed
from threadwarden.errors import Retryable

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses below 500 that say "try again later", not "this request is wrong"."""


def _short(text: object, limit: int = 300) -> str:
    shown = str(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def verdict(error: Exception) -> Failed | None:
    """`Failed` for the binding's own verdicts, None for errors that are not the model's;
    raises `Retryable` (from ``error``) for transient endpoint trouble."""
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        if status in RETRYABLE_STATUS or status >= 500:
            raise Retryable(f"model endpoint: HTTP {status}") from error
        return Failed(
            f"model endpoint rejected the request: HTTP {status}: {_short(error.message)}"
        )
    if isinstance(error, openai.APIConnectionError):  # timeouts included
        raise Retryable(f"model endpoint: {type(error).__name__}: {error}") from error
    if isinstance(error, MaxTurnsExceeded):
        return Failed(f"usage limit: {error}")
    if isinstance(error, ModelBehaviorError):
        return Failed(f"model output: {_short(error)}")
    if isinstance(error, BudgetSpent):
        return Failed(f"budget: {error}")
    return None
