"""Translation of domain errors into Temporal application errors at the activity boundary."""

import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from threadwarden.errors import StaleAttempt, StalePass, ThreadwardenError

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger(__name__)

FENCING = (StalePass, StaleAttempt)
"""Expected fencing: a newer pass or attempt took over. Benign, logged in one line."""


def domain_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Raise threadwarden errors as non-retryable `ApplicationError`s typed by class name.

    Pass steps never retry through Temporal: the protocol's durable backoff governs retries.
    Expected fencing (`StalePass`, `StaleAttempt`) is raised in the BENIGN category (the SDK
    logs it at DEBUG and leaves it out of failure metrics) after one warning line here, without
    a traceback.
    """

    @wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except FENCING as error:
            logger.warning("%s superseded: %s", fn.__name__, error)
            raise ApplicationError(
                str(error),
                type=type(error).__name__,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            ) from error
        except ThreadwardenError as error:
            raise ApplicationError(
                str(error), type=type(error).__name__, non_retryable=True
            ) from error

    return wrapper
