"""A submission an operator's mutation holds: found and locked in the ledger's lock order, then
recorded on, moved on or settled through the mutation gate, and answered for.

Every operator mutation (`threadwarden.ledger.operator`, `threadwarden.ledger.aborts`) works on
one inside its transaction: each write to the submission bumps its host's ``dirty`` and ensures
the alarm (`mark_dirty`), so the caller only wakes the host after commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import asyncpg

from threadwarden.errors import NotFound
from threadwarden.ledger.child_settled import lock_hosts
from threadwarden.ledger.gate import mark_dirty
from threadwarden.ledger.models import ChildSettled
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import insert_record, settle_now
from threadwarden.views import FinalOutcome, OperatorResult

_FIND = """
SELECT t.host_id, s.thread_id, pt.host_id AS parent_host_id
  FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
  LEFT JOIN threadwarden.submissions p ON p.submission_id = s.parent_submission_id
  LEFT JOIN threadwarden.threads pt ON pt.thread_id = p.thread_id
 WHERE s.submission_id = $1
"""
"""The submission's host and thread, and its parent's host when it is a child."""
_LOCK = """
SELECT s.submission_id, s.thread_id, t.host_id, s.state, s.outcome, s.abort_requested
  FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
 WHERE s.submission_id = $1 FOR UPDATE OF s
"""


async def lock_submission(
    conn: Connection, submission_id: str, *, minimum_alarm_delay_ms: int
) -> LockedSubmission:
    """Lock the submission for a mutation, in the lock order used everywhere: hosts, then
    threads, then submissions. A child's settlement also records its marker on the parent's
    host, so a child's and its parent's hosts are taken first, in byte order. Raises
    `NotFound` for an unknown submission."""
    found = await conn.fetchrow(_FIND, submission_id)
    if found is None:
        raise NotFound(f"submission: no submission {submission_id!r}")
    if found["parent_host_id"] is not None:
        await lock_hosts(conn, (found["host_id"], found["parent_host_id"]))
    await conn.execute(
        "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", found["host_id"]
    )
    await conn.execute(
        "SELECT 1 FROM threadwarden.threads WHERE thread_id = $1 FOR UPDATE", found["thread_id"]
    )
    row = await conn.fetchrow(_LOCK, submission_id)
    assert row is not None
    return LockedSubmission(conn, cast(asyncpg.Record, row), minimum_alarm_delay_ms)


@dataclass(frozen=True)
class LockedSubmission:
    """The locked row (``submission_id``, ``thread_id``, ``host_id``, ``state``, ``outcome``,
    ``abort_requested``) and the transaction's connection that holds it."""

    conn: Connection
    row: asyncpg.Record
    minimum_alarm_delay_ms: int

    @property
    def submission_id(self) -> str:
        return cast(str, self.row["submission_id"])

    @property
    def thread_id(self) -> str:
        return cast(str, self.row["thread_id"])

    @property
    def state(self) -> str:
        return cast(str, self.row["state"])

    async def record(self, kind: str, body: Any, epoch: int, step: int | None) -> None:
        """Append a canonical record of the submission (a decision, an answer, a resolution)."""
        await insert_record(
            self.conn,
            thread_id=self.thread_id,
            submission_id=self.submission_id,
            kind=kind,
            body=body,
            epoch=epoch,
            step=step,
        )

    async def move(self, state: str) -> OperatorResult:
        """Move the submission to ``state`` (it resumes or waits again)."""
        await self.conn.execute(
            "UPDATE threadwarden.submissions SET state = $2 WHERE submission_id = $1",
            self.submission_id,
            state,
        )
        await self.mark_dirty()
        return self.result(state)

    async def settle(self, outcome: FinalOutcome, reason: str, epoch: int) -> OperatorResult:
        """Settle the submission now (`settle_now`); a child's marker wakes its parent's host."""
        marker = await settle_now(
            self.conn,
            thread_id=self.thread_id,
            submission_id=self.submission_id,
            outcome=outcome,
            reason=reason,
            epoch=epoch,
            minimum_alarm_delay_ms=self.minimum_alarm_delay_ms,
        )
        await self.mark_dirty()
        return self.result("settled", outcome, marker=marker)

    async def mark_dirty(self) -> None:
        """The mutation gate on the submission's host."""
        await mark_dirty(
            self.conn, self.row["host_id"], minimum_alarm_delay_ms=self.minimum_alarm_delay_ms
        )

    def result(
        self,
        state: str,
        outcome: str | None = None,
        *,
        changed: bool = True,
        marker: ChildSettled | None = None,
    ) -> OperatorResult:
        """What the mutation did: the submission's ``state`` (and ``outcome``) after it."""
        return OperatorResult(
            submission_id=self.submission_id,
            thread_id=self.thread_id,
            host_id=self.row["host_id"],
            state=state,
            outcome=outcome,
            changed=changed,
            parent_host_id=marker.parent_host_id if marker and marker.recorded else None,
        )

    def unchanged(self) -> OperatorResult:
        """Nothing to do: the submission as it stands."""
        return self.result(self.state, self.row["outcome"], changed=False)
