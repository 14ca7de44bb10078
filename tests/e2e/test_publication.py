"""Publication: every canonical record reaches the sinks at least once, failures back off, and
`threadwarden watch` shows records live."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import converged, say, settled
from tests.helpers.polling import eventually
from tests.helpers.sinks import RecordingSink
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient

ROOT = Path(__file__).resolve().parents[2]


async def outbox(pool: asyncpg.Pool[Any]) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM threadwarden.publications ORDER BY sequence")
    return [dict(r) for r in rows]


async def test_publication_every_record_reaches_the_sinks_in_order(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    sink = RecordingSink()
    async with workers.running(sinks=[sink]):
        for n in range(3):
            await client.submit(ids, agent_id="scripted", input=say(f"#{n}"))
        await settled(client, ids, 3)
        records = await client.records(ids)
        await eventually(lambda: outbox(pool), lambda rows: rows == [], what="outbox drained")
    # Exactly as received: every record once, in sequence order (no gap, duplicate or swap).
    got = [(r.thread_id, r.sequence, r.kind) for r in sink.published]
    assert got == [(ids, r["sequence"], r["kind"]) for r in records]
    assert got == [(ids, n, kind) for n, kind in enumerate(["message", "settlement"] * 3, 1)]


async def test_publication_a_failing_sink_backs_off_then_catches_up(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    sink = RecordingSink()
    sink.failing = True
    async with workers.running(sinks=[sink]):
        await client.submit(ids, agent_id="scripted", input=say("kept until published"))
        await settled(client, ids, 1)
        rows = await eventually(
            lambda: outbox(pool),
            lambda rows: bool(rows) and rows[0]["attempts"] >= 3,
            timeout_s=30,
            what="retries persisted with backoff",
        )
        # Backoff, not a hot loop: 1 s, 2 s, 4 s … between attempts.
        assert sink.calls <= rows[0]["attempts"] + 1
        assert rows[0]["last_error"] is not None and "unreachable" in rows[0]["last_error"]
        host = await client.host_status(ids)
        assert host.alarm_at is not None  # the host comes back for them
        sink.failing = False
        await eventually(
            lambda: outbox(pool),
            lambda rows: rows == [],
            timeout_s=30,
            what="published once the sink recovered",
        )
        await converged(client, ids)
    assert {r.kind for r in sink.published} == {"message", "settlement"}


async def test_scenario_35_publication_failure_after_a_committed_mutation_is_only_logged(
    workers: Workers, ids: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = RecordingSink()
    approval = [{"approval": "ok?"}, {"say": "approved"}]
    async with (
        workers.running(sinks=[sink]),
        ThreadwardenClient.connect(workers.settings, workers.connections, sinks=[sink]) as client,
    ):
        await client.submit(ids, agent_id="scripted", input=approval)
        status = await eventually(
            lambda: client.thread_status(ids),
            lambda s: s.submissions[0].waiting_for == "approval",
            what="waiting for approval",
        )
        sink.failing = True
        result = await client.approve(status.submissions[0].submission_id)  # must not raise
        assert result.state == "input-applied"
        assert any("publication to host" in r.getMessage() for r in caplog.records)
        sink.failing = False
        await settled(client, ids, 1)
        await converged(client, ids)


@pytest.mark.usefixtures("cli_env", "worker")
async def test_watch_streams_a_threads_records_live(client: ThreadwardenClient, ids: str) -> None:
    await client.submit(ids, agent_id="scripted", input=say("first"))
    await settled(client, ids, 1)
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "threadwarden.cli.main",
        "watch",
        ids,
        "--json",
        cwd=ROOT,
        env=dict(os.environ),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert watcher.stdout is not None

        async def line() -> dict[str, Any]:
            assert watcher.stdout is not None
            raw = await asyncio.wait_for(watcher.stdout.readline(), timeout=30)
            return dict(json.loads(raw))

        seen = [await line(), await line()]  # what was there: message, settlement
        assert [r["kind"] for r in seen] == ["message", "settlement"]
        await client.submit(ids, agent_id="scripted", input=say("second"))
        live = [await line(), await line()]
        assert [(r["kind"], r["body"].get("text")) for r in live][0] == ("message", "second")
        assert live[1]["kind"] == "settlement"
        assert [r["sequence"] for r in seen + live] == [1, 2, 3, 4]
    finally:
        watcher.kill()
        await watcher.wait()
