"""One exception tree for everything threadwarden raises on purpose, and what each surface
(the CLI, the API, the console's forms) says of one: its stable code and the field it is about."""

import re
from typing import ClassVar


class ThreadwardenError(Exception):
    """Root of every error threadwarden raises deliberately."""

    subject: ClassVar[str | None] = None
    """The request field a refused decision or admission is about (the CLI's name: ``thread``,
    ``submission``, ``host``, ``idempotency_key``): an error with one is the caller's to fix
    (the CLI exits 2). A subclass is about its base's; `InvalidInput` names its own field."""


def error_code(error: BaseException) -> str:
    """The stable ``code`` of an error on every surface: ``InvalidInput`` -> ``invalid_input``,
    any other threadwarden error its class name in snake case, anything else ``error``."""
    if type(error) is ThreadwardenError or not isinstance(error, ThreadwardenError):
        return "error"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()


def field_of(error: BaseException) -> str | None:
    """The field a bad-input error is about: an `InvalidInput`'s own, else its ``subject``."""
    if isinstance(error, InvalidInput):
        return error.field
    return error.subject if isinstance(error, ThreadwardenError) else None


class InvalidInput(ThreadwardenError):
    """A caller-supplied value is malformed; nothing was written."""

    def __init__(self, field: str, expected: str, got: object | None = None) -> None:
        self.field = field
        self.expected = expected
        shown = "" if got is None else f", got {_shorten(got)}"
        super().__init__(f"{field}: expected {expected}{shown}")


class IdempotencyConflict(ThreadwardenError):
    """The idempotency key was already used on this thread for a different payload."""

    subject = "idempotency_key"


class ThreadBusy(ThreadwardenError):
    """``if_busy="reject"``: the thread has a submission that has not settled; nothing was
    written."""

    subject = "thread"


class NotFound(ThreadwardenError):
    """A named thread, host or submission does not exist."""


class ResultTimeout(ThreadwardenError, TimeoutError):
    """A submission did not settle within the caller's timeout; it may still settle later."""


class HostMismatch(ThreadwardenError):
    """A thread was addressed under a host other than the one that owns it."""

    subject = "host"


class StalePass(ThreadwardenError):
    """A pass step ran under a pass epoch that a newer pass has replaced; it wrote nothing."""


class StaleAttempt(ThreadwardenError):
    """An attempt's ownership token or epoch no longer holds; its write was refused."""


class AbortRequested(ThreadwardenError):
    """An operator asked to abort the submission; the attempt stops at this boundary."""


class NotWaiting(ThreadwardenError):
    """An operator action addressed a submission that is not waiting for it."""

    subject = "submission"


class DecisionConflict(NotWaiting):
    """The submission no longer waits: another decision was recorded (deny after approve, a
    resolution with another outcome or result). Nothing was written."""


class ChildConflict(IdempotencyConflict):
    """A call's child already exists (or its key is taken) but differs from the request: the
    delegation fails closed and writes nothing."""


class ChildNotSettled(NotWaiting):
    """The child has no canonical settlement yet: nothing to record or join."""


class BudgetExceeded(ThreadwardenError):
    """A delegated submission tried to spend more of its budget than is left; nothing was
    recorded. The binding decides what follows (uncaught, it fails the submission)."""


class Retryable(ThreadwardenError):
    """Raised by a binding to end this attempt without settling: the pass fails and the
    protocol's durable backoff retries the submission later, replaying its committed steps.

    For trouble the binding knows to be transient (a rate limit, a model endpoint that is
    down). To fail the submission for good, return `Failed` (or raise any other error).
    """


class BindingUnavailable(ThreadwardenError):
    """No binding is registered for the head's agent id; the work stays pending."""

    def __init__(self, message: str, *, submission_id: str | None = None) -> None:
        super().__init__(message)
        self.submission_id = submission_id


class BindingDigestMismatch(BindingUnavailable):
    """The registered binding's definition digest differs from the one the work was pinned to."""


class PoolExhausted(ThreadwardenError):
    """No database connection came free within the pool's acquire timeout.

    An infrastructure failure, never a hang: the pass step fails and the protocol's durable
    retry takes over (see docs/operations.md).
    """


class SchemaVersionMismatch(ThreadwardenError):
    """The database schema is not at the version this code expects."""


class StackNotFound(ThreadwardenError):
    """No running embedded stack and no external services were configured."""


class StackAlreadyRunning(ThreadwardenError):
    """Processes of an earlier embedded stack still run on the data dir (named by pid)."""


def _shorten(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
