"""The steps that open a pass: begin, recovery, lane selection and the binding-retry record.

Each locks the host row, and every step after begin first checks the pass epoch
(`threadwarden.ledger.pass_fence`): a step from a replaced pass raises `StalePass` and writes
nothing. The decisions themselves are the pure functions of `threadwarden.protocol.decisions`.
The steps that end a pass (finish, rearm) are `PassFinish`, which `Maintenance` extends.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

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
    to_ms,
)
from threadwarden.ledger.pass_fence import HOST_COLUMNS, read_fenced
from threadwarden.ledger.pass_finish import PassFinish
from threadwarden.ledger.recovery import Recovery, recover_host
from threadwarden.protocol import decisions
from threadwarden.protocol.passes import Selection

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
LOCK_HOST = f"""
SELECT {HOST_COLUMNS} FROM threadwarden.hosts h WHERE host_id = $1 FOR UPDATE
"""
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
RETURNING {HOST_COLUMNS}, {DEADLINES},
       CASE WHEN h.dirty > h.processed THEN {_HEADS_JSON} END AS heads
"""
"""Begin in one statement: bump the pass epoch, pre-arm, read the host row, its deadlines and
(only when it has new work) its lane heads. O(1) in the ledger's size when caught up."""
LOCK_WITH_HEADS = f"""
SELECT {HOST_COLUMNS}, {_HEADS_JSON} AS heads
  FROM threadwarden.hosts h WHERE host_id = $1 FOR UPDATE
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
    binding_retries: list[decisions.BindingRetry]
    heads: list[Head]

    @classmethod
    def of_row(cls, row: asyncpg.Record) -> HostView:
        """From a host row read with its lane heads (`BEGIN`, `LOCK_WITH_HEADS`)."""
        return cls(
            last_served=row["last_served_thread_id"],
            binding_retries=binding_retries_from_json(row["binding_retries"]),
            heads=[Head(**h) for h in row["heads"] or []],
        )

    @property
    def stalled(self) -> bool:
        """Some head is running or mid-settlement: recovery has work to classify."""
        return any(h.state in ("running", "terminalizing") for h in self.heads)


class BeginResult(BaseModel):
    """What begin observed: the new pass epoch, the generation, whether the host is caught up."""

    epoch: int
    generation: int
    caught_up: bool
    stalls: int
    nonterminal: int
    due: AuxiliaryDue
    """The auxiliary deadlines read with the host row."""
    view: HostView | None = None
    """The lane heads and selection state, read only when the host had new work."""


class Maintenance(PassFinish):
    """Host-row transactions for the pass steps: those that open a pass, and (`PassFinish`)
    those that end it."""

    async def begin(self, host_id: str, now: datetime) -> BeginResult:
        """Bump the pass epoch, observe the generation, pre-arm; O(1) whatever the ledger size."""
        now_ms = to_ms(now)
        row = await self._pool.fetchrow(
            BEGIN, host_id, from_ms(now_ms + self._timing.minimum_alarm_delay)
        )
        assert row is not None
        dirty, processed = int(row["dirty"]), int(row["processed"])
        retry = retry_from_json(row["retry"])
        live = decisions.current_retry(retry, dirty)
        has_work = row["heads"] is not None or dirty > processed
        # The heads come from the statement's snapshot, taken before it waited for the host
        # row; the row itself is its newest version. An admission that committed during the
        # wait is counted (``nonterminal``) but its submission unseen: no heads for unsettled
        # work means such a snapshot, and selection reads the heads again.
        seen = row["heads"] is not None or not int(row["nonterminal"])
        return BeginResult(
            epoch=int(row["pass_epoch"]),
            generation=dirty,
            caught_up=decisions.is_caught_up(
                dirty=dirty, processed=processed, retry=retry, now=now_ms
            ),
            stalls=live.stalls if live else 0,
            nonterminal=int(row["nonterminal"]),
            due=auxiliary_due_of(row),
            view=HostView.of_row(row) if has_work and seen else None,
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
            await read_fenced(conn, host_id, epoch, LOCK_HOST)
            return await recover_host(conn, host_id)

    async def select_lane(
        self,
        host_id: str,
        epoch: int,
        now: datetime,
        view: HostView | None = None,
        *,
        head_wait_ms: int = 0,
        persist: bool = True,
    ) -> Selection:
        """Round-robin over eligible heads; the cursor is persisted every time one is picked
        (`serve_lane`), here or (``persist`` False: the caller's choice, for a head claimed at
        once) by the claim's own statement.

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
                row = await read_fenced(conn, host_id, epoch, LOCK_WITH_HEADS)
            view = HostView.of_row(row)
        heads = view.heads
        eligible = [h.thread_id for h in heads if h.state not in STABLE_WAITS]
        head_of = {h.thread_id: h.submission_id for h in heads}
        by_thread = {h.thread_id: h for h in heads}
        current = [r for r in view.binding_retries if head_of.get(r.thread_id) == r.submission_id]
        blocked_until = {r.thread_id: r.not_before for r in current}
        picked = decisions.select_lane(
            eligible,
            last_served=view.last_served,
            blocked_until=blocked_until,
            selection_time=to_ms(now),
        )
        others = [blocked_until.get(t, to_ms(now)) for t in eligible if t != picked]
        other_lanes_at = from_ms(min(others)) if others else None
        if picked is None:
            return Selection(thread_id=None, other_lanes_at=other_lanes_at)
        if persist:
            await self.serve_lane(host_id, epoch, picked, from_ms(to_ms(now) + head_wait_ms))
        return Selection(
            thread_id=picked,
            submission_id=head_of[picked],
            agent_id=by_thread[picked].agent_id,
            agent_digest=by_thread[picked].agent_digest,
            handed_off=by_thread[picked].handed_off,
            binding_retry_pending=any(r.thread_id == picked for r in current),
            other_lanes_at=other_lanes_at,
        )

    async def serve_lane(self, host_id: str, epoch: int, thread_id: str, until: datetime) -> None:
        """Persist a pick: the round-robin cursor, and the alarm kept at least ``until`` (fenced
        by the pass epoch in its one statement)."""
        status = await self._pool.execute(
            "UPDATE threadwarden.hosts SET last_served_thread_id = $3,"
            " alarm_at = GREATEST(alarm_at, $4)"
            " WHERE host_id = $1 AND pass_epoch = $2",
            host_id,
            epoch,
            thread_id,
            until,
        )
        if status != "UPDATE 1":
            raise StalePass(f"host {host_id}: pass epoch {epoch} is stale")

    async def record_binding_result(
        self,
        host_id: str,
        epoch: int,
        *,
        thread_id: str,
        submission_id: str,
        failed: bool,
        now: datetime,
    ) -> tuple[decisions.BindingRetry | None, bool]:
        """Replace this submission's binding-retry entry (success removes it).

        Idempotent within the pass: a failure already recorded at this epoch (the pass's
        step re-ran after its result was lost) counts once.

        Returns the new entry and whether this failure should be reported at error level.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            row = await read_fenced(conn, host_id, epoch, LOCK_HOST)
            entries = binding_retries_from_json(row["binding_retries"])
            previous = next((e for e in entries if e.submission_id == submission_id), None)
            if failed and previous is not None and previous.epoch == epoch:
                return previous, False
            entry, report = decisions.plan_binding_retry(
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
