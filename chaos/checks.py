"""The ledger check: what the workload dictated against what Postgres holds, as counts.

Pure functions over rows read with plain SQL (`chaos.ledger`), so a hand-made ledger state can
show that each count catches its violation. A submission is recognised by its input (the
text of its first ``say`` step is its workload key), not by its idempotency key, so a retried
submit that was admitted twice shows up whatever key it carried.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from chaos.workload import Planned

VIOLATIONS = (
    "lost",
    "duplicate_admissions",
    "duplicate_settlements",
    "fifo_violations",
    "wrong_outcomes",
    "wrong_histories",
    "stale_writes",
    "unexpected_submissions",
)
"""The counts that must all be 0 for a run to pass."""


@dataclass(frozen=True)
class SubmissionRow:
    submission_id: str
    thread_id: str
    sequence: int
    input: Any
    state: str
    outcome: str | None
    epoch: int


@dataclass(frozen=True)
class RecordRow:
    thread_id: str
    sequence: int
    submission_id: str
    kind: str
    body: Any
    epoch: int


Row = TypeVar("Row", SubmissionRow, RecordRow)


@dataclass
class Counts:
    """The check's result; every name in `VIOLATIONS` must be 0."""

    submissions: int = 0
    settled: int = 0
    failed_on_purpose: int = 0
    lost: int = 0
    duplicate_admissions: int = 0
    duplicate_settlements: int = 0
    fifo_violations: int = 0
    wrong_outcomes: int = 0
    wrong_histories: int = 0
    stale_writes: int = 0
    unexpected_submissions: int = 0
    unsettled_states: dict[str, int] = field(default_factory=dict)
    """How many planned submissions sit in each nonterminal state (or ``missing``)."""

    @property
    def clean(self) -> bool:
        return all(getattr(self, name) == 0 for name in VIOLATIONS)


def workload_key(row: SubmissionRow) -> str | None:
    """The workload key in a submission's input (its first step's ``say``), or None."""
    steps = row.input
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        key = steps[0].get("say")
        return key if isinstance(key, str) else None
    return None


def check(
    planned: Sequence[Planned], submissions: Sequence[SubmissionRow], records: Sequence[RecordRow]
) -> Counts:
    """Count every way the ledger departs from what ``planned`` dictates."""
    by_key: dict[str, list[SubmissionRow]] = defaultdict(list)
    for row in submissions:
        by_key[workload_key(row) or f"?{row.submission_id}"].append(row)
    of_submission: dict[str, list[RecordRow]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.thread_id, r.sequence)):
        of_submission[record.submission_id].append(record)
    wanted = {p.key: p for p in planned}
    counts = Counts(submissions=len(planned))
    counts.unexpected_submissions = sum(len(rows) for k, rows in by_key.items() if k not in wanted)
    unsettled: Counter[str] = Counter()
    for plan in planned:
        rows = by_key.get(plan.key, [])
        counts.duplicate_admissions += max(0, len(rows) - 1)
        settled = [r for r in rows if r.state == "settled"]
        if not settled:
            counts.lost += 1
            unsettled[rows[0].state if rows else "missing"] += 1
            continue
        counts.settled += 1
        counts.failed_on_purpose += plan.outcome == "failed"
        for row in settled:
            own = of_submission.get(row.submission_id, [])
            counts.wrong_outcomes += _wrong_outcome(plan, row, own)
            counts.wrong_histories += _history(own) != plan.records()
    counts.unsettled_states = dict(sorted(unsettled.items()))
    counts.duplicate_settlements = sum(
        max(0, sum(r.kind == "settlement" for r in own) - 1) for own in of_submission.values()
    )
    counts.fifo_violations = fifo_violations(submissions, records)
    counts.stale_writes = stale_writes(submissions, records)
    return counts


def _history(own: Sequence[RecordRow]) -> list[tuple[str, Any]]:
    return [(r.kind, r.body) for r in own if r.kind != "settlement"]


def _wrong_outcome(plan: Planned, row: SubmissionRow, own: Sequence[RecordRow]) -> bool:
    settlements = [r.body for r in own if r.kind == "settlement"]
    return row.outcome != plan.outcome or plan.settlement() not in settlements


def fifo_violations(submissions: Sequence[SubmissionRow], records: Sequence[RecordRow]) -> int:
    """Per thread, consecutive submissions (in admitted order) that break FIFO: admitted out of
    the order they were submitted in, or the later one wrote a record before the earlier one
    settled or after it (every record of the earlier one, settlement included, comes first)."""
    settled: set[str] = set()
    spans: dict[str, tuple[int, int]] = {}
    for record in records:
        if record.kind == "settlement":
            settled.add(record.submission_id)
        low, high = spans.get(record.submission_id, (record.sequence, record.sequence))
        spans[record.submission_id] = (min(low, record.sequence), max(high, record.sequence))
    violations = 0
    for lane in _lanes(submissions):
        for earlier, later in zip(lane, lane[1:], strict=False):
            violations += _order(earlier) > _order(later) or _served_first(
                earlier.submission_id, later.submission_id, spans, settled
            )
    return violations


def _served_first(
    earlier: str, later: str, spans: dict[str, tuple[int, int]], settled: set[str]
) -> bool:
    """Whether ``later`` wrote a record before ``earlier`` (ahead of it) was done."""
    if later not in spans:
        return False
    return earlier not in settled or spans[later][0] < spans[earlier][1]


def _lanes(rows: Iterable[Row]) -> list[list[Row]]:
    """The rows grouped by thread, each group in sequence order."""
    lanes: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        lanes[row.thread_id].append(row)
    return [sorted(lane, key=lambda r: r.sequence) for lane in lanes.values()]


def _order(row: SubmissionRow) -> int:
    """The submission's place in its thread's order of submission (from its workload key)."""
    key = workload_key(row) or ""
    _, _, n = key.rpartition(".")
    return int(n) if n.isdigit() else -1


def stale_writes(submissions: Sequence[SubmissionRow], records: Sequence[RecordRow]) -> int:
    """Records written under an older epoch after a newer one on their thread, and settlements
    not written at their submission's final epoch."""
    final_epoch = {row.submission_id: row.epoch for row in submissions}
    stale = 0
    for lane in _lanes(records):
        stale += sum(a.epoch > b.epoch for a, b in zip(lane, lane[1:], strict=False))
    stale += sum(
        r.kind == "settlement" and r.epoch != final_epoch.get(r.submission_id) for r in records
    )
    return stale
