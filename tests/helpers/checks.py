"""Shared checks for end-to-end tests: settlement, convergence and the ledger rows behind them."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import asyncpg
from temporalio.client import WorkflowExecutionStatus

from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.models import STABLE_WAITS
from threadwarden.views import HostStatus, ThreadStatus
from threadwarden.workflows.contracts import host_workflow_id


def say(text: str) -> list[dict[str, Any]]:
    """A scripted input that appends one message and completes."""
    return [{"say": text}]


async def settled(
    client: ThreadwardenClient, thread: str, count: int, *, timeout_s: float = 60
) -> ThreadStatus:
    """Wait until ``thread`` holds ``count`` submissions, all settled."""
    return await eventually(
        lambda: client.thread_status(thread),
        lambda s: len(s.submissions) == count and all(x.state == "settled" for x in s.submissions),
        timeout_s=timeout_s,
        what=f"{count} submission(s) of {thread} settled",
    )


async def assert_settled_once(
    client: ThreadwardenClient, thread: str, count: int, *, timeout_s: float = 60
) -> ThreadStatus:
    """The preamble invariants for one thread: one settlement each, FIFO, no stale writes."""
    status = await settled(client, thread, count, timeout_s=timeout_s)
    records = await client.records(thread)
    settlements = [r for r in records if r["kind"] == "settlement"]
    # Exactly one settlement per submission, recorded in admitted (queue) order.
    queue = [s.submission_id for s in status.submissions]
    assert [r["submission_id"] for r in settlements] == queue
    assert len({r["record_id"] for r in records}) == len(records)
    assert [r["sequence"] for r in records] == list(range(1, len(records) + 1))
    # A stale producer would show up as an older epoch after a newer one.
    epochs = [r["epoch"] for r in records]
    assert epochs == sorted(epochs), f"record epochs out of order: {epochs}"
    final_epoch = {s.submission_id: s.epoch for s in status.submissions}
    assert all(r["epoch"] == final_epoch[r["submission_id"]] for r in settlements)
    return status


async def converged(client: ThreadwardenClient, host: str) -> HostStatus:
    """Wait until the host acknowledged everything and cleared its alarm."""
    return await eventually(
        lambda: client.host_status(host),
        lambda h: h.processed == h.dirty and h.alarm_at is None and h.nonterminal == 0,
        timeout_s=60,
        what=f"host {host} caught up with its alarm cleared",
    )


async def quiescent(client: ThreadwardenClient, connections: Connections, host: str) -> None:
    """Wait until the host acknowledged its generation with its alarm cleared and its workflow
    completed: no pass runs, and none runs until the next wake or alarm (work waiting for a
    person may remain). ``converged`` alone can be seen while the pass after a settling one,
    which goes straight on, is still to run; a test that counts passes or compares a snapshot
    of the host row waits for this instead."""
    await eventually(
        lambda: client.host_status(host),
        lambda h: h.processed == h.dirty and h.alarm_at is None,
        timeout_s=60,
        what=f"host {host} acknowledged with its alarm cleared",
    )
    temporal = await connect_temporal(connections.temporal_address, "default")
    handle = temporal.get_workflow_handle(host_workflow_id(host))
    await eventually(
        handle.describe,
        lambda d: d.status == WorkflowExecutionStatus.COMPLETED,
        timeout_s=60,
        what=f"host {host}'s workflow completed",
    )


def assert_autonomous_work_armed(host: HostStatus) -> None:
    """Autonomous leftovers keep the generation dirty and the alarm armed."""
    assert host.dirty > host.processed, host
    assert host.alarm_at is not None, host


async def reached_first(failpoints: Failpoints, expected: str, *instead: str) -> None:
    """Wait for ``expected``; fail at once (not at a timeout) when one of ``instead`` is first."""
    waiters = {
        asyncio.ensure_future(failpoints.reached(location, timeout_s=60)): location
        for location in (expected, *instead)
    }
    done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in pending:
        waiter.cancel()
    first = waiters[done.pop()]
    assert first == expected, f"{first} was reached before {expected}"


async def submission_rows(pool: asyncpg.Pool[Any], thread: str) -> list[dict[str, Any]]:
    """The raw submission rows of ``thread`` in sequence order."""
    rows = await pool.fetch(
        "SELECT * FROM threadwarden.submissions WHERE thread_id = $1 ORDER BY sequence", thread
    )
    return [dict(r) for r in rows]


async def host_row(pool: asyncpg.Pool[Any], host: str) -> dict[str, Any] | None:
    """The raw host row, or None when the host was never created."""
    row = await pool.fetchrow("SELECT * FROM threadwarden.hosts WHERE host_id = $1", host)
    return None if row is None else dict(row)


# --- scenario 1: faults around the mutation's commit ------------------------------------------


async def recorded_once(
    client: ThreadwardenClient, thread: str, outcomes: list[str]
) -> list[dict[str, Any]]:
    """All settled with ``outcomes`` in queue order; one settlement each; ids and epochs sane."""
    status = await settled(client, thread, len(outcomes))
    assert [s.outcome for s in status.submissions] == outcomes
    records = await client.records(thread)
    settlements = [r["submission_id"] for r in records if r["kind"] == "settlement"]
    # Once each; the order is the ledger check's (an abort may settle a follower first).
    assert sorted(settlements) == sorted(s.submission_id for s in status.submissions)
    assert len({r["record_id"] for r in records}) == len(records)
    assert [r["sequence"] for r in records] == list(range(1, len(records) + 1))
    epochs = [r["epoch"] for r in records]
    assert epochs == sorted(epochs), f"record epochs out of order: {epochs}"
    return records


# --- the protocol's invariants over a whole test database ---------------------------------------

_LEDGER_SUBMISSIONS = """
SELECT s.submission_id, s.thread_id, s.sequence, s.state, s.outcome, t.host_id
  FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
 ORDER BY s.thread_id, s.sequence
"""
_LEDGER_RECORDS = """
SELECT thread_id, sequence, record_id, submission_id, kind, epoch
  FROM threadwarden.records ORDER BY thread_id, sequence
"""
_LEDGER_THREADS = """
SELECT thread_id, host_id, next_sequence, next_record, producer_epoch FROM threadwarden.threads
"""
_LEDGER_HOSTS = """
SELECT host_id, dirty, processed, nonterminal, alarm_at, binding_retries FROM threadwarden.hosts
"""


async def ledger_violations(conn: asyncpg.Connection[Any]) -> list[str]:
    """Every breach of the protocol's invariants in the whole database, one line each.

    One settlement per submission (none while unsettled); FIFO per thread (settlements in queue
    order; an abort may settle a queued follower before its head); record ids unique; record
    and submission sequences contiguous per thread; record epochs monotone and never above the
    thread's producer epoch; nothing lost: each thread's head is settled or sits in an honest
    wait (suspended, unknown, or a binding retry with the alarm armed), else its host keeps
    ``dirty > processed`` and an armed alarm; a caught-up host's ``nonterminal`` counts its
    unsettled submissions.
    """
    subs = [dict(r) for r in await conn.fetch(_LEDGER_SUBMISSIONS)]
    records = [dict(r) for r in await conn.fetch(_LEDGER_RECORDS)]
    threads = {r["thread_id"]: dict(r) for r in await conn.fetch(_LEDGER_THREADS)}
    hosts = {r["host_id"]: dict(r) for r in await conn.fetch(_LEDGER_HOSTS)}
    problems: list[str] = []
    by_id = {s["submission_id"]: s for s in subs}
    settlements = Counter(r["submission_id"] for r in records if r["kind"] == "settlement")
    for s in subs:
        want = 1 if s["state"] == "settled" else 0
        if settlements[s["submission_id"]] != want:
            problems.append(
                f"submission {s['submission_id']} ({s['state']}): "
                f"{settlements[s['submission_id']]} settlement record(s), expected {want}"
            )
    ids = Counter(r["record_id"] for r in records)
    problems += [f"record id {rid} used {n} times" for rid, n in ids.items() if n > 1]
    for thread_id, thread in threads.items():
        mine = [r for r in records if r["thread_id"] == thread_id]
        problems += _thread_violations(
            thread, mine, [s for s in subs if s["thread_id"] == thread_id], by_id
        )
    for host_id, host in hosts.items():
        problems += _host_violations(host, [s for s in subs if s["host_id"] == host_id])
    return problems


def _thread_violations(
    thread: dict[str, Any],
    records: list[dict[str, Any]],
    subs: list[dict[str, Any]],
    by_id: dict[str, dict[str, Any]],
) -> list[str]:
    name = f"thread {thread['thread_id']}"
    problems = []
    sequences = [r["sequence"] for r in records]
    if sequences != list(range(1, len(records) + 1)) or thread["next_record"] != len(records) + 1:
        problems.append(
            f"{name}: record sequences {sequences}, next_record {thread['next_record']}"
        )
    queue = [s["sequence"] for s in subs]
    if queue != list(range(1, len(subs) + 1)) or thread["next_sequence"] != len(subs) + 1:
        problems.append(f"{name}: submission sequences {queue}, next {thread['next_sequence']}")
    epochs = [r["epoch"] for r in records]
    if epochs != sorted(epochs) or any(e > thread["producer_epoch"] for e in epochs):
        problems.append(
            f"{name}: record epochs {epochs} (producer epoch {thread['producer_epoch']})"
        )
    settled_order = [
        by_id[r["submission_id"]]["sequence"]
        for r in records
        if r["kind"] == "settlement" and by_id[r["submission_id"]]["outcome"] != "aborted"
    ]
    if settled_order != sorted(settled_order):
        problems.append(f"{name}: settled out of queue order (sequences {settled_order})")
    return problems


def _host_violations(host: dict[str, Any], subs: list[dict[str, Any]]) -> list[str]:
    name = f"host {host['host_id']}"
    problems = []
    unsettled = [s for s in subs if s["state"] != "settled"]
    # The count is the finish's: a failed pass may leave it stale, never an acknowledged one.
    if host["dirty"] == host["processed"] and host["nonterminal"] != len(unsettled):
        problems.append(f"{name}: nonterminal {host['nonterminal']}, unsettled {len(unsettled)}")
    heads: dict[str, dict[str, Any]] = {}
    for s in unsettled:  # in thread, then queue order: the first one is the thread's head
        heads.setdefault(s["thread_id"], s)
    retries = host["binding_retries"]  # jsonb arrives as text on a connection without codecs
    entries = json.loads(retries) if isinstance(retries, str) else retries or []
    blocked = {entry["submission_id"] for entry in entries}
    armed = host["alarm_at"] is not None
    for head in heads.values():
        what = f"{name}: head {head['submission_id']} of {head['thread_id']} ({head['state']})"
        if head["state"] in STABLE_WAITS:
            continue  # only an operator's or a child's mutation moves it on
        if head["submission_id"] in blocked:
            if not armed:
                problems.append(f"{what} waits for a binding with no alarm armed")
            continue
        if not (host["dirty"] > host["processed"] and armed):
            problems.append(
                f"{what} is autonomous work left with dirty {host['dirty']}, processed"
                f" {host['processed']}, alarm {host['alarm_at']} (lost: nothing will serve it)"
            )
    return problems


async def assert_ledger_invariants(database_url: str) -> None:
    """Fail naming every breach of `ledger_violations` in the database at ``database_url``."""
    conn = await asyncpg.connect(database_url)
    try:
        problems = await ledger_violations(conn)
    finally:
        await conn.close()
    assert not problems, "ledger invariants broken:\n" + "\n".join(problems)
