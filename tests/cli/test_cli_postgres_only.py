"""Reads and decisions from the command line need only Postgres (issue 12, CLI): with Temporal
unreachable, ``status``, ``inbox`` and repeated decisions answer as usual, and a decision that
changes something commits (its wake, a hint, is logged as failed)."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import converged
from tests.helpers.cli import closed_port, run_cli
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient

APPROVAL = [{"approval": "ship it?"}, {"say": "shipped"}]


async def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[Any, str, float]:
    """Run a command with ``--json`` that must succeed: its JSON, its stderr, its duration."""
    started = time.monotonic()
    code = await run_cli(*argv, "--json")
    took = time.monotonic() - started
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err, took


@pytest.mark.usefixtures("cli_env", "worker")
async def test_cli_status_inbox_and_decisions_answer_with_temporal_unreachable(
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    ids: str,
) -> None:
    done = await client.submit(ids, agent_id="scripted", input=[{"say": "done"}])
    await client.result(done.submission_id, timeout=30)
    waiting = await client.submit(f"{ids}-w", agent_id="scripted", input=APPROVAL)
    await eventually(
        lambda: client.thread_status(f"{ids}-w"),
        lambda s: s.submissions[0].waiting_for == "approval",
        what="waiting for approval",
    )
    await converged(client, ids)
    # Temporal's address is a socket that counts connections and never answers: a read that
    # tried to reach Temporal would show up here (and hang), whatever the machine's speed.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", f"127.0.0.1:{listener.getsockname()[1]}")

    thread, err, _ = await cli_json(capsys, "status", "--thread", ids)
    assert err == ""
    [submission] = thread["submissions"]
    assert (submission["submission_id"], submission["outcome"]) == (done.submission_id, "completed")
    host, err, _ = await cli_json(capsys, "status", "--host", ids)
    assert err == "" and host["host_id"] == ids and host["dirty"] == host["processed"]
    inbox, err, _ = await cli_json(capsys, "inbox")
    assert err == ""
    with pytest.raises(BlockingIOError):  # status and inbox made no connection to Temporal
        listener.accept()
    listener.close()
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", f"127.0.0.1:{closed_port()}")
    assert [e["submission_id"] for e in inbox["entries"]] == [waiting.submission_id]

    # A decision commits in Postgres; its wake cannot reach Temporal and says so, exit 0.
    approved, _, _ = await cli_json(capsys, "approve", waiting.submission_id)
    assert (approved["state"], approved["changed"]) == ("input-applied", True)
    assert any(f"wake of host {ids}-w failed" in r.getMessage() for r in caplog.records)
    state = await pool.fetchval(
        "SELECT state FROM threadwarden.submissions WHERE submission_id = $1",
        waiting.submission_id,
    )
    assert state != "suspended"
    # A repeat changes nothing, so it needs no wake at all.
    again, err, _ = await cli_json(capsys, "approve", waiting.submission_id)
    assert (again["changed"], err) == (False, "")
    aborted, err, _ = await cli_json(capsys, "abort", done.submission_id)
    assert (aborted["outcome"], aborted["changed"], err) == ("completed", False, "")
    # The worker (still connected) picks the approved submission up from its durable alarm.
    outcome = await client.result(waiting.submission_id, timeout=30)
    assert outcome.outcome == "completed"
