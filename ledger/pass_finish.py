"""The steps that end a pass: the finish (caught-up, or after native work) and the failure
rearm. Each sets the host's alarm from a decision of `threadwarden.protocol.decisions` on the
host row as read, records the pass's outcome and reports it (`PassReport`).

Each checks the pass epoch first (`threadwarden.ledger.pass_fence`): a step from a replaced pass
raises `StalePass` and writes nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Required, TypedDict, Unpack

import asyncpg

from threadwarden.ledger.deadlines import DEADLINES, auxiliary_due_of, deadlines
from threadwarden.ledger.models import (
    STABLE_WAITS,
    binding_retries_from_json,
    binding_retries_to_json,
    from_ms,
    retry_from_json,
    retry_to_json,
    to_ms,
)
from threadwarden.ledger.pass_fence import HOST_COLUMNS, fenced, read_fenced
from threadwarden.ledger.status import children_awaited, latest_wait, waiting_for
from threadwarden.protocol import decisions
from threadwarden.protocol.passes import HeadView, PassReport

LOCK_HOST_WITH_DEADLINES = f"""
SELECT {HOST_COLUMNS}, {DEADLINES} FROM threadwarden.hosts h WHERE host_id = $1 FOR UPDATE
"""
"""For the steps that set the alarm (finish, rearm): the host row and its deadlines."""


def finish_view(acknowledged: str | None = None) -> str:
    """The finish's read, as a select list on ``threadwarden.hosts h``: the host row (with its
    version, ``updated_at``), its deadlines (``acknowledged``: `deadlines`) and every
    nonterminal row (a suspended one with its latest wait: an approval or its children)."""
    return f"""
{HOST_COLUMNS}, updated_at, {deadlines(acknowledged)},
       (SELECT json_agg(json_build_object('thread_id', s.thread_id,
                                          'submission_id', s.submission_id, 'state', s.state,
                                          'agent_id', s.agent_id,
                                          'parent_submission_id', s.parent_submission_id,
                                          'wait', {latest_wait("s")})
                        ORDER BY s.thread_id, s.sequence)
          FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
         WHERE t.host_id = h.host_id AND s.state <> 'settled') AS remaining
"""


_READ_WITH_REMAINING = f"SELECT {finish_view()} FROM threadwarden.hosts h WHERE host_id = $1"
"""The finish's read (`finish_view`)."""
_LOCK_WITH_REMAINING = _READ_WITH_REMAINING + " FOR UPDATE"
_SET_FINISH = """
UPDATE threadwarden.hosts
   SET processed = $3, retry = $4, nonterminal = $5, binding_retries = $6, alarm_at = $7,
       last_outcome = 'actionable', last_error = NULL, updated_at = clock_timestamp()
 WHERE host_id = $1 AND pass_epoch = $2
"""
_SET_ALARM = """
UPDATE threadwarden.hosts
   SET alarm_at = $3, last_outcome = $4,
       retry = CASE WHEN $4 = 'failed' THEN $5::jsonb ELSE retry END,
       last_error = CASE WHEN $4 = 'failed' THEN $6 END, updated_at = clock_timestamp()
 WHERE host_id = $1 AND pass_epoch = $2
"""


FINISH_TRIES = 3
"""Optimistic finishes before the finish locks the host row instead."""


HEADS_SHOWN = 10
"""Lane heads a finish reports (for the host workflow's current details in the Temporal UI)."""


def _head_detail(head: dict[str, Any], retries: Sequence[decisions.BindingRetry]) -> HeadView:
    """What a head waits for, as `status` words it (a person, an operator, its binding, its
    children)."""
    wait = head.get("wait")
    blocked = any(r.submission_id == head["submission_id"] for r in retries)
    return HeadView(
        thread_id=head["thread_id"],
        submission_id=head["submission_id"],
        agent_id=head["agent_id"],
        state=head["state"],
        waiting_for=waiting_for(head["state"], wait, blocked),
        parent_submission_id=head.get("parent_submission_id"),
        children=children_awaited(wait),
    )


def is_autonomous(rows: Sequence[asyncpg.Record | dict[str, Any]]) -> bool:
    """Some remaining row needs the pass, ignoring ready followers behind a stable wait."""
    waiting_thread: str | None = None
    for row in rows:  # ordered by thread, then sequence: the first row per thread is the head
        thread, state = row["thread_id"], row["state"]
        if state in STABLE_WAITS:
            waiting_thread = thread
            continue
        if thread == waiting_thread and state in ("ready", "admitted"):
            continue  # dormant: only the waiting head's resolution can move it
        return True
    return False


class FinishRequest(TypedDict, total=False):
    """What a pass that ran native work knows when it finishes (`PassFinish.finish`)."""

    generation: Required[int]
    """The generation begin observed: only it is acknowledged."""
    stalls: Required[int]
    """The live retry's stalls, as begin read them."""
    progressed: Required[bool]
    """Whether the attempt committed progress."""
    now: Required[datetime]
    jitter: Required[float]
    extra_deadline: datetime | None
    """The host plug-in's pending deadline: it joins the alarm."""
    selected: str | None
    """The head the pass selected: its binding-retry entry is read as the attempt left it."""
    other_lanes_at: datetime | None
    """When the other lanes eligible before the attempt are (`Selection.other_lanes_at`)."""
    view: Any
    """The finish's read (`finish_view`) as a statement of the same worker just read it after
    the attempt's last commit (`Publications.publish_committed`): the first try decides on it
    instead of reading again."""


class PassFinish:
    """The host-row transactions that end a pass: finish and rearm."""

    def __init__(self, pool: asyncpg.Pool[Any], timing: decisions.Timing) -> None:
        self._pool = pool
        self._timing = timing

    async def finish_caught_up(
        self,
        host_id: str,
        epoch: int,
        now: datetime,
        *,
        generation: int | None = None,
        extra_deadline: datetime | None = None,
        heads: bool = False,
    ) -> PassReport:
        """Caught-up path: set the alarm to the earliest need, or clear it. No ledger scan,
        unless ``heads`` asks for the lane heads too (for the run's current details).

        ``generation`` is what begin observed; a mutation committed since keeps its prompt alarm.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            row = await read_fenced(
                conn, host_id, epoch, _LOCK_WITH_REMAINING if heads else LOCK_HOST_WITH_DEADLINES
            )
            plan = decisions.plan_caught_up_alarm(
                dirty=int(row["dirty"]),
                processed=int(row["processed"]),
                retry=retry_from_json(row["retry"]),
                deadline=auxiliary_due_of(row).earliest(extra_deadline),
                now=to_ms(now),
                timing=self._timing,
                generation=generation,
            )
            alarm_at = _alarm_at(plan, row["alarm_at"])
            await conn.execute(_SET_ALARM, host_id, epoch, alarm_at, "caught-up", None, None)
        return _report(row, "caught-up", alarm_at, now, _shown_heads(row)[0] if heads else None)

    async def finish(self, host_id: str, epoch: int, **asked: Unpack[FinishRequest]) -> PassReport:
        """Acknowledge only the observed generation; keep the alarm while work remains.

        The binding delay is taken over the lanes eligible before the attempt: ``selected``
        (the head the pass selected, whose binding-retry entry is read as the attempt left
        it) and ``other_lanes_at`` (`Selection.other_lanes_at`); neither: no lane was eligible.

        Optimistic: read, decide, then write only if the host row is as read (its epoch and
        ``updated_at``, which every mutation of the host moves), in two autocommit statements
        (one with ``view``: what the attempt's last statement read); when something wrote in
        between, decide again on a fresh read, and after `FINISH_TRIES` lock the row.
        """
        decide = functools.partial(self._plan_finish, asked=asked)
        view = asked.get("view")
        for _ in range(FINISH_TRIES):
            async with self._pool.acquire() as conn:
                if view is not None:  # read once: as the attempt's last statement saw the host
                    row, view = fenced(view, host_id, epoch), None
                else:
                    row = await read_fenced(conn, host_id, epoch, _READ_WITH_REMAINING)
                report, args = decide(row)
                status = await conn.execute(
                    _SET_FINISH + " AND updated_at = $8", host_id, epoch, *args, row["updated_at"]
                )
            if status == "UPDATE 1":
                return report
        async with self._pool.acquire() as conn, conn.transaction():
            row = await read_fenced(conn, host_id, epoch, _LOCK_WITH_REMAINING)
            report, args = decide(row)
            await conn.execute(_SET_FINISH, host_id, epoch, *args)
        return report

    def _plan_finish(
        self, row: asyncpg.Record, asked: FinishRequest
    ) -> tuple[PassReport, list[Any]]:
        """The finish's decision on the host row as read: its report and `_SET_FINISH`'s values."""
        now_ms = to_ms(asked["now"])
        other_lanes_at, selected = asked.get("other_lanes_at"), asked.get("selected")
        remaining: list[dict[str, Any]] = row["remaining"] or []
        shown, retries = _shown_heads(row)
        stored = binding_retries_from_json(row["binding_retries"])
        next_eligible = [] if other_lanes_at is None else [to_ms(other_lanes_at)]
        if selected is not None:
            entry = next((r for r in stored if r.submission_id == selected), None)
            next_eligible.append(now_ms if entry is None else entry.not_before)
        plan = decisions.plan_native_finish(
            generation=asked["generation"],
            stalls=asked["stalls"],
            dirty=int(row["dirty"]),
            processed=int(row["processed"]),
            autonomous=is_autonomous(remaining),
            progressed=asked["progressed"],
            binding_delay=decisions.binding_delay(next_eligible, now_ms),
            deadline=auxiliary_due_of(row).earliest(asked.get("extra_deadline")),
            now=now_ms,
            jitter=asked["jitter"],
            timing=self._timing,
        )
        alarm_at = _alarm_at(plan.alarm, row["alarm_at"])
        report = PassReport(
            outcome="actionable",
            generation=int(row["dirty"]),
            processed=plan.processed,
            nonterminal=len(remaining),
            alarm_at=alarm_at,
            progressed=asked["progressed"],
            heads=shown,
            reported_at=from_ms(now_ms),
        )
        args = [
            plan.processed,
            retry_to_json(plan.retry),
            len(remaining),
            binding_retries_to_json(retries),
            alarm_at,
        ]
        return report, args

    async def rearm_failure(
        self,
        host_id: str,
        epoch: int,
        *,
        generation: int,
        native_only: bool,
        now: datetime,
        jitter: float,
        error: str,
        extra_deadline: datetime | None = None,
    ) -> PassReport:
        """Record the durable backoff of a failed pass and set its alarm.

        Idempotent within the pass: a retry already recorded at this epoch (the rearm re-ran
        after its result was lost) is reported as it stands, its stalls counted once."""
        now_ms = to_ms(now)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await read_fenced(conn, host_id, epoch, LOCK_HOST_WITH_DEADLINES)
            recorded = retry_from_json(row["retry"])
            if recorded is not None and recorded.epoch == epoch:
                return _report(row, "failed", row["alarm_at"], now)
            retry = decisions.plan_failure_retry(
                recorded,
                generation=generation,
                native_only=native_only,
                now=now_ms,
                jitter=jitter,
                timing=self._timing,
            )
            retry = dataclasses.replace(retry, epoch=epoch)
            plan = decisions.plan_failure_alarm(
                retry,
                dirty=int(row["dirty"]),
                deadline=auxiliary_due_of(row).earliest(extra_deadline),
                now=now_ms,
                timing=self._timing,
            )
            alarm_at = _alarm_at(plan, row["alarm_at"])
            await conn.execute(
                _SET_ALARM, host_id, epoch, alarm_at, "failed", retry_to_json(retry), error
            )
        return _report(row, "failed", alarm_at, now)


def _report(
    row: asyncpg.Record,
    outcome: Literal["caught-up", "failed"],
    alarm_at: datetime | None,
    now: datetime,
    heads: list[HeadView] | None = None,
) -> PassReport:
    """The report of a pass that ends without native work, from the host row as it read it."""
    return PassReport(
        outcome=outcome,
        generation=int(row["dirty"]),
        processed=int(row["processed"]),
        nonterminal=int(row["nonterminal"]),
        alarm_at=alarm_at,
        heads=heads,
        reported_at=now,
    )


def _shown_heads(row: asyncpg.Record) -> tuple[list[HeadView], list[decisions.BindingRetry]]:
    """From a read with ``remaining``: the first `HEADS_SHOWN` lane heads with what each waits
    for, and the binding-retry entries still at a head (the others are pruned)."""
    heads: dict[str, dict[str, Any]] = {}
    for r in row["remaining"] or []:
        heads.setdefault(r["thread_id"], r)
    retries = [
        r
        for r in binding_retries_from_json(row["binding_retries"])
        if r.thread_id in heads and heads[r.thread_id]["submission_id"] == r.submission_id
    ]
    return [_head_detail(h, retries) for h in list(heads.values())[:HEADS_SHOWN]], retries


def _alarm_at(plan: decisions.AlarmPlan, current: datetime | None) -> datetime | None:
    """The alarm a plan leaves: ``ensure`` keeps an earlier one, ``clear`` removes it."""
    if plan.action == "clear":
        return None
    assert plan.at is not None
    alarm_at = from_ms(plan.at)
    if plan.action == "ensure" and current is not None:
        return min(current, alarm_at)
    return alarm_at
