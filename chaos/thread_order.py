"""The chaos check's counts of each thread's order: FIFO service, and no write under a stale
epoch."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from chaos.rows import RecordRow, Row, SubmissionRow, workload_key


def fifo_violations(submissions: Sequence[SubmissionRow], records: Sequence[RecordRow]) -> int:
    """Per thread, consecutive submissions (in admitted order) that break FIFO: the later one
    is one of the run's own admitted out of the order they were submitted in (compared with the
    lane's last own one before it: messages and strangers in between have no place in that
    order), or the later one wrote a record before the earlier one settled or after it (every
    record of the earlier one, settlement included, comes first)."""
    settled: set[str] = set()
    spans: dict[str, tuple[int, int]] = {}
    for record in records:
        if record.kind == "settlement":
            settled.add(record.submission_id)
        low, high = spans.get(record.submission_id, (record.sequence, record.sequence))
        spans[record.submission_id] = (min(low, record.sequence), max(high, record.sequence))
    violations = 0
    for lane in _lanes(submissions):
        previous = -1  # the submission order of the lane's last own submission so far
        for earlier, later in zip(lane, lane[1:], strict=False):
            previous = _order(earlier) if _order(earlier) >= 0 else previous
            violations += previous > _order(later) >= 0 or _served_first(
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
    """The submission's place in its thread's order of submission (from its workload key);
    -1 for one that is not the run's own (a message's ``….m0``, a child's ``….c0``)."""
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
