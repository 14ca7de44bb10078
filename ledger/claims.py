"""Claims: taking a thread's head for an attempt, keeping its lease, and giving it back.

A claim bumps the thread's producer epoch and mints an attempt id and ownership token with a
lease; the `Claim` it returns is what every later write of the attempt is fenced by
(`threadwarden.ledger.attempts`). A claim is one statement (with, for an inline head begin runs
at once, the pass's lane selection written in it); renewing, handing off and releasing the head
are one statement each.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.bindings import SUMMARY, ThreadRecord
from threadwarden.errors import BindingDigestMismatch, BindingUnavailable, StalePass
from threadwarden.ledger.history import HISTORY, HISTORY_LIMIT, history_routes

CLAIMABLE = ("admitted", "ready", "input-applied", "running")
"""Head states a claim may take (``running`` only once its lease lapsed)."""


CLAIM_HEAD = f"""
WITH locked AS (
  SELECT h.pass_epoch, t.producer_epoch, t.next_record
    FROM threadwarden.hosts h JOIN threadwarden.threads t ON t.host_id = h.host_id
   WHERE h.host_id = $1 AND t.thread_id = $2
     FOR UPDATE OF h, t
), seen AS (
  SELECT next_record FROM threadwarden.threads WHERE thread_id = $2
), head AS (
  SELECT s.submission_id, s.state, s.agent_id, s.agent_digest, s.input, s.created_at,
         s.lease_expires_at > clock_timestamp() AS leased, s.parent_submission_id,
         $4::jsonb ->> s.agent_id AS worker_digest
    FROM threadwarden.submissions s
   WHERE s.thread_id = $2 AND s.state <> 'settled' AND EXISTS (SELECT 1 FROM locked)
   ORDER BY s.sequence LIMIT 1
), s AS (
  UPDATE threadwarden.submissions u
     SET state = 'running', agent_digest = head.worker_digest, epoch = l.producer_epoch + 1,
         attempt_id = $5, ownership_token = $6, attempts = u.attempts + 1,
         lease_expires_at = clock_timestamp() + make_interval(secs => $7::float8 / 1000)
    FROM head, locked l, seen
   WHERE u.submission_id = head.submission_id AND u.state = head.state
     AND head.submission_id = COALESCE($11, head.submission_id)
     AND l.next_record = seen.next_record
     AND l.pass_epoch = $3 AND head.state = ANY($8::text[])
     AND (u.lease_expires_at IS NULL OR u.lease_expires_at <= clock_timestamp())
     AND head.worker_digest IS NOT NULL
     AND (head.agent_digest IS NULL OR head.agent_digest = head.worker_digest)
  RETURNING u.submission_id, u.epoch, head.agent_id, u.abort_requested
), t AS (
  UPDATE threadwarden.threads SET producer_epoch = s.epoch FROM s WHERE thread_id = $2
), served AS (
  UPDATE threadwarden.hosts
     SET last_served_thread_id = $2, alarm_at = GREATEST(
           alarm_at, clock_timestamp() + make_interval(secs => $13::float8 / 1000))
   WHERE host_id = $1 AND pass_epoch = $3 AND $13::float8 IS NOT NULL
     AND EXISTS (SELECT 1 FROM locked l WHERE l.pass_epoch = $3)
), reads AS (
  SELECT s.submission_id COLLATE "default" AS submission_id,
         COALESCE($10::jsonb -> s.agent_id ->> 'route', 'newest') AS route,
         ARRAY(SELECT jsonb_array_elements_text($10::jsonb -> s.agent_id -> 'kinds')) AS kinds
    FROM s
)
SELECT (SELECT pass_epoch FROM locked) AS pass_epoch,
       (SELECT producer_epoch FROM locked) AS producer_epoch,
       (SELECT next_record FROM locked) IS DISTINCT FROM (SELECT next_record FROM seen)
         AS moved,
       (SELECT row_to_json(head) FROM head) AS head,
       CASE WHEN (SELECT pass_epoch FROM locked) IS NULL
            THEN (SELECT pass_epoch FROM threadwarden.hosts WHERE host_id = $1) END AS host_epoch,
       (SELECT abort_requested FROM s) AS abort_requested,
       (SELECT json_agg(j ORDER BY j.sequence) FROM (
          SELECT r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step
            FROM threadwarden.records r
           WHERE r.submission_id = (SELECT submission_id FROM reads) AND r.step IS NOT NULL) j)
         AS journal,
       CASE (SELECT route FROM reads) {HISTORY} END AS history
"""
"""A claim in one statement (one round trip, no explicit transaction): lock the host and thread
rows (in that order), read the thread's head and, when it is claimable here (the pass is
current, the head is the submission the pass selected and is not leased, this worker has its
binding at its pinned digest), take it and bump the producer epoch; with the journal and
history of a taken head. What was read is returned either way, so the caller raises what
refused the claim. ``$4``: agent id → digest this worker runs; ``$10``: agent id → how its
history is read (`history_routes`: the route and its kinds; an agent not in it reads the newest
``$9`` records of every kind); ``$11``: the selected submission; ``$12``: the summary kind;
``$13`` (when the pass's selection left it to the claim, `Maintenance.serve_lane`): record the
thread as the host's last served lane and keep the alarm that many ms ahead, whether or not the
head is taken (fenced by the pass epoch, on the host row the claim locked).

The statement reads from the snapshot it started with, before its lock wait: when the thread's
record counter moved while it waited (``moved``: a record committed meanwhile), the journal it
would return may miss that record, so it takes nothing and the caller runs it again. The abort
request is returned by the update, from the row as locked.

``reads`` carries the taken head's id in the default collation, the records' (submission ids
are ``COLLATE "C"``): compared in "C", no index on ``records.submission_id`` served the journal
read, and each claim read the records of every thread."""
CLAIM_TRIES = 3
"""Claims run again when records committed during their lock wait (then the head is left)."""


class Claim(BaseModel):
    """One attempt's ownership of a head: the fence every write of the attempt checks."""

    host_id: str
    pass_epoch: int
    thread_id: str
    submission_id: str
    agent_id: str
    agent_digest: str
    input: Any
    epoch: int
    attempt_id: str
    ownership_token: str
    history: list[ThreadRecord]
    """Records of the thread's earlier submissions, oldest first, as the binding's
    ``history_kinds`` select them (`threadwarden.ledger.history`): what the binding builds on."""
    journal: list[ThreadRecord]
    """This submission's committed steps, replayed instead of repeated."""
    admitted_at: datetime | None = None
    """When the submission was admitted (for the submit-to-settle latency metric)."""
    parent_submission_id: str | None = None
    """The parent whose call this submission is (a child), if any."""
    abort_requested: bool = False
    """An operator asked to abort before this attempt began (a parent whose children must be
    aborted and joined first)."""


class Claims:
    """Head claims: take a thread's head, renew its lease, hand it off, give it back."""

    def __init__(self, pool: asyncpg.Pool[Any], *, lease_ms: int) -> None:
        self._pool = pool
        self._lease_ms = lease_ms

    async def claim_head(
        self,
        host_id: str,
        pass_epoch: int,
        thread_id: str,
        *,
        bindings: dict[str, str],
        submission_id: str | None = None,
        history_kinds: dict[str, frozenset[str]] | None = None,
        serve_ms: int | None = None,
    ) -> Claim | None:
        """Claim the thread's head for a new attempt, or None when it is not claimable: it is
        not ``submission_id`` (the head the pass selected; None, for tests and tools: any head)
        or it cannot be taken now.

        ``serve_ms``: the pass left its selection to the claim (an inline head run at once):
        the claim records the lane as served and keeps the alarm ``serve_ms`` ahead, as
        `Maintenance.serve_lane` would have, in its own statement.

        ``history_kinds`` maps an agent id to its binding's ``history_kinds`` (an agent not
        in it loads the newest records of every kind); `threadwarden.ledger.history` says
        what is read.

        ``bindings`` maps agent id to the definition digest this worker can run. A head whose
        agent is missing or pinned to another digest raises `BindingUnavailable` or
        `BindingDigestMismatch` and the claim is released in the same transaction: the work
        stays pending and nothing is written.
        """
        attempt_id, token = f"att_{uuid.uuid4().hex}", secrets.token_hex(16)
        routes = history_routes(history_kinds or {})
        found: asyncpg.Record | None = None
        for _ in range(CLAIM_TRIES):
            found = await self._pool.fetchrow(
                CLAIM_HEAD,
                host_id,
                thread_id,
                pass_epoch,
                bindings,
                attempt_id,
                token,
                self._lease_ms,
                list(CLAIMABLE),
                HISTORY_LIMIT,
                routes,
                submission_id,
                SUMMARY,
                serve_ms,
            )
            assert found is not None  # one row, always
            if not found["moved"]:
                break
        assert found is not None
        if found["pass_epoch"] is None:  # the thread is not (or no longer) this host's
            raise_if_stale(host_id, pass_epoch, found["host_epoch"])
            return None
        raise_if_stale(host_id, pass_epoch, found["pass_epoch"])
        head = found["head"]
        if head is None or submission_id not in (None, head["submission_id"]):
            return None  # the selected head settled or left: this pass claims no other
        if head["state"] not in CLAIMABLE or head["leased"]:
            return None
        digest = _binding_digest(head, bindings)
        if found["abort_requested"] is None:  # not taken: the head moved under us, or kept moving
            return None
        return Claim(
            host_id=host_id,
            pass_epoch=pass_epoch,
            thread_id=thread_id,
            submission_id=head["submission_id"],
            agent_id=head["agent_id"],
            agent_digest=digest,
            input=head["input"],
            epoch=int(found["producer_epoch"]) + 1,
            attempt_id=attempt_id,
            ownership_token=token,
            history=[ThreadRecord(**r) for r in found["history"] or []],
            journal=[ThreadRecord(**r) for r in found["journal"] or []],
            admitted_at=head.get("created_at"),
            parent_submission_id=head.get("parent_submission_id"),
            abort_requested=bool(found["abort_requested"]),
        )

    async def renew_lease(self, claim: Claim) -> bool:
        """Extend the lease while the attempt is alive; False once ownership is gone.

        Ownership is gone when the token changed or a newer pass began on the host: a zombie
        attempt must not keep a head leased.
        """
        status = await self._pool.execute(
            "UPDATE threadwarden.submissions"
            "   SET lease_expires_at = clock_timestamp() + make_interval(secs => $3::float8 / 1000)"
            " WHERE submission_id = $1 AND ownership_token = $2 AND state = 'running'"
            "   AND EXISTS (SELECT 1 FROM threadwarden.hosts"
            "                WHERE host_id = $4 AND pass_epoch = $5)",
            claim.submission_id,
            claim.ownership_token,
            self._lease_ms,
            claim.host_id,
            claim.pass_epoch,
        )
        return status.endswith(" 1")

    async def hand_off(self, submission_id: str) -> None:
        """Route every later attempt of the submission to its agent's queue (an inline attempt
        ran past its budget). Unfenced: it decides where the head runs, nothing it holds."""
        await self._pool.execute(
            "UPDATE threadwarden.submissions SET handed_off = true WHERE submission_id = $1",
            submission_id,
        )

    async def release(self, claim: Claim) -> None:
        """Give the head back (ready again) after an attempt was cancelled; best effort."""
        await self._pool.execute(
            "UPDATE threadwarden.submissions SET state = 'ready', ownership_token = NULL,"
            " lease_expires_at = NULL"
            " WHERE submission_id = $1 AND ownership_token = $2 AND state = 'running'",
            claim.submission_id,
            claim.ownership_token,
        )


def _binding_digest(head: dict[str, Any], bindings: dict[str, str]) -> str:
    digest = bindings.get(head["agent_id"])
    if digest is None:
        raise BindingUnavailable(
            f"agent {head['agent_id']}: no binding registered on this worker"
            f" (submission {head['submission_id']} stays pending)",
            submission_id=head["submission_id"],
        )
    if head["agent_digest"] is not None and head["agent_digest"] != digest:
        raise BindingDigestMismatch(
            f"agent {head['agent_id']}: submission {head['submission_id']} is pinned to"
            f" digest {head['agent_digest']}, this worker has {digest}",
            submission_id=head["submission_id"],
        )
    return digest


def raise_if_stale(host_id: str, pass_epoch: int, current: object) -> None:
    """Raise `StalePass` unless ``current``, the host's pass epoch as read, is ``pass_epoch``."""
    if current != pass_epoch:
        raise StalePass(f"host {host_id}: pass epoch {pass_epoch} is stale (current {current})")
