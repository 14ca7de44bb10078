"""Operator decisions from the command line are idempotent (issue 12, CLI): a repeat of the
recorded decision exits 0 with ``changed: false`` and writes nothing; a conflicting decision
exits 2 with one JSON object on stderr and writes nothing."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import quiescent
from tests.helpers.cli import decide, json_error, ledger_rows, run_cli, unknown_side_effect
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections

pytestmark = pytest.mark.usefixtures("cli_env")

APPROVAL = [{"approval": "spend 5 EUR?"}, {"say": "spent"}]


async def waiting_for_approval(client: ThreadwardenClient, thread: str) -> None:
    await eventually(
        lambda: client.thread_status(thread),
        lambda s: s.submissions[0].waiting_for == "approval",
        what=f"{thread} waiting for approval",
    )


@pytest.mark.usefixtures("worker")
async def test_cli_approve_and_deny_repeat_exit_0_unchanged_and_conflicts_exit_2(
    client: ThreadwardenClient,
    connections: Connections,
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    granted, refused = f"{ids}-granted", f"{ids}-refused"
    one = await client.submit(granted, agent_id="scripted", input=APPROVAL)
    two = await client.submit(refused, agent_id="scripted", input=APPROVAL)
    await waiting_for_approval(client, granted)
    await waiting_for_approval(client, refused)

    code, approved, _ = await decide(capsys, "approve", one.submission_id)
    assert code == 0 and approved["changed"] is True
    await client.result(one.submission_id, timeout=30)
    await quiescent(client, connections, granted)  # no pass is left: a snapshot stays still
    before = await ledger_rows(pool, granted)
    code, again, err = await decide(capsys, "approve", one.submission_id)
    assert (code, err) == (0, "")
    assert again == {
        "submission_id": one.submission_id,
        "thread_id": granted,
        "host_id": granted,
        "state": "settled",
        "outcome": "completed",
        "changed": False,
    }
    code, printed, err = await decide(capsys, "deny", one.submission_id, "--reason", "late")
    assert (code, printed) == (2, None)
    report = json_error(err)
    assert (report["code"], report["field"], report["exit_code"]) == (
        "decision_conflict",
        "submission",
        2,
    )
    assert one.submission_id in report["error"] and "approved" in report["error"]
    assert await ledger_rows(pool, granted) == before

    code, denied, _ = await decide(capsys, "deny", two.submission_id, "--reason", "no")
    assert code == 0 and (denied["outcome"], denied["changed"]) == ("failed", True)
    await quiescent(client, connections, refused)
    before = await ledger_rows(pool, refused)
    code, again, err = await decide(capsys, "deny", two.submission_id, "--reason", "no")
    assert (code, err) == (0, "")
    assert (again["state"], again["outcome"], again["changed"]) == ("settled", "failed", False)
    code, printed, err = await decide(capsys, "approve", two.submission_id)
    assert (code, printed) == (2, None)
    assert json_error(err)["code"] == "decision_conflict" and "denied" in json_error(err)["error"]
    assert await ledger_rows(pool, refused) == before

    # The text form says that nothing changed.
    assert await run_cli("approve", one.submission_id) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"{one.submission_id}: nothing changed, already settled (completed)"


@pytest.mark.usefixtures("worker")
async def test_cli_approve_of_a_submission_that_never_waited_is_not_waiting_exit_2(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    done = await client.submit(ids, agent_id="scripted", input=[{"say": "done"}])
    await client.result(done.submission_id, timeout=30)
    for argv in (["approve", done.submission_id], ["deny", done.submission_id]):
        code, printed, err = await decide(capsys, *argv)
        assert (code, printed) == (2, None)
        assert json_error(err)["code"] == "not_waiting"


async def test_cli_resolve_repeat_exits_0_unchanged_and_another_outcome_exits_2(
    pool: asyncpg.Pool[Any], capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    ran = await unknown_side_effect(pool, f"{ids}-ran")
    failed = await unknown_side_effect(pool, f"{ids}-fail")
    result = '{"charged": 5}'

    code, first, _ = await decide(capsys, "resolve", ran, "--outcome", "ran", "--result", result)
    assert code == 0 and (first["state"], first["changed"]) == ("input-applied", True)
    before = await ledger_rows(pool, f"{ids}-ran")
    code, again, err = await decide(capsys, "resolve", ran, "--outcome", "ran", "--result", result)
    assert (code, err) == (0, "")
    assert (again["state"], again["changed"]) == ("input-applied", False)
    conflicts = [
        ["--outcome", "not-run"],
        ["--outcome", "fail"],
        ["--outcome", "ran", "--result", '{"charged": 6}'],
    ]
    for flags in conflicts:
        code, printed, err = await decide(capsys, "resolve", ran, *flags)
        assert (code, printed) == (2, None), flags
        report = json_error(err)
        assert (report["code"], report["field"]) == ("decision_conflict", "submission")
        assert "resolved ran" in report["error"]
    assert await ledger_rows(pool, f"{ids}-ran") == before

    code, first, _ = await decide(capsys, "resolve", failed, "--outcome", "fail")
    assert code == 0 and (first["outcome"], first["changed"]) == ("failed", True)
    before = await ledger_rows(pool, f"{ids}-fail")
    code, again, err = await decide(capsys, "resolve", failed, "--outcome", "fail")
    assert (code, err) == (0, "")
    assert (again["state"], again["outcome"], again["changed"]) == ("settled", "failed", False)
    code, _, err = await decide(capsys, "resolve", failed, "--outcome", "not-run")
    assert code == 2 and json_error(err)["code"] == "decision_conflict"
    assert await ledger_rows(pool, f"{ids}-fail") == before


@pytest.mark.usefixtures("worker")
async def test_cli_abort_repeat_exits_0_unchanged(
    client: ThreadwardenClient,
    connections: Connections,
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    # The attempt sleeps (in heartbeat slices) before its next committed boundary, where an
    # abort asked while it runs stops it: long enough for the repeat to find it running. The
    # sleep declares its length, so the inline first attempt yields before it (running only a
    # moment) and the second, dispatched attempt sleeps: the abort waits for that one.
    script = [{"sleep_ms": 6_000}, {"say": "never"}]
    slow = await client.submit(ids, agent_id="scripted", input=script)
    await eventually(
        lambda: client.thread_status(ids),
        lambda s: s.submissions[0].state == "running" and s.submissions[0].attempts == 2,
        what="the dispatched attempt running",
    )
    code, asked, _ = await decide(capsys, "abort", slow.submission_id)
    assert code == 0 and (asked["state"], asked["changed"]) == ("running", True)
    dirty = await pool.fetchval("SELECT dirty FROM threadwarden.hosts WHERE host_id = $1", ids)
    code, again, err = await decide(capsys, "abort", slow.submission_id)
    assert (code, err) == (0, "")
    assert (again["state"], again["changed"]) == ("running", False)
    # Only mutations bump the generation: the repeat made none.
    assert (
        await pool.fetchval("SELECT dirty FROM threadwarden.hosts WHERE host_id = $1", ids) == dirty
    )
    outcome = await client.result(slow.submission_id, timeout=30)
    assert outcome.outcome == "aborted"
    await quiescent(client, connections, ids)
    before = await ledger_rows(pool, ids)
    code, settled, err = await decide(capsys, "abort", slow.submission_id)
    assert (code, err) == (0, "")
    assert (settled["state"], settled["outcome"], settled["changed"]) == (
        "settled",
        "aborted",
        False,
    )
    assert await ledger_rows(pool, ids) == before


@pytest.mark.usefixtures("worker")
async def test_decisions_say_what_happens_next_in_plain_words(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    """Issue 30 item 9: ``approved sub_…; it resumes``, not the state's name."""
    thread = ids
    asks = await client.submit(thread, agent_id="scripted", input=APPROVAL)
    other = await client.submit(f"{thread}-2", agent_id="scripted", input=APPROVAL)

    async def waiting() -> list[str | None]:
        views = [(await client.thread_status(t)).submissions[0] for t in (thread, f"{thread}-2")]
        return [v.waiting_for for v in views]

    await eventually(waiting, lambda w: w == ["approval", "approval"], what="both wait")
    capsys.readouterr()
    assert await run_cli("approve", asks.submission_id) == 0
    assert capsys.readouterr().out.strip() == f"approved {asks.submission_id}; it resumes"
    assert await run_cli("deny", other.submission_id, "--reason", "no") == 0
    assert capsys.readouterr().out.strip() == f"denied {other.submission_id}; it failed"
