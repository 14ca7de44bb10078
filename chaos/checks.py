"""The ledger check: what the workload dictated against what Postgres holds, as counts.

Pure functions over rows read with plain SQL (`chaos.ledger`, `chaos.rows`), so a hand-made
ledger state can show that each count catches its violation; each thread's order is counted
in `chaos.thread_order`. A submission is recognised by its input (the
text of its first ``say`` step is its workload key), not by its idempotency key, so a retried
submit that was admitted twice shows up whatever key it carried.

Children (admitted by their parents' calls, not by the run) are planned inside their parents
and checked like every submission (lost, admitted twice, outcome, history, which starts with
their ``lineage``), plus what delegation promises: every call of a settled parent has exactly
one child, which settled exactly once, left exactly one child-settled marker and was joined
exactly once (``call-joined`` at the call's step, naming its real settlement), and no parent
settled before one of its children. The ``call-started`` records of calls awaited together
may commit in any order (their children are established concurrently); each is still checked.

Messages (sent by the workload's long sends, admitted on their destination threads by
threadwarden's delivery) are planned inside their senders and checked like every submission
(lost, admitted twice, outcome, history, FIFO service on their thread), plus their link: each
one's row names its sender's message (``source_message_id``). Where a delivery admits a message
among a thread's own submissions is not dictated: only the run's own submissions must be
admitted in submission order.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from chaos.planned import OPTIONAL_KINDS, Ids, Planned, Record, agent_view, message_of
from chaos.rows import LedgerIndex, MarkerRow, RecordRow, SubmissionRow, record_id, workload_key
from chaos.thread_order import fifo_violations, stale_writes

VIOLATIONS = (
    "lost",
    "duplicate_admissions",
    "duplicate_settlements",
    "fifo_violations",
    "wrong_outcomes",
    "wrong_histories",
    "stale_writes",
    "unexpected_submissions",
    "unjoined_children",
    "duplicate_joins",
    "duplicate_children",
    "parents_settled_before_children",
    "wrong_child_markers",
    "unlinked_messages",
)
"""The counts that must all be 0 for a run to pass."""


@dataclass
class Counts:
    """The check's result; every name in `VIOLATIONS` must be 0."""

    submissions: int = 0
    settled: int = 0
    failed_on_purpose: int = 0
    children: int = 0
    """Children the submissions' calls delegate to (not among ``submissions``)."""
    children_settled: int = 0
    children_failed_on_purpose: int = 0
    agent_turns: int = 0
    """Submissions that are a framework agent's turn (among ``submissions``)."""
    agent_turns_settled: int = 0
    messages: int = 0
    """Messages the submissions' sends admit on other threads (not among ``submissions``)."""
    messages_settled: int = 0
    lost: int = 0
    """Submissions, children and messages that never settled."""
    duplicate_admissions: int = 0
    duplicate_settlements: int = 0
    fifo_violations: int = 0
    wrong_outcomes: int = 0
    wrong_histories: int = 0
    stale_writes: int = 0
    unexpected_submissions: int = 0
    unjoined_children: int = 0
    """Calls of settled parents without exactly one child that settled once and was joined
    once, at the call's step, from its real settlement."""
    duplicate_joins: int = 0
    """``call-joined`` records beyond the first of a (parent, step)."""
    duplicate_children: int = 0
    """Children beyond the first of a (parent, step), or linked to a call no script made."""
    parents_settled_before_children: int = 0
    """Children whose settlement is missing or later than their settled parent's."""
    wrong_child_markers: int = 0
    """Settled children without exactly one marker of their outcome; markers of no child."""
    unlinked_messages: int = 0
    """Message rows that do not name their sender's message as their source."""
    unsettled_states: dict[str, int] = field(default_factory=dict)
    """How many planned submissions (children and messages included) sit in each nonterminal
    state (or ``missing``)."""

    @property
    def clean(self) -> bool:
        return all(getattr(self, name) == 0 for name in VIOLATIONS)


def check(
    planned: Sequence[Planned],
    submissions: Sequence[SubmissionRow],
    records: Sequence[RecordRow],
    markers: Sequence[MarkerRow] = (),
) -> Counts:
    """Count every way the ledger departs from what ``planned`` (submissions, their children
    inside) dictates."""
    ledger = LedgerIndex(planned, submissions, records)
    counts = Counts(
        submissions=len(planned),
        children=sum(len(plan.children) for plan in planned),
        agent_turns=sum(plan.framework for plan in planned),
        messages=sum(len(plan.messages) for plan in planned),
    )
    counts.unexpected_submissions = sum(
        len(rows) for key, rows in ledger.by_key.items() if key not in ledger.wanted
    )
    unsettled: Counter[str] = Counter()
    for plan in ledger.wanted.values():
        rows = ledger.by_key.get(plan.key, [])
        counts.duplicate_admissions += max(0, len(rows) - 1)
        settled = [r for r in rows if r.state == "settled"]
        if not settled:
            counts.lost += 1
            unsettled[rows[0].state if rows else "missing"] += 1
            continue
        counts.agent_turns_settled += plan.framework
        if plan.sender is not None:
            counts.messages_settled += 1
        elif plan.parent is None:
            counts.settled += 1
            counts.failed_on_purpose += plan.outcome == "failed"
        else:
            counts.children_settled += 1
            counts.children_failed_on_purpose += plan.outcome == "failed"
        for row in settled:
            own = ledger.of_submission.get(row.submission_id, [])
            ids = ledger.ids(plan, row)
            counts.wrong_outcomes += _wrong_outcome(plan, row, own, ids)
            history = _history(own)
            if plan.framework:
                history = [agent_view(record) for record in history]
            counts.wrong_histories += not matches(history, plan.records(ids))
            _check_children(ledger, plan, row, counts)
    counts.unsettled_states = dict(sorted(unsettled.items()))
    counts.duplicate_settlements = sum(
        max(0, sum(r.kind == "settlement" for r in own) - 1)
        for own in ledger.of_submission.values()
    )
    counts.duplicate_joins = duplicate_joins(records)
    counts.duplicate_children = duplicate_children(ledger)
    counts.wrong_child_markers = wrong_child_markers(submissions, markers)
    counts.unlinked_messages = unlinked_messages(ledger)
    counts.fifo_violations = fifo_violations(submissions, records)
    counts.stale_writes = stale_writes(submissions, records)
    return counts


def _check_children(ledger: LedgerIndex, plan: Planned, row: SubmissionRow, counts: Counts) -> None:
    """A settled parent's calls: each joined once from its one child's one settlement, which
    came first."""
    own = ledger.of_submission.get(row.submission_id, [])
    parent_settled = [r for r in own if r.kind == "settlement"]
    for child_plan in plan.children:
        child = ledger.child(row, child_plan)
        joins = [r for r in own if r.kind == "call-joined" and r.step == child_plan.call_step]
        settled = ledger.settlements(child.submission_id) if child is not None else []
        counts.unjoined_children += (
            child is None
            or child.state != "settled"
            or len(settled) != 1
            or len(joins) != 1
            or not isinstance(joins[0].body, dict)
            or joins[0].body.get("submission_id") != child.submission_id
            or joins[0].body.get("settlement_record_id") != record_id(settled[0])
        )
        counts.parents_settled_before_children += _settled_first(parent_settled, settled)


def _settled_first(parent: Sequence[RecordRow], child: Sequence[RecordRow]) -> bool:
    """Whether the parent has a settlement and its child none, or a later one."""
    if not parent:
        return False
    if not child:
        return True
    first_parent, last_child = parent[0].created_at, child[-1].created_at
    if first_parent is None or last_child is None:
        return False  # no timestamps to compare (a hand-made ledger)
    return last_child > first_parent


def _history(own: Sequence[RecordRow]) -> list[Record]:
    return [(r.kind, r.body) for r in own if r.kind != "settlement"]


def matches(actual: Sequence[Record], expected: Sequence[Record]) -> bool:
    """Whether ``actual`` is ``expected`` with some of its `OPTIONAL_KINDS` records left out
    (never added, moved or changed), but for the order of the ``call-started`` records of calls
    awaited together: they establish their children concurrently, so they commit in any
    order (each at its own step)."""
    actual, expected = _unordered_starts(actual), _unordered_starts(expected)
    i = 0
    for record in expected:
        if i < len(actual) and actual[i] == record:
            i += 1
        elif record[0] not in OPTIONAL_KINDS:
            return False
    return i == len(actual)


def _unordered_starts(records: Sequence[Record]) -> list[Record]:
    """``records`` with each run of consecutive ``call-started`` records in a canonical
    order."""
    ordered: list[Record] = []
    run: list[Record] = []
    for record in [*records, ("", None)]:
        if record[0] == "call-started":
            run.append(record)
            continue
        ordered.extend(sorted(run, key=lambda r: json.dumps(r[1], sort_keys=True)))
        run = []
        ordered.append(record)
    return ordered[:-1]


def _wrong_outcome(plan: Planned, row: SubmissionRow, own: Sequence[RecordRow], ids: Ids) -> bool:
    settlements = [r.body for r in own if r.kind == "settlement"]
    return row.outcome != plan.outcome or plan.settlement(ids) not in settlements


def duplicate_joins(records: Sequence[RecordRow]) -> int:
    """``call-joined`` records beyond the first of each (parent, step)."""
    joins = Counter((r.submission_id, r.step) for r in records if r.kind == "call-joined")
    return sum(n - 1 for n in joins.values())


def duplicate_children(ledger: LedgerIndex) -> int:
    """Children beyond the first of each (parent, step), and children linked to a call no
    script made (a parent not in the workload, or a step its script has no call at)."""
    extra = 0
    for (parent, step), rows in ledger.linked.items():
        extra += len(rows) - 1
        row = ledger.by_id.get(parent)
        plan = ledger.wanted.get(workload_key(row) or "") if row is not None else None
        calls = {c.call_step for c in plan.children} if plan is not None else set()
        extra += step not in calls
    return extra


def wrong_child_markers(submissions: Sequence[SubmissionRow], markers: Sequence[MarkerRow]) -> int:
    """Children whose markers are not exactly one naming their parent and their outcome once
    they settled (none before), and markers naming no child of that parent."""
    children = {
        row.submission_id: row for row in submissions if row.parent_submission_id is not None
    }
    of_child: dict[str, list[tuple[str, str]]] = defaultdict(list)
    wrong = 0
    for marker in markers:
        child = children.get(marker.child_submission_id)
        if child is None or child.parent_submission_id != marker.parent_submission_id:
            wrong += 1
        else:
            of_child[child.submission_id].append((marker.parent_submission_id, marker.outcome))
    for row in children.values():
        want = [(row.parent_submission_id, row.outcome)] if row.state == "settled" else []
        wrong += of_child.get(row.submission_id, []) != want
    return wrong


def unlinked_messages(ledger: LedgerIndex) -> int:
    """Rows of planned messages whose ``source_message_id`` is not their message as their
    sender's row sent it (none: no sender row, or a row admitted from elsewhere)."""
    unlinked = 0
    for plan in ledger.wanted.values():
        if plan.sender is None:
            continue
        senders = ledger.by_key.get(plan.sender, [])
        sent = {message_of(row.submission_id, plan) for row in senders}
        unlinked += sum(
            row.source_message_id not in sent for row in ledger.by_key.get(plan.key, [])
        )
    return unlinked
