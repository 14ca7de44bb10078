"""The history a claim loads: the thread's earlier records, or only the kinds a binding reads."""

from __future__ import annotations

from tests.helpers.ledger import BINDINGS, Ledger


async def _earlier_turn(ledger: Ledger, ids: str) -> None:
    """One settled submission with a ``note`` and a ``memo`` record before its settlement."""
    await ledger.admit(ids)
    claim = await ledger.claim(ids)
    await ledger.attempts.append(claim, "note", {"n": 1}, step=1)
    await ledger.attempts.append(claim, "memo", {"n": 2}, step=2)
    await ledger.attempts.settle(claim, "completed", result="done")


async def test_a_claim_loads_every_earlier_kind_by_default(ledger: Ledger, ids: str) -> None:
    await _earlier_turn(ledger, ids)
    await ledger.admit(ids)

    claim = await ledger.claim(ids)

    assert [r.kind for r in claim.history] == ["note", "memo", "settlement"]


async def test_a_claim_loads_only_the_history_kinds_its_binding_reads(
    ledger: Ledger, ids: str
) -> None:
    await _earlier_turn(ledger, ids)
    await ledger.admit(ids)
    begun = await ledger.begin(ids)

    claim = await ledger.attempts.claim_head(
        ids,
        begun.epoch,
        ids,
        bindings=BINDINGS,
        history_kinds={"echo": frozenset({"memo", "settlement"}), "other": frozenset({"note"})},
    )

    assert claim is not None
    assert [(r.kind, r.body) for r in claim.history] == [
        ("memo", {"n": 2}),
        ("settlement", {"outcome": "completed", "result": "done", "reason": None}),
    ]
