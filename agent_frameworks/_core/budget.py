"""A model step's tokens spent from a delegation's budget (`AttemptContext.spend`): the run
fails (`BudgetSpent`, judged ``failed`` by `threadwarden.agents._core.errors.run_failure`) when
the budget cannot pay."""

from __future__ import annotations

from threadwarden.agents._core.steps import MODEL_TOOL
from threadwarden.bindings import AttemptContext
from threadwarden.errors import BudgetExceeded


class BudgetSpent(Exception):
    """The delegation's budget cannot pay for a model step's tokens (the run fails)."""


async def spend(ctx: AttemptContext, model: str, usage: dict[str, int]) -> None:
    """Pay a model step's recorded tokens from the delegation's budget; `BudgetSpent` when it
    cannot. Without a budget nothing is paid (the usage is in the step's record)."""
    if ctx.budget_left is None:
        return
    tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    try:
        await ctx.spend(tokens, note=f"{MODEL_TOOL} {model}")
    except BudgetExceeded as error:
        raise BudgetSpent(str(error)) from error
