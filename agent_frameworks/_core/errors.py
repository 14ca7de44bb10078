"""What every adapter's error mapping (its ``_errors.verdict``) shares: which HTTP statuses are
transient, the verdicts every model adapter judges alike, and `judged`, which unwraps the
runtime's stops from exception groups and settles the rest (docs/bindings.md, Errors)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from threadwarden.agents._core.budget import BudgetSpent
from threadwarden.agents._core.compaction import TooLong
from threadwarden.bindings import Failed

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses below 500 that say "try again later", not "this request is wrong"."""


def transient_status(status: int) -> bool:
    """Whether an endpoint's HTTP status says "try again later" (a 5xx or `RETRYABLE_STATUS`)."""
    return status in RETRYABLE_STATUS or status >= 500


def short(text: object, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, for a reason."""
    shown = str(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def run_failure(
    error: Exception, *, usage_limit: type[Exception], bad_output: type[Exception]
) -> Failed | None:
    """`Failed` for what every model adapter judges alike: the framework's ``usage_limit``
    error, its error for an output the model got wrong (``bad_output``), a spent budget
    (`BudgetSpent`), a request too long for the model even after summarizing (`TooLong`);
    else None."""
    if isinstance(error, usage_limit):
        return Failed(f"usage limit: {error}")
    if isinstance(error, bad_output):
        return Failed(f"model output: {short(error)}")
    if isinstance(error, BudgetSpent):
        return Failed(f"budget: {error}")
    if isinstance(error, TooLong):
        return Failed(f"context: {error}")
    return None


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def judged(raised: BaseException, verdict: Callable[[Exception], Failed | None]) -> Failed:
    """The turn's `Failed` for an error its run raised, or raise what decides otherwise.

    The runtime ends an attempt (an approval wait, an unknown side effect, a yield) with a
    `BaseException` that a framework running tools in a task group may wrap in a group: it is
    raised bare, for the runtime to see. Of any other group, its first error is judged.
    ``verdict`` sorts the framework's errors (`Failed`, or raises `Retryable`); what it does
    not know is raised again (the runtime settles it as the binding's own error).
    """
    leaves = list(_leaves(raised))
    for leaf in leaves:
        if not isinstance(leaf, Exception):
            raise leaf
    error = leaves[0] if leaves else raised
    assert isinstance(error, Exception)
    failed = verdict(error)
    if failed is None:
        raise error
    return failed
