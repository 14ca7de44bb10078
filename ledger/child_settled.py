"""The child-settled marker: a child's settlement, recorded on its parent's host.

Written inside the child's own settlement transaction (every settle path: the attempt's, a
reserved settlement finished by recovery, an operator's deny, resolve or abort), so the
parent's wake (the marker, ``dirty++`` and the alarm on the parent's host) is durable before
the child finalizes (docs/protocol.md, "Subagent children").
"""

from __future__ import annotations

from collections.abc import Iterable

from threadwarden.errors import ChildNotSettled, NotFound, NotWaiting
from threadwarden.ledger.gate import mark_dirty
from threadwarden.ledger.models import ChildSettled, ChildSettledStatus
from threadwarden.ledger.pool import Connection

_LOCK_HOSTS = (
    "SELECT host_id FROM threadwarden.hosts WHERE host_id = ANY($1::text[])"
    " ORDER BY host_id FOR NO KEY UPDATE"
)
"""Both hosts of a cross-host transaction, in byte order (``host_id`` is ``COLLATE "C"``), so
two transactions between the same hosts never lock them in opposite orders."""
_PARENT_HOST = """
SELECT pt.host_id FROM threadwarden.submissions c
  JOIN threadwarden.submissions p ON p.submission_id = c.parent_submission_id
  JOIN threadwarden.threads pt ON pt.thread_id = p.thread_id
 WHERE c.submission_id = $1
"""
_CHILD = """
SELECT c.parent_submission_id, p.thread_id AS parent_thread_id, pt.host_id AS parent_host_id,
       (SELECT body FROM threadwarden.records
         WHERE submission_id = $1 AND kind = 'settlement') AS settlement,
       EXISTS (SELECT 1 FROM threadwarden.child_settlements m
                WHERE m.parent_submission_id = c.parent_submission_id
                  AND m.child_submission_id = $1) AS recorded
  FROM threadwarden.submissions c
  LEFT JOIN threadwarden.submissions p ON p.submission_id = c.parent_submission_id
  LEFT JOIN threadwarden.threads pt ON pt.thread_id = p.thread_id
 WHERE c.submission_id = $1
"""
_LOCK_PARENT = """
SELECT 1 FROM threadwarden.hosts h, threadwarden.submissions p
 WHERE h.host_id = $1 AND p.submission_id = $2
   FOR NO KEY UPDATE OF h FOR UPDATE OF p
"""
_MARK = """
WITH ins AS (
  INSERT INTO threadwarden.child_settlements
         (parent_submission_id, child_submission_id, parent_host_id, outcome)
  VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING
  RETURNING child_submission_id
), wait AS (
  SELECT kind, body FROM threadwarden.records
   WHERE submission_id = $1
     AND kind IN ('approval-requested', 'input-requested', 'children-awaited')
   ORDER BY sequence DESC LIMIT 1
)
SELECT EXISTS (SELECT 1 FROM ins) AS inserted,
       (SELECT state FROM threadwarden.submissions WHERE submission_id = $1) AS state,
       (SELECT kind FROM wait) AS wait_kind, (SELECT body FROM wait) AS wait_body,
       ARRAY(SELECT child_submission_id FROM threadwarden.child_settlements
              WHERE parent_submission_id = $1
             UNION SELECT child_submission_id FROM ins) AS settled
"""
"""The marker (once), and what the parent waits for: its latest wait record (an approval or its
children) with every child marked so far, this one included."""


def unjoined_children(parent: str) -> str:
    """SQL: the children (``c``) the submission ``parent`` (an SQL expression: a parameter or a
    column) delegated to and has not joined yet (no ``call-joined`` at their call step)."""
    return f"""
SELECT c.parent_call_step AS step, c.submission_id, c.state = 'settled' AS settled
  FROM threadwarden.submissions c
 WHERE c.parent_submission_id = {parent}
   AND NOT EXISTS (SELECT 1 FROM threadwarden.records r
                    WHERE r.submission_id = {parent} AND r.step = c.parent_call_step
                      AND r.kind = 'call-joined')"""


async def lock_hosts(conn: Connection, hosts: Iterable[str]) -> None:
    """Lock the hosts of a cross-host transaction, in byte order (before any other lock)."""
    await conn.execute(_LOCK_HOSTS, sorted(set(hosts)))


async def parent_host_of(conn: Connection, submission_id: str) -> str | None:
    """The host of the submission's parent, or None when it is no child."""
    host = await conn.fetchval(_PARENT_HOST, submission_id)
    return None if host is None else str(host)


async def record_child_settled_in(
    conn: Connection, child_submission_id: str, *, minimum_alarm_delay_ms: int
) -> ChildSettled:
    """Record the child's canonical settlement on its parent's host, inside the caller's
    transaction (the child's settlement's own): once per child.

    A first record bumps the parent's host and arms its alarm (the caller wakes it after
    commit) and, when the parent waits for this child and every other child it listed has
    settled, moves the parent to ``input-applied`` (``woken``). A replay writes nothing
    (``not-waiting``, ``recorded=False``). Raises `NotFound` for an unknown submission,
    `NotWaiting` for one that is no child, `ChildNotSettled` while it has no settlement.

    Locks the parent's host and row: a caller that also holds the child's host took both
    hosts in byte order first (`lock_hosts`), as establishment does.
    """
    child = await conn.fetchrow(_CHILD, child_submission_id)
    if child is None:
        raise NotFound(f"submission: no submission {child_submission_id!r}")
    parent, parent_host = child["parent_submission_id"], child["parent_host_id"]
    if parent is None:
        raise NotWaiting(f"submission {child_submission_id}: not the child of a call")
    settlement = child["settlement"]
    if settlement is None:
        raise ChildNotSettled(f"submission {child_submission_id}: not settled yet")
    if child["recorded"]:
        return _settled("not-waiting", parent, parent_host, recorded=False)
    await conn.execute(_LOCK_PARENT, parent_host, parent)
    # After the lock: the parent's wait and every marker are read as they now stand.
    mark = await conn.fetchrow(
        _MARK, parent, child_submission_id, parent_host, settlement["outcome"]
    )
    assert mark is not None
    if not mark["inserted"]:  # a concurrent first record won; it decided the wake
        return _settled("not-waiting", parent, parent_host, recorded=False)
    listed = (mark["wait_body"] or {}).get("children", [])
    waits = (
        mark["state"] == "suspended"
        and mark["wait_kind"] == "children-awaited"
        and child_submission_id in listed
    )
    status: ChildSettledStatus = "not-waiting"
    if waits and set(listed) <= set(mark["settled"]):
        await conn.execute(
            "UPDATE threadwarden.submissions SET state = 'input-applied' WHERE submission_id = $1",
            parent,
        )
        status = "woken"
    elif waits:
        status = "still-waiting"
    await mark_dirty(conn, parent_host, minimum_alarm_delay_ms=minimum_alarm_delay_ms)
    return _settled(status, parent, parent_host, recorded=True)


def _settled(
    status: ChildSettledStatus, parent: str, parent_host: str, *, recorded: bool
) -> ChildSettled:
    return ChildSettled(
        status=status,
        parent_submission_id=parent,
        parent_host_id=parent_host,
        recorded=recorded,
    )
