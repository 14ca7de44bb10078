"""How an attempt ends when its binding's outcome does not decide it, and how that is judged.

The stops (`AttemptStop` and its kinds) end an attempt without settling it. `NonDeterministic`
and `AttemptFaulted` are the context's own refusals. `DECISIVE` and `INFRASTRUCTURE` sort the
errors that decide an attempt whatever its handler made of them, `judge` applies that order
once the handler ended, and `recordable` turns any outcome into one the ledger can store
(docs/bindings.md, "Errors").
"""

from threadwarden.activities.pass_steps import describe
from threadwarden.bindings import Completed, Failed, Outcome, Yielded
from threadwarden.errors import (
    AbortRequested,
    InvalidInput,
    PoolExhausted,
    Retryable,
    StaleAttempt,
    StalePass,
    ThreadwardenError,
)
from threadwarden.failpoints import FailpointError
from threadwarden.ledger.claims import Claim
from threadwarden.validation import validate_input


class AttemptStop(BaseException):
    """Ends an attempt without settling. A BaseException, so a handler's ``except Exception``
    cannot swallow it."""


class Suspend(AttemptStop):
    """The submission waits for a person's approval or answer (a stable wait)."""


class UnknownEffect(AttemptStop):
    """A side-effecting tool call was prepared but its result was never recorded."""


class Yield(AttemptStop):
    """The attempt passed ``yield_after``: stop at this committed boundary, resume later."""


class WaitForChildren(AttemptStop):
    """The submission waits for its children (``suspended``); its ownership already ended."""


class NonDeterministic(InvalidInput):
    """A re-run handler asked for a different step than the one committed."""


class AttemptFaulted(ThreadwardenError):
    """A step asked for after an earlier step of this attempt failed on infrastructure: the
    attempt can make no more progress (it fails the pass and is retried later)."""


class PassFault(Exception):
    """The attempt ended on infrastructure: the pass fails and is retried, nothing settles."""

    def __init__(self, reason: str, *, owned: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.owned = owned
        """Whether the attempt still holds the head (and should give it back)."""


DECISIVE = (AbortRequested, StaleAttempt, StalePass)
"""Errors of the context's writes that decide the attempt themselves: an operator's abort
settles it ``aborted``; fencing ends it without settling (another owner has the head)."""

INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    Retryable,
    AttemptFaulted,
    PoolExhausted,
    FailpointError,
)
"""Errors that fail the pass instead of settling the submission ``failed`` even when the
handler raises them itself: the binding's explicit `Retryable`, and threadwarden's own
(pool, injected) faults. Any error of the context's own writes fails the pass through the
context's remembered fault; the handler's own network or database errors are its own verdict
(`Retryable` asks for a retry)."""


def judge(
    claim: Claim, *, lost: str | None, fault: BaseException | None, error: BaseException | None
) -> None:
    """Raise what decides the attempt regardless of how its handler ended, if anything does:
    a lost lease (``lost``), then a ``fault`` of threadwarden's own writes, then an
    infrastructure ``error``."""
    if lost is not None and not isinstance(error, WaitForChildren):
        # (A wait for children ends the ownership itself: a renewal refused after it is no
        # loss.)
        raise PassFault(lost, owned=False)
    if isinstance(fault, DECISIVE):
        raise fault
    if fault is not None:
        raise PassFault(f"attempt {claim.attempt_id}: {describe(fault)}", owned=True)
    if isinstance(error, PassFault):
        raise error
    if isinstance(error, INFRASTRUCTURE):  # by type only: the binding's text may quote payload
        raise PassFault(
            f"attempt {claim.attempt_id}: the binding raised {type(error).__name__}", owned=True
        )


_DECIDED_ELSEWHERE = (Yield, PassFault, *INFRASTRUCTURE, *DECISIVE)
"""What ends an attempt other than its binding (an abort excepted: `ended_by_itself`)."""


def ended_by_itself(
    *, lost: str | None, fault: BaseException | None, error: BaseException | None
) -> bool:
    """Whether the binding ended its attempt itself: returned, raised its own error, waited or
    was aborted; not a yield to a budget or a deadline, a fault, another owner (`QuickHeads`)."""
    return (
        lost is None
        and fault is None
        and (isinstance(error, AbortRequested) or not isinstance(error, _DECIDED_ELSEWHERE))
    )


def recordable(outcome: object) -> Outcome:
    """Turn an outcome that cannot be recorded into a recordable failure (never a retry loop)."""
    if isinstance(outcome, Yielded):
        return outcome
    if isinstance(outcome, Failed):
        # A reason Postgres cannot store (a NUL, a lone surrogate) would fail every pass.
        reason = str(outcome.reason).replace("\x00", "\\0")
        return Failed(reason.encode("utf-8", "replace").decode())
    if not isinstance(outcome, Completed):
        return Failed(
            f"binding returned {type(outcome).__name__}, expected Completed, Failed or Yielded"
        )
    try:
        validate_input("result", outcome.result)
    except InvalidInput as error:
        return Failed(f"binding {error}")
    return outcome
