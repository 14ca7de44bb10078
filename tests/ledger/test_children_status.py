"""Subagent children in the read views (issue 13, observability): ``status`` names a child's
parent and says ``child`` for a parent waiting for its children, the inbox leaves such a
parent out (it waits for no person), and the finish's lane heads (the host workflow's
current details in the Temporal UI) say the same. Children are established through the
ledger directly (`Family`), against real Postgres."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers.children import Family
from tests.helpers.cli import closed_port, run_cli
from tests.helpers.ledger import explain
from threadwarden.ledger.inbox import WAITING, InboxReader
from threadwarden.ledger.models import ChildReceipt
from threadwarden.ledger.status import THREAD_SUBMISSIONS, StatusReader
from threadwarden.protocol.passes import PassReport as Report
from threadwarden.views import SubmissionView
from threadwarden.workflows.host import _head_line


async def view(pool: asyncpg.Pool[Any], thread_id: str) -> SubmissionView:
    """The thread's one submission as ``status`` shows it."""
    (submission,) = (await StatusReader(pool).thread(thread_id)).submissions
    return submission


async def settled(family: Family, child: ChildReceipt) -> None:
    """The child settles and its marker is recorded on the parent (by the settlement itself
    once that is wired; the explicit call is then a replay that writes nothing)."""
    await family.settle_child(child)
    await family.children.record_child_settled(child.submission_id)


def marker(family: Family, child: ChildReceipt) -> dict[str, Any]:
    return {
        "child_submission_id": child.submission_id,
        "parent_host_id": family.parent_host,
        "outcome": "completed",
    }


async def finish(family: Family, host_id: str) -> Report:
    """A pass on the host that runs nothing and finishes: its report names the lane heads."""
    return await family.ledger.finish(host_id, await family.ledger.begin(host_id))


async def test_status_of_a_child_names_its_parent_and_its_thread(
    family: Family, pool: asyncpg.Pool[Any]
) -> None:
    parent = await family.parent()
    child = await family.establish(parent, 1)

    shown = await view(pool, child.thread_id)
    assert shown.submission_id == child.submission_id
    assert (shown.parent_submission_id, shown.parent_thread_id) == (
        parent.submission_id,
        parent.thread_id,
    )
    assert (shown.state, shown.waiting_for, shown.children) == ("ready", None, None)
    # The parent is no child, and, still running, waits for nothing yet.
    mine = await view(pool, parent.thread_id)
    assert (mine.parent_submission_id, mine.parent_thread_id) == (None, None)
    assert (mine.state, mine.waiting_for, mine.children) == ("running", None, None)


async def test_status_of_a_parent_waiting_for_children_says_child_and_lists_the_unsettled(
    family: Family, pool: asyncpg.Pool[Any]
) -> None:
    parent, (first, second), wait = await family.waiting_parent(2)
    assert wait.suspended

    shown = await view(pool, parent.thread_id)
    assert (shown.state, shown.waiting_for) == ("suspended", "child")
    assert shown.children == [first.submission_id, second.submission_id]

    # One settled: the parent still waits, for the other only.
    await settled(family, first)
    assert await family.markers(parent.submission_id) == [marker(family, first)]
    shown = await view(pool, parent.thread_id)
    assert (shown.state, shown.waiting_for) == ("suspended", "child")
    assert shown.children == [second.submission_id]

    # Both settled: woken, it waits for nothing.
    await settled(family, second)
    shown = await view(pool, parent.thread_id)
    assert (shown.state, shown.waiting_for, shown.children) == ("input-applied", None, None)


async def test_a_parent_that_asks_an_approval_after_its_children_waits_for_approval(
    family: Family, pool: asyncpg.Pool[Any]
) -> None:
    parent, (child,), _ = await family.waiting_parent(1)
    await settled(family, child)
    resumed = await family.reclaim()
    await family.children.join(resumed, 1)

    # Its latest wait record is the approval request, not the earlier children wait.
    await family.ask_approval(resumed, "spend 5?")
    shown = await view(pool, parent.thread_id)
    assert (shown.state, shown.waiting_for, shown.children) == ("suspended", "approval", None)
    (entry,) = (await InboxReader(pool).waiting(10)).entries
    assert (entry.submission_id, entry.waiting_for, entry.what) == (
        parent.submission_id,
        "approval",
        "spend 5?",
    )


async def test_the_inbox_lists_the_approval_but_not_the_parent_waiting_for_its_child(
    family: Family, pool: asyncpg.Pool[Any], ids: str
) -> None:
    waiting, _, _ = await family.waiting_parent(1)
    asking = Family.on(pool, f"{ids}-ask")
    approval = await asking.parent()
    await asking.ask_approval(approval, "ship it?")

    # Both are suspended; only the approval waits for a person.
    states = {
        r["submission_id"]: r["state"]
        for r in await pool.fetch(
            "SELECT submission_id, state FROM threadwarden.submissions WHERE state = 'suspended'"
        )
    }
    assert states == {waiting.submission_id: "suspended", approval.submission_id: "suspended"}
    page = await InboxReader(pool).waiting(10)
    assert [(e.submission_id, e.waiting_for) for e in page.entries] == [
        (approval.submission_id, "approval")
    ]
    assert page.more is False
    assert (await view(pool, approval.thread_id)).waiting_for == "approval"
    assert (await view(pool, waiting.thread_id)).waiting_for == "child"

    # The limit counts only what is listed: the child wait takes no place on a page of one.
    page = await InboxReader(pool).waiting(1)
    assert [e.submission_id for e in page.entries] == [approval.submission_id]
    assert page.more is False


async def test_lane_heads_say_child_and_the_current_details_name_the_children(
    family: Family, pool: asyncpg.Pool[Any], ids: str
) -> None:
    parent, (first, second), _ = await family.waiting_parent(2)

    report = await finish(family, family.parent_host)
    (head,) = report.heads or []
    assert (head.submission_id, head.state, head.waiting_for) == (
        parent.submission_id,
        "suspended",
        "child",
    )
    assert head.children == [first.submission_id, second.submission_id]
    assert head.parent_submission_id is None
    # The workflow receives the report as its contract and formats it for the Temporal UI.
    (shown,) = report.heads or []
    assert _head_line(shown) == (
        f"- `{parent.thread_id}`: `{parent.submission_id}` suspended (agent `echo`,"
        f" waits for children `{first.submission_id}`, `{second.submission_id}`)"
    )

    # A child's head names its parent.
    (child_head,) = (await finish(family, first.host_id)).heads or []
    assert (child_head.submission_id, child_head.parent_submission_id) == (
        first.submission_id,
        parent.submission_id,
    )
    assert (child_head.waiting_for, child_head.children) == (None, None)
    (child_shown,) = (await finish(family, first.host_id)).heads or []
    assert _head_line(child_shown) == (
        f"- `{first.thread_id}`: `{first.submission_id}` ready (agent `echo`,"
        f" child of `{parent.submission_id}`)"
    )

    # A head waiting for an approval still says approval.
    asking = Family.on(pool, f"{ids}-ask")
    approval = await asking.parent()
    await asking.ask_approval(approval, "ship it?")
    (asked,) = (await finish(asking, asking.parent_host)).heads or []
    assert (asked.submission_id, asked.waiting_for, asked.children) == (
        approval.submission_id,
        "approval",
        None,
    )
    (asked_shown,) = (await finish(asking, asking.parent_host)).heads or []
    assert _head_line(asked_shown).endswith("(agent `echo`, waits for approval)")


async def test_status_cli_json_and_table_show_the_parent_and_the_child_wait(
    family: Family,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    parent, (child,), _ = await family.waiting_parent(1)
    # status reads Postgres only: Temporal's address is a port nothing listens on.
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", database_url)
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", f"127.0.0.1:{closed_port()}")
    monkeypatch.setenv("THREADWARDEN_DATA_DIR", str(tmp_path / "none"))

    assert await run_cli("status", "--thread", parent.thread_id, "--json") == 0
    (waiting,) = json.loads(capsys.readouterr().out)["submissions"]
    assert (waiting["submission_id"], waiting["waiting_for"], waiting["children"]) == (
        parent.submission_id,
        "child",
        [child.submission_id],
    )
    assert (waiting["parent_submission_id"], waiting["parent_thread_id"]) == (None, None)

    assert await run_cli("status", "--thread", child.thread_id, "--json") == 0
    (shown,) = json.loads(capsys.readouterr().out)["submissions"]
    assert (shown["submission_id"], shown["parent_submission_id"]) == (
        child.submission_id,
        parent.submission_id,
    )
    assert (shown["parent_thread_id"], shown["waiting_for"], shown["children"]) == (
        parent.thread_id,
        None,
        None,
    )

    assert await run_cli("status", "--thread", parent.thread_id) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "parent" in lines[1].split()
    assert f"child {child.submission_id}" in lines[3]
    assert await run_cli("status", "--thread", child.thread_id) == 0
    lines = capsys.readouterr().out.splitlines()
    assert child.submission_id in lines[3] and parent.submission_id in lines[3]


async def test_status_reads_the_parent_and_the_wait_through_indexes(
    pool: asyncpg.Pool[Any],
) -> None:
    explained = await explain(pool, THREAD_SUBMISSIONS, "t")
    for index in (
        "submissions_thread_id_sequence_key",
        "submissions_pkey",
        "records_by_submission",
        "child_settlements_pkey",
    ):
        assert index in explained, f"{index} not used\n{explained}"
    assert "Seq Scan" not in explained, explained

    explained = await explain(pool, WAITING, 101)
    assert "submissions_waiting" in explained and "records_by_submission" in explained, explained
    assert "Seq Scan" not in explained, explained
