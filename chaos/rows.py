"""The ledger's rows as the chaos check reads them, and the index it reads them through.

`chaos.ledger` reads the rows with plain SQL; a test writes them by hand. A submission is
recognised by its input (`workload_key`), not by its idempotency key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from chaos.planned import Ids, Linked, Planned, all_planned


@dataclass(frozen=True)
class SubmissionRow:
    """A submission (``threadwarden.submissions``); ``input`` decoded."""

    submission_id: str
    thread_id: str
    sequence: int
    input: Any
    state: str
    outcome: str | None
    epoch: int
    parent_submission_id: str | None = None
    parent_call_step: int | None = None
    source_message_id: str | None = None
    """The message a delivery admitted it from."""


@dataclass(frozen=True)
class RecordRow:
    """A canonical record (``threadwarden.records``); ``body`` decoded."""

    thread_id: str
    sequence: int
    submission_id: str
    kind: str
    body: Any
    epoch: int
    step: int | None = None
    record_id: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class MarkerRow:
    """A child-settled marker (``threadwarden.child_settlements``)."""

    parent_submission_id: str
    child_submission_id: str
    outcome: str


Row = TypeVar("Row", SubmissionRow, RecordRow)


def workload_key(row: SubmissionRow) -> str | None:
    """The workload key in a submission's input (its first step's ``say``, or a framework
    agent's ``prompt``), or None."""
    steps = row.input
    if isinstance(steps, dict):
        key = steps.get("prompt")
        return key if isinstance(key, str) else None
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        key = steps[0].get("say")
        return key if isinstance(key, str) else None
    return None


def child_thread_for(parent_submission_id: str, step: int) -> str:
    """The thread threadwarden derives for a call's child (docs/protocol.md)."""
    return f"child_{parent_submission_id.removeprefix('sub_')}_{step}"


class LedgerIndex:
    """The rows, indexed the ways the check reads them."""

    def __init__(
        self,
        planned: Sequence[Planned],
        submissions: Sequence[SubmissionRow],
        records: Sequence[RecordRow],
    ) -> None:
        self.wanted = {p.key: p for p in all_planned(list(planned))}
        self.by_id = {row.submission_id: row for row in submissions}
        self.by_key: dict[str, list[SubmissionRow]] = defaultdict(list)
        self.linked: dict[tuple[str, int], list[SubmissionRow]] = defaultdict(list)
        for row in submissions:
            self.by_key[workload_key(row) or f"?{row.submission_id}"].append(row)
            if row.parent_submission_id is not None and row.parent_call_step is not None:
                self.linked[(row.parent_submission_id, row.parent_call_step)].append(row)
        self.of_submission: dict[str, list[RecordRow]] = defaultdict(list)
        for record in sorted(records, key=lambda r: (r.thread_id, r.sequence)):
            self.of_submission[record.submission_id].append(record)

    def settlements(self, submission_id: str) -> list[RecordRow]:
        return [r for r in self.of_submission.get(submission_id, []) if r.kind == "settlement"]

    def child(self, parent: SubmissionRow, plan: Planned) -> SubmissionRow | None:
        """The one child linked to ``parent``'s call at ``plan.call_step`` (None: none, or
        more than one)."""
        assert plan.call_step is not None
        rows = self.linked.get((parent.submission_id, plan.call_step), [])
        return rows[0] if len(rows) == 1 else None

    def link(self, parent: SubmissionRow, plan: Planned) -> Linked | None:
        """The child of ``parent``'s call ``plan`` as the parent's records must name it."""
        row = self.child(parent, plan)
        if row is None:
            return None
        assert plan.call_step is not None
        thread = plan.thread or child_thread_for(parent.submission_id, plan.call_step)
        settled = self.settlements(row.submission_id)
        return Linked(
            row.submission_id,
            thread,
            plan.host or thread,
            record_id(settled[0]) if len(settled) == 1 else None,
        )

    def ids(self, plan: Planned, row: SubmissionRow) -> Ids:
        """What ``row`` (a submission of ``plan``) names that only the ledger knows."""
        children: dict[int, Linked] = {}
        for child in plan.children:
            link = self.link(row, child)
            if link is not None and child.call_step is not None:
                children[child.call_step] = link
        parent = self.by_id.get(row.parent_submission_id or "")
        parent_plan = self.wanted.get(plan.parent or "")
        if (
            parent is None
            or parent_plan is None
            or parent_plan.thread is None
            or workload_key(parent) != parent_plan.key  # linked to another submission's call
        ):
            return Ids(row.submission_id, children)
        thread = parent_plan.thread
        linked = Linked(parent.submission_id, thread, parent_plan.host or thread)
        return Ids(row.submission_id, children, linked)


def record_id(record: RecordRow) -> str:
    """The record's id (a hand-made row without one: its thread and sequence)."""
    return record.record_id or f"{record.thread_id}:{record.sequence}"
