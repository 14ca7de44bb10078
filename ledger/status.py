"""Read-only views of threads and hosts for the CLI and the client."""

from __future__ import annotations

from typing import Any

import asyncpg

from threadwarden.errors import NotFound
from threadwarden.ledger.deadlines import DEADLINES
from threadwarden.ledger.models import from_ms, retry_from_json
from threadwarden.ledger.pool import Connection
from threadwarden.views import (
    AuxiliaryDueView,
    BindingRetryView,
    HostStatus,
    RetryView,
    SubmissionDetail,
    SubmissionView,
    ThreadStatus,
    TurnPage,
    TurnView,
    WaitingFor,
)

TOP_SEQUENCE = 2**63 - 1
"""Above every sequence (``bigint``): ``before`` it is every turn."""

_RECORDS_AFTER = (
    "SELECT sequence, record_id, submission_id, kind, body, epoch"
    "  FROM threadwarden.records WHERE thread_id = $1 AND sequence > $2 ORDER BY sequence"
)


def latest_wait(alias: str) -> str:
    """SQL: what the suspended submission ``alias`` waits for, from its latest wait record.

    A ``suspended`` submission waits for a person's approval (``approval-requested``), a
    person's answer (``input-requested``) or its subagent children (``children-awaited``); the
    latest of those records says which. The value is null unless suspended, else ``{"kind",
    "children"}``: ``children`` lists the children of a ``children-awaited`` wait without a
    settled marker yet, in the wait's order. It reads ``records_by_submission`` backwards (the
    records side compares with the default collation: see `SETTLEMENT_OF`) and
    ``child_settlements_pkey`` per child, and only for suspended rows (a ``CASE`` evaluates the
    subquery only when its branch is taken).
    """
    s = alias
    return f"""
CASE WHEN {s}.state = 'suspended' THEN (
  SELECT json_build_object(
           'kind', w.kind,
           'children', CASE WHEN w.kind = 'children-awaited' THEN (
             SELECT COALESCE(json_agg(c.id ORDER BY c.n), '[]'::json)
               FROM jsonb_array_elements_text(w.body -> 'children') WITH ORDINALITY AS c(id, n)
              WHERE NOT EXISTS (
                SELECT 1 FROM threadwarden.child_settlements m
                 WHERE m.parent_submission_id = {s}.submission_id
                   AND m.child_submission_id = c.id)) END)
    FROM threadwarden.records w
   WHERE w.submission_id = {s}.submission_id COLLATE "default"
     AND w.kind IN ('approval-requested', 'input-requested', 'children-awaited')
   ORDER BY w.sequence DESC LIMIT 1)
END"""


_VIEW_COLUMNS = f"""
       s.submission_id, s.sequence, s.state, s.outcome, s.agent_id, s.attempts, s.epoch,
       s.reason, s.source_thread_id, s.source_message_id, s.created_at, s.settled_at,
       s.parent_submission_id, p.thread_id AS parent_thread_id, {latest_wait("s")} AS wait"""
"""The columns of a `SubmissionView` of the submission ``s`` (``p``: its parent, joined)."""

THREAD_SUBMISSIONS = f"""
SELECT {_VIEW_COLUMNS}
  FROM threadwarden.submissions s
  LEFT JOIN threadwarden.submissions p ON p.submission_id = s.parent_submission_id
 WHERE s.thread_id = $1
 ORDER BY s.sequence
"""
"""A thread's submissions in order, each with its parent's thread (a child) and its latest
wait (a suspended one): one statement, on the thread's submission index, ``submissions_pkey``
per child and `latest_wait`'s indexes per suspended row."""

SUBMISSION = f"""
SELECT {_VIEW_COLUMNS}, s.thread_id, t.host_id, s.interrupted_by, s.input,
       (SELECT r.body FROM threadwarden.records r
         WHERE r.submission_id = $1 AND r.kind = 'settlement') AS settlement,
       EXISTS (SELECT 1 FROM jsonb_array_elements(h.binding_retries) e
                WHERE e ->> 'submission_id' = $1) AS blocked
  FROM threadwarden.submissions s
  JOIN threadwarden.threads t ON t.thread_id = s.thread_id
  JOIN threadwarden.hosts h ON h.host_id = t.host_id
  LEFT JOIN threadwarden.submissions p ON p.submission_id = s.parent_submission_id
 WHERE s.submission_id = $1
"""
"""One submission with its thread and host, its latest wait, its settlement body and whether
it waits for a binding: ``submissions_pkey``, ``records_one_settlement`` (compared with the
parameter: see `SETTLEMENT_OF`), the thread's and host's keys."""

TURNS = f"""
SELECT h.binding_retries, t.next_record - 1 AS last_record, v.*
  FROM threadwarden.threads t
  JOIN threadwarden.hosts h ON h.host_id = t.host_id
  LEFT JOIN LATERAL (
    SELECT {_VIEW_COLUMNS}, s.input,
           (SELECT r.body FROM threadwarden.records r
             WHERE r.submission_id = s.submission_id COLLATE "default"
               AND r.kind = 'settlement') AS settlement
      FROM threadwarden.submissions s
      LEFT JOIN threadwarden.submissions p ON p.submission_id = s.parent_submission_id
     WHERE s.thread_id = $1 AND s.sequence < $2
     ORDER BY s.sequence DESC LIMIT $3) v ON true
 WHERE t.thread_id = $1
 ORDER BY v.sequence DESC
"""
"""The ``$3`` latest submissions of the thread ``$1`` below sequence ``$2``, newest first, each
with its input, its latest wait and its settlement body, beside the host's binding retries and
the thread's latest record sequence (in the same snapshot as the turns): no
row for an unknown thread, one row of nulls for a thread without such submissions. One
statement whatever the thread's length: the thread's and host's keys, the ``(thread_id,
sequence)`` unique index of submissions read backwards and stopped by the limit, then per turn
``submissions_pkey`` (a child's parent), `latest_wait`'s indexes (a suspended one) and
``records_one_settlement`` (compared with the default collation: see `SETTLEMENT_OF`).
tests/console/test_scale.py checks the plan on a thread of 5,000 turns."""

SETTLEMENT_OF = (
    "SELECT s.thread_id, r.body FROM threadwarden.submissions s"
    "  LEFT JOIN threadwarden.records r ON r.submission_id = $1 AND r.kind = 'settlement'"
    " WHERE s.submission_id = $1"
)
"""A submission's thread and settlement body. The records side compares with the parameter,
not with ``s.submission_id``: that column's "C" collation differs from the records column's,
and such a comparison cannot use ``records_one_settlement`` (a scan of every record)."""


class StatusReader:
    """Snapshots of the ledger; no locks taken."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def thread(self, thread_id: str) -> ThreadStatus:
        """A thread's submissions in sequence order."""
        async with self._pool.acquire() as conn:
            host_id = await conn.fetchval(
                "SELECT host_id FROM threadwarden.threads WHERE thread_id = $1", thread_id
            )
            if host_id is None:
                raise NotFound(f"thread: no thread {thread_id!r}")
            rows = await conn.fetch(THREAD_SUBMISSIONS, thread_id)
            retries = await conn.fetchval(
                "SELECT binding_retries FROM threadwarden.hosts WHERE host_id = $1", host_id
            )
        blocked = {r["submission_id"] for r in retries or []}
        return ThreadStatus(
            thread_id=thread_id,
            host_id=host_id,
            submissions=[_submission_view(r, blocked) for r in rows],
        )

    async def submission(self, submission_id: str) -> SubmissionDetail:
        """One submission: state, outcome, what it waits for, reason and result."""
        row = await self._pool.fetchrow(SUBMISSION, submission_id)
        if row is None:
            raise NotFound(f"submission: no submission {submission_id!r}")
        view = _submission_view(row, {submission_id} if row["blocked"] else set())
        return SubmissionDetail(
            **view.model_dump(),
            **{name: row[name] for name in ("thread_id", "host_id", "interrupted_by", "input")},
            result=settled_result(row["settlement"]),
        )

    async def turns(self, thread_id: str, *, limit: int, before: int | None) -> TurnPage:
        """The thread's ``limit`` latest submissions below sequence ``before`` (None: all),
        newest first, as turns of its conversation; one statement (`TURNS`)."""
        below = TOP_SEQUENCE if before is None else before
        rows = await self._pool.fetch(TURNS, thread_id, below, limit + 1)
        if not rows:
            raise NotFound(f"thread: no thread {thread_id!r}")
        blocked = {r["submission_id"] for r in rows[0]["binding_retries"] or []}
        turns = [_turn(row, blocked) for row in rows[:limit] if row["submission_id"] is not None]
        more = len(rows) > limit
        return TurnPage(
            turns=turns,
            next_before=turns[-1].sequence if more else None,
            last_record=rows[0]["last_record"],
        )

    async def host(self, host_id: str) -> HostStatus:
        """A host's maintenance state: generations, alarm, cursor and retry records."""
        row = await self._pool.fetchrow(
            "SELECT host_id, dirty, processed, nonterminal, alarm_at, last_served_thread_id,"
            "       retry, binding_retries, pass_epoch, last_outcome, last_error, updated_at,"
            f"       {DEADLINES}"
            "  FROM threadwarden.hosts h WHERE host_id = $1",
            host_id,
        )
        if row is None:
            raise NotFound(f"host: no host {host_id!r}")
        retry = retry_from_json(row["retry"])
        fields = dict(row)
        fields["auxiliary_due"] = AuxiliaryDueView(
            publication=fields.pop("publication_due"),
            message=fields.pop("message_due"),
            projection=fields.pop("projection_due_at"),
            host_work=fields.pop("host_work_due_at"),
        )
        fields["retry"] = (
            None
            if retry is None
            else RetryView(
                generation=retry.generation,
                not_before=from_ms(retry.not_before),
                native_only=retry.native_only,
                stalls=retry.stalls,
            )
        )
        fields["binding_retries"] = [
            BindingRetryView(
                thread_id=r["thread_id"],
                submission_id=r["submission_id"],
                attempts=r["attempts"],
                not_before=from_ms(r["not_before"]),
                reported_at=from_ms(r["reported_at"]),
            )
            for r in row["binding_retries"]
        ]
        return HostStatus(**fields)

    async def records(self, thread_id: str) -> list[dict[str, Any]]:
        """A thread's canonical records in order."""
        return [dict(r) for r in await self._pool.fetch(_RECORDS_AFTER, thread_id, 0)]


async def records_after(
    conn: Connection | asyncpg.Pool[Any], thread_id: str, after: int, *, limit: int | None = None
) -> list[dict[str, Any]]:
    """The thread's canonical records with a sequence above ``after``, in order (the first
    ``limit`` of them; None: all).

    Sequences commit in order (the thread row is locked from allocation to commit), so a
    reader that remembers the last sequence it saw never skips one. ``conn`` may be a pool (a
    shared reader's one short statement).
    """
    if limit is None:
        return [dict(r) for r in await conn.fetch(_RECORDS_AFTER, thread_id, after)]
    rows = await conn.fetch(_RECORDS_AFTER + " LIMIT $3", thread_id, after, limit)
    return [dict(r) for r in rows]


async def settlement_of(conn: Connection, submission_id: str) -> tuple[str, Any]:
    """The submission's thread and its settlement record's body (None while unsettled).

    Raises `NotFound` for an unknown submission.
    """
    row = await conn.fetchrow(SETTLEMENT_OF, submission_id)
    if row is None:
        raise NotFound(f"submission: no submission {submission_id!r}")
    return row["thread_id"], row["body"]


def settled_result(settlement: Any) -> Any:
    """What the binding returned, from a submission's settlement body (None: not settled, or
    settled without a result)."""
    return settlement.get("result") if isinstance(settlement, dict) else None


def _turn(row: asyncpg.Record, blocked: set[str]) -> TurnView:
    view = _submission_view(row, blocked)
    return TurnView(
        **view.model_dump(include=_TURN_FIELDS),
        agent=view.agent_id,
        input=row["input"],
        result=settled_result(row["settlement"]),
    )


_TURN_FIELDS = {
    "submission_id",
    "sequence",
    "state",
    "outcome",
    "waiting_for",
    "reason",
    "created_at",
    "settled_at",
}
"""The fields a turn takes from its submission's view."""


def _submission_view(row: asyncpg.Record, blocked: set[str]) -> SubmissionView:
    """The view of a row with `_VIEW_COLUMNS` (and others, left out)."""
    fields = {name: row[name] for name in SubmissionView.model_fields if name in row}
    wait = row["wait"]
    waiting = waiting_for(row["state"], wait, row["submission_id"] in blocked)
    if waiting == "binding" and fields["reason"] is None:
        fields["reason"] = binding_wait_reason(row["agent_id"])
    return SubmissionView(
        **fields,
        waiting_for=waiting,
        children=children_awaited(wait) if waiting == "child" else None,
    )


def binding_wait_reason(agent_id: str) -> str:
    """Why a head waits for a binding (``waiting_for`` ``binding``), in plain words."""
    return (
        f"no worker serves agent {agent_id} (at its digest): it waits until one does"
        f" (threadwarden dev --bindings module:bindings, or a worker with that binding)"
    )


def waiting_for(state: str, wait: dict[str, Any] | None, blocked: bool) -> WaitingFor | None:
    """What a submission in ``state`` waits for: ``wait`` is its `latest_wait` value,
    ``blocked`` whether it has a binding-retry entry (no compatible binding yet)."""
    if state == "suspended":
        kind = wait["kind"] if wait else None
        if kind == "children-awaited":
            return "child"
        return "input" if kind == "input-requested" else "approval"
    if state == "unknown":
        return "unknown-resolution"
    if state != "settled" and blocked:
        return "binding"
    return None


def children_awaited(wait: dict[str, Any] | None) -> list[str] | None:
    """The children a `latest_wait` value still waits for (None: not a children wait)."""
    if not wait or wait.get("kind") != "children-awaited":
        return None
    return [str(c) for c in wait.get("children") or []]
