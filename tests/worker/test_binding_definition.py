"""A `Binding`'s own checks: what it refuses when it is defined."""

from __future__ import annotations

from typing import Any

import pytest

from threadwarden.bindings import AttemptContext, Binding, Completed, Outcome
from threadwarden.errors import InvalidInput


async def _handler(_: AttemptContext) -> Outcome:
    return Completed(result=None)


@pytest.mark.parametrize("kinds", ["settlement", frozenset({""}), frozenset({1})])
def test_history_kinds_must_be_a_set_of_record_kinds(kinds: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        Binding(agent_id="a", digest="d", handler=_handler, history_kinds=kinds)

    assert refused.value.field == "history_kinds"


def test_history_kinds_default_to_every_kind() -> None:
    assert Binding(agent_id="a", digest="d", handler=_handler).history_kinds is None
