"""Translation of domain errors into Temporal application errors at the activity boundary."""

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from temporalio.exceptions import ApplicationError

from threadwarden.errors import ThreadwardenError

P = ParamSpec("P")
R = TypeVar("R")


def domain_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Raise threadwarden errors as non-retryable `ApplicationError`s typed by class name.

    Pass steps never retry through Temporal: the protocol's durable backoff governs retries.
    """

    @wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except ThreadwardenError as error:
            raise ApplicationError(
                str(error), type=type(error).__name__, non_retryable=True
            ) from error

    return wrapper
