"""Asking a person (issue 21 item 1, docs/bindings.md): ``ctx.ask`` suspends the submission without
a claim (``waiting_for: input``), the inbox lists the question's payload, and an answer (client,
CLI) resumes it with the value, journaled once. The same answer again changes nothing, another
conflicts, a submission that asks nothing is refused, a value the question's schema refuses is
refused before anything is written, and an abort while it waits settles it ``aborted``."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import quiescent
from tests.helpers.cli import decide, json_error, ledger_rows, run_cli
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.errors import DecisionConflict, InvalidInput, NotWaiting
from threadwarden.ledger.inbox import InboxReader

SIZES = {"type": "string", "enum": ["S", "M", "L"]}
QUESTION = {"question": "Which size?", "choices": ["S", "M", "L"]}


async def asked(client: ThreadwardenClient, thread: str) -> None:
    await eventually(
        lambda: client.thread_status(thread),
        lambda s: s.submissions[-1].waiting_for == "input",
        what=f"{thread} waiting for an answer",
    )


async def kinds(pool: asyncpg.Pool[Any], submission_id: str) -> list[str]:
    rows = await pool.fetch(
        "SELECT kind FROM threadwarden.records WHERE submission_id = $1 ORDER BY sequence",
        submission_id,
    )
    return [r["kind"] for r in rows]


@pytest.mark.usefixtures("worker")
async def test_ask_waits_for_input_lists_the_question_and_resumes_with_the_answer(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], connections: Connections, ids: str
) -> None:
    script = [{"say": "hi"}, {"ask": QUESTION, "schema": SIZES}, {"say": "shipped"}]
    receipt = await client.submit(ids, agent_id="scripted", input=script)
    await asked(client, ids)
    [view] = (await client.thread_status(ids)).submissions
    assert (view.state, view.waiting_for) == ("suspended", "input")
    inbox = await InboxReader(pool).waiting(100)
    [entry] = [e for e in inbox.entries if e.submission_id == receipt.submission_id]
    assert entry.waiting_for == "input"
    assert entry.request == {"payload": QUESTION, "schema": SIZES}
    assert json.loads(entry.what) == QUESTION
    lease = await pool.fetchval(
        "SELECT ownership_token FROM threadwarden.submissions WHERE submission_id = $1",
        receipt.submission_id,
    )
    assert lease is None  # the wait holds no claim

    # A value the schema refuses: refused by field, nothing written (compared once the pass
    # that suspended the head has finished: its finish writes the host row).
    await quiescent(client, connections, ids)
    before = await ledger_rows(pool, ids)
    with pytest.raises(InvalidInput) as refused:
        await client.answer(receipt.submission_id, "XL")
    assert refused.value.field == "value" and "schema" in str(refused.value)
    assert await ledger_rows(pool, ids) == before

    answered = await client.answer(receipt.submission_id, "L", operator="ops-1")
    assert (answered.state, answered.changed) == ("input-applied", True)
    outcome = await client.result(receipt.submission_id, timeout=30)
    assert outcome.result == {"said": ["hi", "shipped"], "answers": ["L"]}
    assert await kinds(pool, receipt.submission_id) == [
        "message",
        "input-requested",
        "input-answer",
        "message",
        "settlement",
    ]
    [answer] = await pool.fetch(
        "SELECT body, step FROM threadwarden.records WHERE submission_id = $1"
        " AND kind = 'input-answer'",
        receipt.submission_id,
    )
    assert (json.loads(answer["body"]) if isinstance(answer["body"], str) else answer["body"]) == {
        "value": "L",
        "operator": "ops-1",
    }

    # The same answer again changes nothing; another conflicts; both write nothing.
    await quiescent(client, connections, ids)
    before = await ledger_rows(pool, ids)
    again = await client.answer(receipt.submission_id, "L")
    assert (again.state, again.changed) == ("settled", False)
    with pytest.raises(DecisionConflict, match='answered "L"'):
        await client.answer(receipt.submission_id, "M")
    assert await ledger_rows(pool, ids) == before


@pytest.mark.usefixtures("worker")
async def test_ask_answer_of_a_submission_that_asks_nothing_is_not_waiting(
    client: ThreadwardenClient, ids: str
) -> None:
    done = await client.submit(ids, agent_id="scripted", input=[{"say": "done"}])
    await client.result(done.submission_id, timeout=30)
    with pytest.raises(NotWaiting):
        await client.answer(done.submission_id, "L")
    approval = await client.submit(f"{ids}-a", agent_id="scripted", input=[{"approval": "ok?"}])
    await eventually(
        lambda: client.thread_status(f"{ids}-a"),
        lambda s: s.submissions[0].waiting_for == "approval",
        what="waiting for the approval",
    )
    with pytest.raises(NotWaiting):  # it waits for an approval, not an answer
        await client.answer(approval.submission_id, "L")


@pytest.mark.usefixtures("worker")
async def test_ask_abort_while_waiting_settles_aborted(
    client: ThreadwardenClient, ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="scripted", input=[{"ask": "size?"}])
    await asked(client, ids)
    aborted = await client.abort(receipt.submission_id)
    assert (aborted.state, aborted.outcome) == ("settled", "aborted")
    with pytest.raises(NotWaiting):
        await client.answer(receipt.submission_id, "L")


@pytest.mark.usefixtures("worker")
async def test_cli_answer_exits_0_then_unchanged_and_conflicts_exit_2(
    cli_env: None,
    client: ThreadwardenClient,
    connections: Connections,
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    receipt = await client.submit(
        ids, agent_id="scripted", input=[{"ask": QUESTION, "schema": SIZES}]
    )
    await asked(client, ids)
    sid = receipt.submission_id

    code, printed, err = await decide(capsys, "answer", sid, "--value", "5")
    assert (code, printed) == (2, None)
    report = json_error(err)
    assert (report["code"], report["field"]) == ("invalid_input", "value")
    code, printed, err = await decide(capsys, "answer", sid, "--value", "{not json")
    assert (code, json_error(err)["field"]) == (2, "value")

    code, answered, _ = await decide(capsys, "answer", sid, "--value", '"M"')
    assert code == 0 and (answered["state"], answered["changed"]) == ("input-applied", True)
    assert (await client.result(sid, timeout=30)).result == {"said": [], "answers": ["M"]}
    await quiescent(client, connections, ids)
    before = await ledger_rows(pool, ids)
    code, again, err = await decide(capsys, "answer", sid, "--value", '"M"')
    assert (code, err, again["changed"]) == (0, "", False)
    code, printed, err = await decide(capsys, "answer", sid, "--value", '"S"')
    assert (code, printed, json_error(err)["code"]) == (2, None, "decision_conflict")
    assert await ledger_rows(pool, ids) == before

    done = await client.submit(f"{ids}-d", agent_id="scripted", input=[{"say": "x"}])
    await client.result(done.submission_id, timeout=30)
    code, printed, err = await decide(capsys, "answer", done.submission_id, "--value", '"S"')
    assert (code, json_error(err)["code"]) == (2, "not_waiting")


async def test_scripted_ask_with_a_schema_that_is_no_schema_is_refused_at_submit(
    cli_env: None, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    script = json.dumps([{"ask": "size?", "schema": {"type": 5}}])
    code = await run_cli("submit", ids, "--agent", "scripted", "--input", script, "--json")
    assert code == 2
    report = json_error(capsys.readouterr().err)
    assert report["field"] == "input[0].schema"
