"""The history a claim loads: the thread's earlier records, only the kinds a binding reads, none,
or the newest summary and what follows it (docs/bindings.md, "What a claim loads")."""

from __future__ import annotations

from typing import Any

from tests.helpers.ledger import BINDINGS, Ledger
from tests.helpers.long_thread import RECORDS, write_long_thread
from threadwarden.bindings import SUMMARY
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.history import HISTORY_LIMIT


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


async def _turn(ledger: Ledger, ids: str, *records: tuple[str, Any]) -> None:
    """One settled submission that appended ``records`` (kind, body), one step each."""
    await ledger.admit(ids)
    claim = await ledger.claim(ids)
    for step, (kind, body) in enumerate(records, start=1):
        await ledger.attempts.append(claim, kind, body, step=step)
    await ledger.attempts.settle(claim, "completed", result="done")


def _summary(last: int) -> dict[str, Any]:
    return {"of": "note", "first": 1, "last": last, "turns": 1, "text": f"up to {last}"}


async def _claim_reading(ledger: Ledger, ids: str, kinds: frozenset[str]) -> Claim:
    begun = await ledger.begin(ids)
    claim = await ledger.attempts.claim_head(
        ids, begun.epoch, ids, bindings=BINDINGS, history_kinds={"echo": kinds}
    )
    assert claim is not None
    return claim


async def test_a_binding_that_reads_no_kind_loads_no_history(ledger: Ledger, ids: str) -> None:
    await _earlier_turn(ledger, ids)
    await ledger.admit(ids)

    claim = await _claim_reading(ledger, ids, frozenset())

    assert claim.history == []


async def test_a_summary_reader_loads_the_newest_summary_then_every_record_after_it(
    ledger: Ledger, ids: str
) -> None:
    await _turn(ledger, ids, ("note", {"n": 1}), ("memo", {"n": 1}))  # 1, 2, settlement 3
    await _turn(ledger, ids, ("note", {"n": 2}), (SUMMARY, _summary(3)))  # 4, 5, 6
    await _turn(ledger, ids, ("note", {"n": 3}))  # 7, 8
    await _turn(ledger, ids, ("note", {"n": 4}), (SUMMARY, _summary(7)))  # 9, 10, 11
    await _turn(ledger, ids, ("note", {"n": 5}), ("memo", {"n": 5}))  # 12, 13, 14
    await ledger.admit(ids)

    claim = await _claim_reading(ledger, ids, frozenset({SUMMARY, "note", "settlement"}))

    # The newest summary first (it stands for 1..7), then the kinds read after 7, the turns it
    # left verbatim (8, 9) included; never the older summary, the memos or anything up to 7.
    assert [(r.sequence, r.kind) for r in claim.history] == [
        (10, SUMMARY),
        (8, "settlement"),
        (9, "note"),
        (11, "settlement"),
        (12, "note"),
        (14, "settlement"),
    ]
    assert claim.history[0].body == _summary(7)


async def test_a_summary_reader_loads_every_record_of_its_kinds_before_the_first_summary(
    ledger: Ledger, ids: str
) -> None:
    await write_long_thread(ledger.pool, ids)  # 5,000 notes: more than a window would keep
    await ledger.admit(ids)

    claim = await _claim_reading(ledger, ids, frozenset({SUMMARY, "note"}))

    assert [r.sequence for r in claim.history] == list(range(1, RECORDS + 1, 2))
    assert len(claim.history) > HISTORY_LIMIT


async def test_a_summary_whose_last_is_not_a_sequence_covers_nothing(
    ledger: Ledger, ids: str
) -> None:
    await _turn(ledger, ids, ("note", {"n": 1}))  # 1, 2
    await _turn(ledger, ids, (SUMMARY, {"text": "a binding's own summary"}))  # 3, 4
    await ledger.admit(ids)

    claim = await _claim_reading(ledger, ids, frozenset({SUMMARY, "note"}))

    assert [(r.sequence, r.kind) for r in claim.history] == [(3, SUMMARY), (1, "note")]
