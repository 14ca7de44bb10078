"""The command line against real services: JSON shapes, one-line errors, exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
)
from temporalio.client import Client

from tests.helpers.cli import run_cli
from tests.helpers.namespaces import custom_attributes, register_fresh_namespace
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import ThreadwardenError
from threadwarden.ledger.migrations import expected_version
from threadwarden.worker.plugin import verify_search_attributes
from threadwarden.workflows.host import SEARCH_ATTRIBUTES

SUBMISSION_FIELDS = {
    "submission_id",
    "sequence",
    "agent_id",
    "state",
    "outcome",
    "reason",
    "attempts",
    "epoch",
    "waiting_for",
    "created_at",
    "settled_at",
    "source_thread_id",
    "source_message_id",
    "parent_submission_id",
    "parent_thread_id",
    "children",
}
"""What `status --thread --json` prints per submission (docs/operations.md)."""
HOST_FIELDS = {
    "host_id",
    "dirty",
    "processed",
    "nonterminal",
    "alarm_at",
    "last_served_thread_id",
    "retry",
    "binding_retries",
    "auxiliary_due",
    "pass_epoch",
    "last_outcome",
    "last_error",
    "updated_at",
}
"""What `status --host --json` prints (docs/operations.md)."""


def iso(text: str) -> datetime:
    """A datetime the CLI printed: ISO 8601 in UTC, ending in Z."""
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text)


async def submissions_count(pool: asyncpg.Pool[Any]) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM threadwarden.submissions"))


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["submit", "bad id", "--agent", "scripted", "--input", "[]"], "thread"),
        (["submit", "t", "--agent", "x" * 129, "--input", "[]"], "agent"),
        (["submit", "t", "--agent", "scripted", "--input", "[]", "--host", "a/b"], "host"),
        (["submit", "t", "--agent", "scripted", "--input", "{nope"], "input"),
        (["submit", "t", "--agent", "scripted", "--input", json.dumps("x" * 70_000)], "input"),
        (["submit", "t", "--agent", "scripted", "--input", '[{"sleep_ms": -1}]'], "sleep_ms"),
        (["status", "--thread", ""], "thread"),
    ],
)
@pytest.mark.usefixtures("cli_env")
async def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(
    pool: asyncpg.Pool[Any], capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    code = await run_cli(*argv)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and field in err
    assert await submissions_count(pool) == 0


@pytest.mark.usefixtures("cli_env")
async def test_cli_conflicting_idempotency_key_exits_2_and_writes_nothing(
    pool: asyncpg.Pool[Any], capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    base = ["submit", f"{ids}-t", "--agent", "scripted", "--idempotency-key", "k1", "--json"]
    assert await run_cli(*base, "--input", '[{"say": "a"}]') == 0
    first = json.loads(capsys.readouterr().out)
    assert await run_cli(*base, "--input", '[{"say": "a"}]') == 0
    again = json.loads(capsys.readouterr().out)
    assert again == {**first, "created": False}
    assert await run_cli(*base, "--input", '[{"say": "b"}]') == 2
    assert "idempotency_key" in capsys.readouterr().err
    assert await submissions_count(pool) == 1


@pytest.mark.usefixtures("cli_env", "worker")
async def test_cli_submit_and_status_print_the_documented_json(
    capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    thread = f"{ids}-json"
    scripts = [[{"say": "one"}], [{"send": {"thread": f"{thread}-to", "input": [{"say": "two"}]}}]]
    for script in scripts:
        assert (
            await run_cli(
                "submit", thread, "--agent", "scripted", "--input", json.dumps(script), "--json"
            )
            == 0
        )
    receipts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [set(r) for r in receipts] == [
        {"submission_id", "thread_id", "host_id", "sequence", "created", "interrupted", "warnings"}
    ] * 2
    assert [(r["interrupted"], r["warnings"]) for r in receipts] == [([], [])] * 2
    assert [r["sequence"] for r in receipts] == [1, 2]

    async def thread_status() -> dict[str, Any]:
        assert await run_cli("status", "--thread", thread, "--json") == 0
        return dict(json.loads(capsys.readouterr().out))

    status = await eventually(
        thread_status,
        lambda s: (
            all(x["state"] == "settled" for x in s["submissions"])
            and [m["state"] for m in s["messages_sent"]] == ["delivered"]
        ),
        what="both settled, the message delivered",
    )
    assert set(status) == {"thread_id", "host_id", "submissions", "messages_sent"}
    [message] = status["messages_sent"]
    assert set(message) == {
        "message_id",
        "destination_thread_id",
        "state",
        "attempts",
        "destination_submission_id",
        "last_error",
    }
    assert message["destination_thread_id"] == f"{thread}-to"
    assert [s["submission_id"] for s in status["submissions"]] == [
        r["submission_id"] for r in receipts
    ]
    assert all(set(s) == SUBMISSION_FIELDS for s in status["submissions"])
    first, second = status["submissions"]
    assert (first["agent_id"], first["reason"], first["waiting_for"]) == ("scripted", None, None)
    assert first["outcome"] == "completed" and second["outcome"] == "completed"
    for submission in status["submissions"]:
        created, done = (iso(submission["created_at"]), iso(submission["settled_at"]))
        assert created <= done <= datetime.now(UTC)
    assert iso(first["created_at"]) <= iso(second["created_at"])
    assert await run_cli("status", "--thread", f"{thread}-to", "--json") == 0
    [accepted] = json.loads(capsys.readouterr().out)["submissions"]
    assert (accepted["source_thread_id"], accepted["source_message_id"]) == (
        thread,
        message["message_id"],
    )
    assert accepted["submission_id"] == message["destination_submission_id"]
    assert await run_cli("status", "--host", thread, "--json") == 0
    host = json.loads(capsys.readouterr().out)
    assert set(host) == HOST_FIELDS
    assert set(host["auxiliary_due"]) == {"publication", "message", "projection", "host_work"}
    assert host["pass_epoch"] >= 1 and host["last_error"] is None
    assert host["last_outcome"] in {"caught-up", "actionable"}
    assert iso(first["created_at"]) <= iso(host["updated_at"]) <= datetime.now(UTC)


async def test_cli_without_a_stack_or_settings_exits_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("THREADWARDEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("THREADWARDEN_TEMPORAL_ADDRESS", raising=False)
    code = await run_cli("--data-dir", str(tmp_path), "status", "--thread", "t")
    assert code == 1
    assert "threadwarden dev" in capsys.readouterr().err


async def test_cli_invalid_setting_names_the_field_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADWARDEN_LEASE_MS", "soon")
    assert await run_cli("status", "--thread", "t") == 2
    assert "THREADWARDEN_LEASE_MS" in capsys.readouterr().err


async def test_cli_migrate_brings_an_empty_database_to_the_current_version(
    monkeypatch: pytest.MonkeyPatch, empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", empty_database_url)
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", "127.0.0.1:1")
    assert await run_cli("migrate") == 0
    assert f"version {expected_version()}" in capsys.readouterr().out
    assert await run_cli("migrate") == 0
    assert "applied nothing" in capsys.readouterr().out


@pytest.fixture
async def fresh_namespace(temporal: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A namespace registered just now on the session's dev server, so it holds none of our
    search attributes; the CLI is pointed at it."""
    name = await register_fresh_namespace(temporal)
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_NAMESPACE", name)
    return name


async def setup_error(capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``setup``, which must exit 1 with one error line on stderr; that line."""
    assert await run_cli("setup") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("threadwarden: error: "), lines
    return lines[0]


@pytest.mark.usefixtures("cli_env")
async def test_cli_setup_registers_the_attributes_a_fresh_namespace_lacks(
    fresh_namespace: str, temporal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = {key.name: key.indexed_value_type.name for key in SEARCH_ATTRIBUTES}
    client = await Client.connect(temporal, namespace=fresh_namespace)
    assert await custom_attributes(temporal, fresh_namespace) == {}
    with pytest.raises(ThreadwardenError, match="not registered"):
        await verify_search_attributes(client)

    assert await run_cli("setup") == 0
    out = capsys.readouterr().out
    assert f"registered {', '.join(expected)}; already present none" in out
    assert await custom_attributes(temporal, fresh_namespace) == expected
    await verify_search_attributes(client)

    assert await run_cli("setup") == 0  # again: everything is already there, which is fine
    assert f"registered nothing; already present {', '.join(expected)}" in capsys.readouterr().out
    assert await custom_attributes(temporal, fresh_namespace) == expected


@pytest.mark.usefixtures("cli_env")
async def test_cli_setup_refuses_an_attribute_registered_under_another_type(
    fresh_namespace: str, temporal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = await Client.connect(temporal, namespace=fresh_namespace)
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=fresh_namespace,
            search_attributes={"ThreadwardenPhase": IndexedValueType.INDEXED_VALUE_TYPE_INT},
        )
    )
    line = await setup_error(capsys)
    assert "search attribute ThreadwardenPhase is registered as INT, expected KEYWORD" in line


@pytest.mark.usefixtures("cli_env")
async def test_cli_setup_in_an_unknown_namespace_is_one_line_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_NAMESPACE", "no-such-namespace")
    line = await setup_error(capsys)
    assert "search attributes of namespace no-such-namespace failed" in line


@pytest.mark.usefixtures("cli_env")
async def test_cli_setup_with_temporal_unreachable_is_one_line_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", "127.0.0.1:1")
    assert "setup: cannot reach Temporal at 127.0.0.1:1" in await setup_error(capsys)


async def test_cli_unreachable_database_is_one_line_exit_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", "127.0.0.1:1")
    assert await run_cli("status", "--thread", "t") == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("threadwarden: error:")


async def test_cli_inconsistent_settings_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADWARDEN_ALARM_BACKOFF_BASE_MS", "500")
    monkeypatch.setenv("THREADWARDEN_ALARM_BACKOFF_CAP_MS", "100")
    assert await run_cli("status", "--thread", "t") == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "threadwarden: error: settings: alarm_backoff_cap_ms: expected at least"
        " alarm_backoff_base_ms"
    )


@pytest.mark.usefixtures("cli_env", "worker")
async def test_cli_rebuild_projection_drops_summaries_and_the_passes_rebuild_them(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    await client.submit(ids, agent_id="scripted", input=[{"say": "summarised"}])
    await eventually(
        lambda: client.thread_summary(ids),
        lambda s: s is not None and s.states == {"settled": 1},
        what="the summary after the settlement",
    )
    assert await run_cli("rebuild-projection", ids, "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"host_id": ids, "rebuilding": True}
    await eventually(
        lambda: client.thread_summary(ids),
        lambda s: s is not None and s.states == {"settled": 1},
        what="the summary rebuilt by a pass",
    )
    assert await run_cli("rebuild-projection", f"{ids}-nobody") == 1  # NotFound
    assert "no host" in capsys.readouterr().err
    assert await run_cli("rebuild-projection", "bad id!") == 2
