"""The host-level transactions of a maintenance pass: begin, recovery, selection, finish, rearm.

Each locks the host row, and every step after begin first checks the pass epoch: a step from a
replaced pass raises `StalePass` and writes nothing. The decisions themselves are the pure
functions of `threadwarden.protocol.decisions`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import asyncpg
from pydantic import BaseModel

from threadwarden.errors import StalePass
from threadwarden.ledger.child_settled import lock_hosts
from threadwarden.ledger.deadlines import DEADLINES, AuxiliaryDue, auxiliary_due_of
from threadwarden.ledger.models import (
    STABLE_WAITS,
    binding_retries_from_json,
    binding_retries_to_json,
    from_ms,
    retry_from_json,
    retry_to_json,
    to_ms,
)
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.recovery import Recovery, recover_host
from threadwarden.ledger.status import children_awaited, latest_wait, waiting_for
from threadwarden.protocol import decisions as d
from threadwarden.protocol.passes import HeadView, PassReport, Selection

_STALLED_PARENT_HOSTS = """
SELECT DISTINCT pt.host_id
  FROM threadwarden.submissions s
  JOIN threadwarden.threads t ON t.thread_id = s.thread_id
  JOIN threadwarden.submissions p ON p.submission_id = s.parent_submission_id
  JOIN threadwarden.threads pt ON pt.thread_id = p.thread_id
 WHERE t.host_id = $1 AND s.state IN ('running', 'terminalizing')
   AND pt.host_id <> $1
"""
"""The hosts of the parents of this host's stalled children (recovery may settle them)."""
_HOST_COLUMNS = """
dirty, processed, nonterminal, retry, binding_retries, last_served_thread_id, pass_epoch, alarm_at
"""
LOCK_HOST = f"""
SELECT {_HOST_COLUMNS} FROM threadwarden.hosts h WHERE host_id = $1 FOR UPDATE
"""
LOCK_HOST_WITH_DEADLINES = f"""
SELECT {_HOST_COLUMNS}, {DEADLINES} FROM threadwarden.hosts h WHERE host_id = $1 FOR UPDATE
"""
"""For the steps that set the alarm (begin, finish, rearm): the host row and its deadlines."""
_HEADS_JSON = """
(SELECT json_agg(json_build_object('thread_id', x.thread_id, 'submission_id', x.submission_id,
                                   'state', x.state, 'agent_id', x.agent_id,
                                   'agent_digest', x.agent_digest, 'handed_off', x.handed_off)
                   ORDER BY x.thread_id)
   FROM (SELECT DISTINCT ON (s.thread_id) s.thread_id, s.submission_id, s.state, s.agent_id,
                s.agent_digest, s.handed_off
           FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
          WHERE t.host_id = h.host_id AND s.state <> 'settled'
          ORDER BY s.thread_id, s.sequence) x)
"""
"""The host's lane heads, in thread order (byte order: the ids are ``COLLATE "C"``)."""
BEGIN = f"""
INSERT INTO threadwarden.hosts AS h (host_id, pass_epoch, alarm_at) VALUES ($1, 1, $2)
ON CONFLICT (host_id) DO UPDATE
   SET pass_epoch = h.pass_epoch + 1, alarm_at = LEAST(h.alarm_at, EXCLUDED.alarm_at),
       updated_at = clock_timestamp()
RETURNING {_HOST_COLUMNS}, {DEADLINES},
       CASE WHEN h.dirty > h.processed THEN {_HEADS_JSON} END AS heads
"""
"""Begin in one statement: bump the pass epoch, pre-arm, read the host row, its deadlines and
(only when it has new work) its lane heads. O(1) in the ledger's size when caught up."""
_READ_WITH_REMAINING = f"""
SELECT {_HOST_COLUMNS}, updated_at, {DEADLINES},
       (SELECT json_agg(json_build_object('thread_id', s.thread_id,
                                          'submission_id', s.submission_id, 'state', s.state,
                                          'agent_id', s.agent_id,
                                          'parent_submission_id', s.parent_submission_id,
                                          'wait', {latest_wait("s")})
                        ORDER BY s.thread_id, s.sequence)
          FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
         WHERE t.host_id = h.host_id AND s.state <> 'settled') AS remaining
  FROM threadwarden.hosts h WHERE host_id = $1
"""
"""The finish's read: the host row (with its version, ``updated_at``), its deadlines and every
nonterminal row (a suspended one with its latest wait: an approval or its children)."""
_LOCK_WITH_REMAINING = _READ_WITH_REMAINING + " FOR UPDATE"
LOCK_WITH_HEADS = f"""
SELECT {_HOST_COLUMNS}, {_HEADS_JSON} AS heads
  FROM threadwarden.hosts h WHERE host_id = $1 FOR UPDATE
"""
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


class Head(BaseModel):
    """The first nonterminal submission of a thread."""

    thread_id: str
    submission_id: str
    state: str
    agent_id: str
    agent_digest: str | None = None
    handed_off: bool = False


class HostView(BaseModel):
    """What selection needs of the host row, as begin read it."""

    last_served: str | None
    binding_retries: list[d.BindingRetry]
    heads: list[Head]

    @property
    def stalled(self) -> bool:
        """Some head is running or mid-settlement: recovery has work to classify."""
        return any(h.state in ("running", "terminalizing") for h in self.heads)


FINISH_TRIES = 3
"""Optimistic finishes before the finish locks the host row instead."""


class BeginResult(BaseModel):
    epoch: int
    generation: int
    caught_up: bool
    stalls: int
    nonterminal: int
    due: AuxiliaryDue
    """The auxiliary deadlines read with the host row."""
    view: HostView | None = None
    """The lane heads and selection state, read only when the host had new work."""


HEADS_SHOWN = 10
"""Lane heads a finish reports (for the host workflow's current details in the Temporal UI)."""


def _head_detail(head: dict[str, Any], retries: Sequence[d.BindingRetry]) -> HeadView:
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


class Maintenance:
    """Host-row transactions for the pass steps."""

    def __init__(self, pool: asyncpg.Pool[Any], timing: d.Timing) -> None:
        self._pool = pool
        self._timing = timing

    async def begin(self, host_id: str, now: datetime) -> BeginResult:
        """Bump the pass epoch, observe the generation, pre-arm; O(1) whatever the ledger size."""
        now_ms = to_ms(now)
        row = await self._pool.fetchrow(
            BEGIN, host_id, from_ms(now_ms + self._timing.minimum_alarm_delay)
        )
        assert row is not None
        dirty, processed = int(row["dirty"]), int(row["processed"])
        retry = retry_from_json(row["retry"])
        live = d.current_retry(retry, dirty)
        view = None
        if row["heads"] is not None or dirty > processed:
            view = HostView(
                last_served=row["last_served_thread_id"],
                binding_retries=binding_retries_from_json(row["binding_retries"]),
                heads=[Head(**h) for h in row["heads"] or []],
            )
        return BeginResult(
            epoch=int(row["pass_epoch"]),
            generation=dirty,
            caught_up=d.is_caught_up(dirty=dirty, processed=processed, retry=retry, now=now_ms),
            stalls=live.stalls if live else 0,
            nonterminal=int(row["nonterminal"]),
            due=auxiliary_due_of(row),
            view=view,
        )

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
            row = await _lock_fenced(conn, host_id, epoch, deadlines=True, remaining=heads)
            dirty, processed = int(row["dirty"]), int(row["processed"])
            plan = d.plan_caught_up_alarm(
                dirty=dirty,
                processed=processed,
                retry=retry_from_json(row["retry"]),
                deadline=auxiliary_due_of(row).earliest(extra_deadline),
                now=to_ms(now),
                timing=self._timing,
                generation=generation,
            )
            alarm_at = _alarm_at(plan, row["alarm_at"])
            await conn.execute(_SET_ALARM, host_id, epoch, alarm_at, "caught-up", None, None)
        return PassReport(
            outcome="caught-up",
            generation=dirty,
            processed=processed,
            nonterminal=int(row["nonterminal"]),
            alarm_at=alarm_at,
            heads=_shown_heads(row)[0] if heads else None,
            reported_at=now,
        )

    async def recover(self, host_id: str, epoch: int) -> Recovery:
        """Classify every stalled head before any new claim (see `threadwarden.ledger.recovery`).

        Settling a stalled child records its marker on its parent's host: the parents' hosts
        that sort before this one are locked first, so every host is taken in byte order (the
        others are taken by the marker, after this one). The stalled rows cannot change
        meanwhile: only this pass (its epoch) may claim or reserve on this host.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            parents = [r["host_id"] for r in await conn.fetch(_STALLED_PARENT_HOSTS, host_id)]
            before = [parent for parent in parents if parent < host_id]
            if before:
                await lock_hosts(conn, before)
            await _lock_fenced(conn, host_id, epoch)
            return await recover_host(conn, host_id)

    async def select_lane(
        self,
        host_id: str,
        epoch: int,
        now: datetime,
        view: HostView | None = None,
        *,
        head_wait_ms: int = 0,
    ) -> Selection:
        """Round-robin over eligible heads; the cursor is persisted every time one is picked.

        Binding retries of submissions no longer at their thread's head are ignored; threads
        whose head is in binding backoff are skipped until its ``not_before``. ``view`` is what
        begin read (then only the cursor is written, fenced); without it the host row and the
        heads are read here.

        A pick also keeps the alarm at least ``head_wait_ms`` ahead: the selected head may wait
        that long on its agent's task queue before an attempt holds a lease, and the sweeper
        must not wake a host whose pass is still waiting for it (the finish sets the alarm anew).
        """
        # No transaction: selection is advisory (the claim re-checks the head) and the one
        # write, the cursor, is fenced by the pass epoch in its own statement.
        if view is None:
            async with self._pool.acquire() as conn:
                row = await _lock_fenced(conn, host_id, epoch, heads=True)
            view = HostView(
                last_served=row["last_served_thread_id"],
                binding_retries=binding_retries_from_json(row["binding_retries"]),
                heads=[Head(**h) for h in row["heads"] or []],
            )
        heads = view.heads
        eligible = [h.thread_id for h in heads if h.state not in STABLE_WAITS]
        head_of = {h.thread_id: h.submission_id for h in heads}
        by_thread = {h.thread_id: h for h in heads}
        current = [r for r in view.binding_retries if head_of.get(r.thread_id) == r.submission_id]
        blocked_until = {r.thread_id: r.not_before for r in current}
        picked = d.select_lane(
            eligible,
            last_served=view.last_served,
            blocked_until=blocked_until,
            selection_time=to_ms(now),
        )
        others = [blocked_until.get(t, to_ms(now)) for t in eligible if t != picked]
        other_lanes_at = from_ms(min(others)) if others else None
        if picked is not None:
            status = await self._pool.execute(
                "UPDATE threadwarden.hosts SET last_served_thread_id = $3,"
                " alarm_at = GREATEST(alarm_at, $4)"
                " WHERE host_id = $1 AND pass_epoch = $2",
                host_id,
                epoch,
                picked,
                from_ms(to_ms(now) + head_wait_ms),
            )
            if status != "UPDATE 1":
                raise StalePass(f"host {host_id}: pass epoch {epoch} is stale")
        if picked is None:
            return Selection(thread_id=None, other_lanes_at=other_lanes_at)
        return Selection(
            thread_id=picked,
            submission_id=head_of[picked],
            agent_id=by_thread[picked].agent_id,
            agent_digest=by_thread[picked].agent_digest,
            handed_off=by_thread[picked].handed_off,
            binding_retry_pending=any(r.thread_id == picked for r in current),
            other_lanes_at=other_lanes_at,
        )

    async def record_binding_result(
        self,
        host_id: str,
        epoch: int,
        *,
        thread_id: str,
        submission_id: str,
        failed: bool,
        now: datetime,
    ) -> tuple[d.BindingRetry | None, bool]:
        """Replace this submission's binding-retry entry (success removes it).

        Idempotent within the pass: a failure already recorded at this epoch (the pass's
        step re-ran after its result was lost) counts once.

        Returns the new entry and whether this failure should be reported at error level.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            row = await _lock_fenced(conn, host_id, epoch)
            entries = binding_retries_from_json(row["binding_retries"])
            previous = next((e for e in entries if e.submission_id == submission_id), None)
            if failed and previous is not None and previous.epoch == epoch:
                return previous, False
            entry, report = d.plan_binding_retry(
                previous,
                thread_id=thread_id,
                submission_id=submission_id,
                failed=failed,
                now=to_ms(now),
            )
            if entry is not None:
                entry = dataclasses.replace(entry, epoch=epoch)
            kept = [e for e in entries if e.submission_id != submission_id]
            if entry is not None:
                kept.append(entry)
            await conn.execute(
                "UPDATE threadwarden.hosts SET binding_retries = $2 WHERE host_id = $1",
                host_id,
                binding_retries_to_json(kept),
            )
        return entry, report

    async def finish(
        self,
        host_id: str,
        epoch: int,
        *,
        generation: int,
        stalls: int,
        progressed: bool,
        now: datetime,
        jitter: float,
        extra_deadline: datetime | None = None,
        selected: str | None = None,
        other_lanes_at: datetime | None = None,
    ) -> PassReport:
        """Acknowledge only the observed generation; keep the alarm while work remains.

        The binding delay is taken over the lanes eligible before the attempt: ``selected``
        (the head the pass selected, whose binding-retry entry is read as the attempt left
        it) and ``other_lanes_at`` (`Selection.other_lanes_at`); neither: no lane was eligible.

        Optimistic: read, decide, then write only if the host row is as read (its epoch and
        ``updated_at``, which every mutation of the host moves), in two autocommit statements;
        when something wrote in between, decide again, and after `FINISH_TRIES` lock the row.
        """
        decide = functools.partial(
            self._plan_finish,
            generation=generation,
            stalls=stalls,
            progressed=progressed,
            now_ms=to_ms(now),
            jitter=jitter,
            extra_deadline=extra_deadline,
            selected=selected,
            other_lanes_at=other_lanes_at,
        )
        for _ in range(FINISH_TRIES):
            async with self._pool.acquire() as conn:
                row = await _read_fenced(conn, host_id, epoch, _READ_WITH_REMAINING)
                report, args = decide(row)
                status = await conn.execute(
                    _SET_FINISH + " AND updated_at = $8", host_id, epoch, *args, row["updated_at"]
                )
            if status == "UPDATE 1":
                return report
        async with self._pool.acquire() as conn, conn.transaction():
            row = await _lock_fenced(conn, host_id, epoch, remaining=True)
            report, args = decide(row)
            await conn.execute(_SET_FINISH, host_id, epoch, *args)
        return report

    def _plan_finish(
        self,
        row: asyncpg.Record,
        *,
        generation: int,
        stalls: int,
        progressed: bool,
        now_ms: int,
        jitter: float,
        extra_deadline: datetime | None,
        selected: str | None,
        other_lanes_at: datetime | None,
    ) -> tuple[PassReport, list[Any]]:
        """The finish's decision on the host row as read: its report and `_SET_FINISH`'s values."""
        remaining: list[dict[str, Any]] = row["remaining"] or []
        shown, retries = _shown_heads(row)
        stored = binding_retries_from_json(row["binding_retries"])
        next_eligible = [] if other_lanes_at is None else [to_ms(other_lanes_at)]
        if selected is not None:
            entry = next((r for r in stored if r.submission_id == selected), None)
            next_eligible.append(now_ms if entry is None else entry.not_before)
        plan = d.plan_native_finish(
            generation=generation,
            stalls=stalls,
            dirty=int(row["dirty"]),
            processed=int(row["processed"]),
            autonomous=is_autonomous(remaining),
            progressed=progressed,
            binding_delay=d.binding_delay(next_eligible, now_ms),
            deadline=auxiliary_due_of(row).earliest(extra_deadline),
            now=now_ms,
            jitter=jitter,
            timing=self._timing,
        )
        alarm_at = _alarm_at(plan.alarm, row["alarm_at"])
        report = PassReport(
            outcome="actionable",
            generation=int(row["dirty"]),
            processed=plan.processed,
            nonterminal=len(remaining),
            alarm_at=alarm_at,
            progressed=progressed,
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
            row = await _lock_fenced(conn, host_id, epoch, deadlines=True)
            dirty = int(row["dirty"])
            recorded = retry_from_json(row["retry"])
            if recorded is not None and recorded.epoch == epoch:
                return PassReport(
                    outcome="failed",
                    generation=dirty,
                    processed=int(row["processed"]),
                    nonterminal=int(row["nonterminal"]),
                    alarm_at=row["alarm_at"],
                    reported_at=now,
                )
            retry = d.plan_failure_retry(
                recorded,
                generation=generation,
                native_only=native_only,
                now=now_ms,
                jitter=jitter,
                timing=self._timing,
            )
            retry = dataclasses.replace(retry, epoch=epoch)
            plan = d.plan_failure_alarm(
                retry,
                dirty=dirty,
                deadline=auxiliary_due_of(row).earliest(extra_deadline),
                now=now_ms,
                timing=self._timing,
            )
            alarm_at = _alarm_at(plan, row["alarm_at"])
            await conn.execute(
                _SET_ALARM, host_id, epoch, alarm_at, "failed", retry_to_json(retry), error
            )
        return PassReport(
            outcome="failed",
            generation=dirty,
            processed=int(row["processed"]),
            nonterminal=int(row["nonterminal"]),
            alarm_at=alarm_at,
            reported_at=now,
        )


def _shown_heads(row: asyncpg.Record) -> tuple[list[HeadView], list[d.BindingRetry]]:
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


async def _read_fenced(conn: Connection, host_id: str, epoch: int, query: str) -> asyncpg.Record:
    row = await conn.fetchrow(query, host_id)
    if row is None or int(row["pass_epoch"]) != epoch:
        found = None if row is None else row["pass_epoch"]
        raise StalePass(f"host {host_id}: pass epoch {epoch} is stale (current {found})")
    return cast(asyncpg.Record, row)


async def _lock_fenced(
    conn: Connection,
    host_id: str,
    epoch: int,
    *,
    deadlines: bool = False,
    heads: bool = False,
    remaining: bool = False,
) -> asyncpg.Record:
    if remaining:
        query = _LOCK_WITH_REMAINING
    elif heads:
        query = LOCK_WITH_HEADS
    else:
        query = LOCK_HOST_WITH_DEADLINES if deadlines else LOCK_HOST
    return await _read_fenced(conn, host_id, epoch, query)


def _alarm_at(plan: d.AlarmPlan, current: datetime | None) -> datetime | None:
    """The alarm a plan leaves: ``ensure`` keeps an earlier one, ``clear`` removes it."""
    if plan.action == "clear":
        return None
    assert plan.at is not None
    alarm_at = from_ms(plan.at)
    if plan.action == "ensure" and current is not None:
        return min(current, alarm_at)
    return alarm_at
