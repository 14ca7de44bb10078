"""Whatever a binding does, its submission records exactly one outcome and never loops.

These are application failures (docs/bindings.md, "Errors"): they settle ``failed`` at once.
Infrastructure errors, which fail the pass instead, are in tests/e2e/test_attempt_faults.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.helpers.polling import eventually
from threadwarden import AttemptContext, Binding, Completed, Failed, Outcome
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.worker.plugin import default_registry
from threadwarden.worker.runtime import running_worker


async def _unjsonable(_: AttemptContext) -> Outcome:
    return Completed(object())


async def _reserved_kind(ctx: AttemptContext) -> Outcome:
    await ctx.append("settlement", {"forged": True})
    return Completed()


async def _raises(_: AttemptContext) -> Outcome:
    raise ValueError("model exploded")


async def _raises_its_own_network_error(_: AttemptContext) -> Outcome:
    raise ConnectionError("model endpoint unreachable")  # its own call: its own verdict


async def _unstorable_result(_: AttemptContext) -> Outcome:
    return Completed({"text": "nul\x00byte"})


async def _unstorable_reason(_: AttemptContext) -> Outcome:
    return Failed("nul\x00byte")


async def _returns_none(_: AttemptContext) -> Any:
    return None


async def _history_reader(ctx: AttemptContext) -> Outcome:
    return Completed({"seen": [r.kind for r in ctx.history], "input": ctx.input})


BINDINGS = {
    "unjsonable": (_unjsonable, "binding result: expected a JSON value"),
    "reserved": (_reserved_kind, "binding raised InvalidInput: kind: expected a record kind other"),
    "raises": (_raises, "binding raised ValueError: model exploded"),
    "nul-result": (_unstorable_result, "binding result.text: expected"),
    "nul-reason": (_unstorable_reason, "nul\\0byte"),
    "network": (_raises_its_own_network_error, "binding raised ConnectionError"),
    "returns-none": (
        _returns_none,
        "binding returned NoneType, expected Completed, Failed or Yielded",
    ),
}


@pytest.fixture
async def misbehaving_worker(settings: Settings, connections: Connections) -> AsyncIterator[None]:
    """A worker whose registry holds the misbehaving bindings above."""
    registry = default_registry()
    for agent_id, (handler, _) in BINDINGS.items():
        registry.register(Binding(agent_id=agent_id, digest="d1", handler=handler))
    registry.register(Binding(agent_id="reader", digest="d1", handler=_history_reader))
    async with running_worker(settings, connections, registry):
        yield


@pytest.mark.parametrize("agent_id", sorted(BINDINGS))
async def test_attempt_misbehaving_binding_settles_failed_once_with_a_reason(
    misbehaving_worker: None, client: ThreadwardenClient, ids: str, agent_id: str
) -> None:
    thread = f"{ids}-{agent_id}"
    await client.submit(thread, agent_id=agent_id, input={})
    await client.submit(thread, agent_id="reader", input={"after": agent_id})
    status = await eventually(
        lambda: client.thread_status(thread),
        lambda s: all(x.state == "settled" for x in s.submissions),
        what="both settled",
    )
    first, second = status.submissions
    # Settled by its first attempt: an application failure never fails the pass into a retry.
    assert first.outcome == "failed" and first.attempts == 1
    assert first.reason is not None and first.reason.startswith(BINDINGS[agent_id][1])
    assert second.outcome == "completed"
    records = await client.records(thread)
    assert [r["kind"] for r in records].count("settlement") == 2
    assert not any(r["body"] == {"forged": True} for r in records)
    reader_result = records[-1]["body"]["result"]
    assert reader_result == {"seen": ["settlement"], "input": {"after": agent_id}}
