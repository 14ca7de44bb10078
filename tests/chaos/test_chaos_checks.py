"""The chaos run's ledger check catches each violation on a hand-made ledger state; the seeded
workload, fault order, failpoint counting and flags (no services needed)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import pytest

from chaos.checks import VIOLATIONS, Counts, RecordRow, SubmissionRow, check
from chaos.cli import parse_args
from chaos.faults import DEFAULT_FAILPOINTS, failpoints_fired, plan_faults
from chaos.workload import Planned, plan_workload

Ledger = tuple[list[SubmissionRow], list[RecordRow]]


def faithful_ledger(planned: list[Planned]) -> Ledger:
    """What an uninterrupted threadwarden leaves: per thread, submissions in order, each one's
    records then its settlement, at one epoch per attempt."""
    submissions: list[SubmissionRow] = []
    records: list[RecordRow] = []
    next_record: dict[str, int] = defaultdict(lambda: 1)
    for plan in sorted(planned, key=lambda p: (p.thread, p.n)):
        submission_id = f"s-{plan.key}"
        epoch = plan.n + 1
        submissions.append(
            SubmissionRow(submission_id, plan.thread, plan.n + 1, plan.steps, "settled",
                          plan.outcome, epoch)
        )  # fmt: skip
        for kind, body in [*plan.records(), ("settlement", plan.settlement())]:
            sequence = next_record[plan.thread]
            next_record[plan.thread] += 1
            records.append(RecordRow(plan.thread, sequence, submission_id, kind, body, epoch))
    return submissions, records


def violations(counts: Counts) -> dict[str, int]:
    return {name: getattr(counts, name) for name in VIOLATIONS if getattr(counts, name)}


@pytest.fixture
def planned() -> list[Planned]:
    """A small seeded workload: 3 threads, 4 submissions each."""
    return plan_workload(12, 3, seed=5)


def test_check_counts_nothing_on_a_faithful_ledger(planned: list[Planned]) -> None:
    counts = check(planned, *faithful_ledger(planned))
    assert violations(counts) == {}
    assert counts.clean
    assert (counts.submissions, counts.settled) == (12, 12)
    assert counts.failed_on_purpose == sum(p.outcome == "failed" for p in planned)


def test_check_counts_a_duplicate_settlement(planned: list[Planned]) -> None:
    submissions, records = faithful_ledger(planned)
    settlement = max(records, key=lambda r: (r.thread_id, r.sequence))  # the last thread's last
    assert settlement.kind == "settlement"
    again = dataclasses.replace(settlement, sequence=settlement.sequence + 1)
    counts = check(planned, submissions, [*records, again])
    assert violations(counts) == {"duplicate_settlements": 1}


def test_check_counts_a_later_submission_served_before_the_earlier_settled(
    planned: list[Planned],
) -> None:
    submissions, records = faithful_ledger(planned)
    thread = planned[0].thread
    lane = sorted((r for r in records if r.thread_id == thread), key=lambda r: r.sequence)
    first_settlement = next(r for r in lane if r.kind == "settlement")
    # The second submission's first record swaps places with the first one's settlement.
    second = next(r for r in lane if r.sequence == first_settlement.sequence + 1)
    moved = [
        dataclasses.replace(first_settlement, sequence=second.sequence),
        dataclasses.replace(second, sequence=first_settlement.sequence),
    ]
    others = [r for r in records if r is not first_settlement and r is not second]
    counts = check(planned, submissions, [*others, *moved])
    # The second one's record, at its higher epoch, also precedes a record of the first.
    assert violations(counts) == {"fifo_violations": 1, "stale_writes": 1}


def test_check_counts_submissions_admitted_out_of_submission_order(
    planned: list[Planned],
) -> None:
    submissions, records = faithful_ledger(planned)
    a, b = (s for s in submissions if s.thread_id == planned[0].thread and s.sequence <= 2)
    others = [s for s in submissions if s is not a and s is not b]
    swapped = [dataclasses.replace(a, sequence=2), dataclasses.replace(b, sequence=1)]
    counts = check(planned, [*others, *swapped], records)
    # Admitted in the wrong order, and (by admission order) served in the wrong order too.
    assert violations(counts) == {"fifo_violations": 1}


def test_check_counts_wrong_outcomes_and_histories(planned: list[Planned]) -> None:
    submissions, records = faithful_ledger(planned)
    completed = next(s for s in submissions if s.outcome == "completed")
    flipped = dataclasses.replace(completed, outcome="failed")
    message = next(r for r in records if r.kind == "message")
    said_twice = dataclasses.replace(message, sequence=10_000)
    counts = check(
        planned,
        [flipped if s is completed else s for s in submissions],
        [*records, said_twice],
    )
    assert counts.wrong_outcomes == 1
    assert counts.wrong_histories == 1
    assert counts.fifo_violations >= 1  # the repeated message comes after later settlements


def test_check_counts_lost_and_duplicate_admissions(planned: list[Planned]) -> None:
    submissions, records = faithful_ledger(planned)
    gone, stuck = submissions[-1], submissions[-2]  # the last thread's last two
    waiting = dataclasses.replace(stuck, state="ready", outcome=None)
    kept = [r for r in records if r.submission_id not in {gone.submission_id, stuck.submission_id}]
    twice = dataclasses.replace(submissions[0], submission_id="s-again", sequence=99)
    counts = check(planned, [*submissions[:-2], waiting, twice], kept)
    assert counts.lost == 2
    assert counts.unsettled_states == {"missing": 1, "ready": 1}
    assert counts.duplicate_admissions == 1


def test_check_counts_stale_writes_and_unexpected_submissions(planned: list[Planned]) -> None:
    submissions, records = faithful_ledger(planned)
    last = max(records, key=lambda r: (r.thread_id, r.sequence))
    stale = dataclasses.replace(last, sequence=last.sequence + 1, epoch=0, kind="note")
    stranger = dataclasses.replace(submissions[0], submission_id="s-x", input=[{"say": "x.0"}])
    counts = check(planned, [*submissions, stranger], [*records, stale])
    assert counts.stale_writes == 1
    assert counts.unexpected_submissions == 1


def test_workload_is_seeded_round_robin_and_fails_only_where_scripted() -> None:
    planned = plan_workload(1000, 50, seed=1)
    assert planned == plan_workload(1000, 50, seed=1)
    assert planned != plan_workload(1000, 50, seed=2)
    assert len({p.key for p in planned}) == 1000
    assert len({p.thread for p in planned}) == 50
    assert 50 > len({p.host for p in planned}) > 25  # some hosts serve two lanes
    failing = [p for p in planned if p.outcome == "failed"]
    assert 50 < len(failing) < 150
    assert all(p.settlement()["outcome"] == p.outcome for p in planned)
    assert all("never" not in str(p.records()) for p in failing)


def test_faults_keep_their_counts_in_a_seeded_order() -> None:
    faults = plan_faults(worker_kills=3, postgres_stops=2, temporal_kills=1, seed=4)
    assert sorted(faults) == ["postgres_stop"] * 2 + ["temporal_kill"] + ["worker_kill"] * 3
    assert faults == plan_faults(worker_kills=3, postgres_stops=2, temporal_kills=1, seed=4)


def test_failpoints_fired_counts_the_failed_passes_they_caused(tmp_path: Path) -> None:
    log = tmp_path / "worker0.stderr"
    log.write_text(
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h1: FailpointError: claim\n"
        "threadwarden.failpoints.FailpointError: claim\n"
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h2: attempt failed"
        " (FailpointError: attempt:append) ({'attempt': 1})\n"
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h2: FailpointError: claim\n"
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h3: OSError: gone\n"
        "2026-12-01 WARNING temporalio.activity: lease renewal of attempt a1 failed, retrying:"
        " FailpointError('attempt:renew') ({'attempt': 1})\n"
    )
    fired = failpoints_fired([log, tmp_path / "absent"])
    assert fired == {"attempt:append": 1, "attempt:renew": 1, "claim": 2}


def test_flags_default_to_the_full_run_and_refuse_bad_values(tmp_path: Path) -> None:
    options = parse_args([])
    assert (options.submissions, options.threads, options.workers) == (1000, 50, 3)
    assert (options.postgres_stops, options.failpoints) == (2, DEFAULT_FAILPOINTS)
    for bad in (
        ["--workers", "9"],
        ["--failpoints", "nowhere=0.5"],
        ["--failpoints", "claim=0.1:seed=3"],
        ["--submissions", "0"],
    ):
        with pytest.raises(SystemExit) as stop:
            parse_args(bad)
        assert stop.value.code == 2
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("")
    with pytest.raises(SystemExit):
        parse_args(["--keep", str(tmp_path / "used")])
    assert parse_args(["--failpoints", "", "--json"]).failpoints == ""
