"""Hostile values on every input path of the client and the CLI: SQL metacharacters, NUL bytes,
10 MB strings, 100k-level nesting, non-UTF-8 bytes, non-finite and huge numbers. Each is refused
with one line naming the field (one JSON object under ``--json``), exit code 2, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers.cli import run_cli
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[2]
TABLES = (
    "hosts",
    "threads",
    "submissions",
    "records",
    "publications",
    "thread_summaries",
    "messages",
)
SQL = "'; DROP TABLE threadwarden.submissions; --"
NUL = "a\x00b"
HUGE = "x" * 10_000_000
NON_UTF8 = os.fsdecode(b"t\xff\xfe")  # how non-UTF-8 bytes of argv reach Python
ESCAPE = "\x1b[2J\x1b[31mred"


def nested(levels: int) -> Any:
    """A list nested ``levels`` deep, built without recursion."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


DEEP = nested(100_000)
DEEP_TEXT = "[" * 30_000 + "]" * 30_000  # under the 64 KiB limit, past Python's recursion limit
HOSTILE_IDS = [SQL, NUL, HUGE, NON_UTF8, "", ESCAPE]
HOSTILE_INPUTS = [
    DEEP,
    {"text": NUL},
    {NUL: 1},
    {"text": NON_UTF8},
    HUGE,
    10**5000,
    float("inf"),
    float("nan"),
    {1: "non-string key"},
    {"not json": object()},
]


async def row_counts(pool: asyncpg.Pool[Any]) -> dict[str, int]:
    return {
        table: int(await pool.fetchval(f"SELECT count(*) FROM threadwarden.{table}"))
        for table in TABLES
    }


Call = Callable[[ThreadwardenClient, str, Any], Awaitable[object]]
"""A client call given the client, a real queued submission id and the hostile value."""


def _api_cases() -> list[tuple[str, str, Call, Any]]:
    cases: list[tuple[str, str, Call, Any]] = []

    def add(name: str, field: str, call: Call, values: list[Any]) -> None:
        cases.extend((f"{name}-{i}", field, call, value) for i, value in enumerate(values))

    ids = HOSTILE_IDS
    add("submit-thread", "thread", lambda c, s, v: c.submit(v, agent_id="a", input=1), ids)
    add("submit-agent", "agent", lambda c, s, v: c.submit("t", agent_id=v, input=1), ids)
    add("submit-host", "host", lambda c, s, v: c.submit("t", agent_id="a", input=1, host_id=v), ids)
    add(
        "submit-key",
        "idempotency_key",
        lambda c, s, v: c.submit("t", agent_id="a", input=1, idempotency_key=v),
        ids,
    )
    add(
        "submit-digest",
        "agent_digest",
        lambda c, s, v: c.submit("t", agent_id="a", input=1, agent_digest=v),
        ids,
    )
    add("approve", "submission", lambda c, s, v: c.approve(v), ids)
    add("deny", "submission", lambda c, s, v: c.deny(v), ids)
    add("abort", "submission", lambda c, s, v: c.abort(v), ids)
    add("resolve", "submission", lambda c, s, v: c.resolve(v, "not-run"), ids)
    add("thread-status", "thread", lambda c, s, v: c.thread_status(v), ids)
    add("thread-summary", "thread", lambda c, s, v: c.thread_summary(v), ids)
    add("messages-sent", "thread", lambda c, s, v: c.messages_sent(v), ids)
    add("records", "thread", lambda c, s, v: c.records(v), ids)
    add("host-status", "host", lambda c, s, v: c.host_status(v), ids)
    add("rebuild", "host", lambda c, s, v: c.rebuild_projection(v), ids)
    add("wake", "host", lambda c, s, v: c.wake(v), ids)
    inputs = HOSTILE_INPUTS
    add("submit-input", "input", lambda c, s, v: c.submit("t", agent_id="a", input=v), inputs)
    add("resolve-result", "result", lambda c, s, v: c.resolve(s, "ran", v), inputs)
    reasons = [NUL, HUGE, NON_UTF8, ESCAPE, "two\nlines", 42]
    add("deny-reason", "reason", lambda c, s, v: c.deny(s, v), reasons)
    add("resolve-outcome", "outcome", lambda c, s, v: c.resolve(s, v), [SQL, None])
    add("resolve-unasked", "result", lambda c, s, v: c.resolve(s, "fail", v), [{"x": 1}])
    add(
        "scripted-sleep",
        "sleep_ms",
        lambda c, s, v: c.submit("t", agent_id="scripted", input=[{"sleep_ms": v}]),
        [-1, 10**30, 1e400, "1000"],
    )
    return cases


API_CASES = _api_cases()


@pytest.fixture
async def waiting(client: ThreadwardenClient, ids: str) -> str:
    """A real submission (no worker runs, so it stays queued) for the operator calls to name."""
    receipt = await client.submit(ids, agent_id="scripted", input=[{"say": "hi"}])
    return receipt.submission_id


async def test_client_refuses_every_hostile_value_by_field_and_writes_nothing(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], waiting: str
) -> None:
    before = await row_counts(pool)
    unrefused = []
    for name, field, call, value in API_CASES:
        try:
            await call(client, waiting, value)
        except InvalidInput as error:
            if field not in error.field or "\n" in str(error):
                unrefused.append(f"{name}: {error}")
        else:
            unrefused.append(f"{name}: accepted")
    assert unrefused == []
    assert await row_counts(pool) == before


async def test_client_stores_sql_metacharacters_in_free_text_verbatim(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    # Free text is data, not an error: parameters keep it out of the SQL.
    script = [{"say": SQL}, {"tool": SQL, "args": {SQL: SQL}}]
    receipt = await client.submit(ids, agent_id="scripted", input=script, idempotency_key="k")
    stored = await pool.fetchval(
        "SELECT input FROM threadwarden.submissions WHERE submission_id = $1",
        receipt.submission_id,
    )
    assert stored == script
    assert (await row_counts(pool))["submissions"] == 1


SUBMIT = ["submit", "t", "--agent", "scripted"]
CLI_CASES: list[tuple[list[str], str]] = [
    # submit: every option, several kinds of hostile value
    (["submit", SQL, "--agent", "scripted", "--input", "[]"], "thread"),
    (["submit", "t", "--agent", NUL, "--input", "[]"], "agent"),
    (["submit", "t", "--agent", "scripted", "--input", "[]", "--host", HUGE], "host"),
    ([*SUBMIT, "--input", "[]", "--idempotency-key", SQL], "idempotency_key"),
    ([*SUBMIT, "--input", "[]", "--agent-digest", NON_UTF8], "agent_digest"),
    ([*SUBMIT, "--input", DEEP_TEXT], "input"),
    ([*SUBMIT, "--input", '[{"say": "a\\u0000b"}]'], "input[0].say"),
    ([*SUBMIT, "--input", '[{"say": "\\ud800"}]'], "input[0].say"),
    ([*SUBMIT, "--input", f'[{{"say": "{NON_UTF8}"}}]'], "input"),
    ([*SUBMIT, "--input", json.dumps(HUGE)], "input"),
    ([*SUBMIT, "--input", "[1e400]"], "input[0]"),
    ([*SUBMIT, "--input", "NaN"], "input"),
    ([*SUBMIT, "--input", "9" * 5000], "input"),
    ([*SUBMIT, "--input", '[{"sleep_ms": -1}]'], "input[0].sleep_ms"),
    ([*SUBMIT, "--input", f'[{{"sleep_ms": {10**30}}}]'], "input[0].sleep_ms"),
    # the operator commands
    (["approve", SQL], "submission"),
    (["deny", NUL], "submission"),
    (["deny", "sub_1", "--reason", NUL], "reason"),
    (["deny", "sub_1", "--reason", HUGE], "reason"),
    (["deny", "sub_1", "--reason", ESCAPE], "reason"),
    (["deny", "sub_1", "--reason", NON_UTF8], "reason"),
    (["abort", HUGE], "submission"),
    (["resolve", NON_UTF8, "--outcome", "fail"], "submission"),
    (["resolve", "sub_1", "--outcome", SQL], "outcome"),
    (["resolve", "sub_1", "--outcome", "ran", "--result", DEEP_TEXT], "result"),
    (["resolve", "sub_1", "--outcome", "ran", "--result", '{"a": "\\u0000"}'], "result.a"),
    (["resolve", "sub_1", "--outcome", "fail", "--result", "1"], "result"),
    # reads and maintenance
    (["status", "--thread", SQL], "thread"),
    (["status", "--host", NUL], "host"),
    (["watch", NON_UTF8], "thread"),
    (["rebuild-projection", HUGE], "host"),
]
NO_JSON_CASES: list[tuple[list[str], str]] = [
    (["worker", "--bindings", SQL], "bindings"),
    (["worker", "--bindings", f"{NUL}:x"], "bindings"),
    (["dev", "--bindings", f"{HUGE}:x"], "bindings"),
    (["--data-dir", NUL, "status", "--thread", "t"], "data_dir"),
]


def _assert_refused(err: str, field: str, *, as_json: bool) -> None:
    assert len(err.strip().splitlines()) == 1, err[:300]
    assert len(err) < 2_000  # the hostile value is never echoed whole
    if as_json:
        report = json.loads(err)
        assert report["exit_code"] == 2
        assert report["field"] == field, report
    else:
        assert err.startswith("threadwarden"), err[:300]
        assert f"{field}: expected" in err or f"argument --{field}" in err, err[:300]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
async def test_cli_refuses_hostile_arguments_by_field_with_exit_2_and_writes_nothing(
    cli_env: None, pool: asyncpg.Pool[Any], capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    before = await row_counts(pool)
    cases = CLI_CASES if as_json else CLI_CASES + NO_JSON_CASES
    for argv, field in cases:
        code = await run_cli(*argv, *(["--json"] if as_json else []))
        captured = capsys.readouterr()
        assert code == 2, (argv[:3], captured.err[:300])
        assert captured.out == ""
        _assert_refused(captured.err, field, as_json=as_json)
    assert await row_counts(pool) == before


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("THREADWARDEN_LEASE_MS", "-1", "lease_ms"),
        ("THREADWARDEN_PASS_DEADLINE_MS", str(10**30), "pass_deadline_ms"),
        ("THREADWARDEN_MAX_INPUT_BYTES", "1e400", "max_input_bytes"),
        ("THREADWARDEN_POOL_MAX_SIZE", "-5", "pool_max_size"),
        ("THREADWARDEN_SWEEP_GRACE_MS", SQL, "sweep_grace_ms"),
        ("THREADWARDEN_TASK_QUEUE", NON_UTF8, "task_queue"),
        ("THREADWARDEN_TEMPORAL_NAMESPACE", ESCAPE, "temporal_namespace"),
        ("THREADWARDEN_TEMPORAL_TLS_CA_PATH", "/nonexistent/ca.pem", "temporal_tls_ca_path"),
    ],
)
async def test_cli_refuses_hostile_settings_by_variable_with_exit_2(
    cli_env: None,
    pool: asyncpg.Pool[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    field: str,
) -> None:
    before = await row_counts(pool)
    monkeypatch.setenv(variable, value)
    assert await run_cli(*SUBMIT, "--input", "[]") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"settings: {variable}: " in err
    assert await run_cli(*SUBMIT, "--input", "[]", "--json") == 2
    assert json.loads(capsys.readouterr().err)["field"] == field
    assert await row_counts(pool) == before


async def test_cli_deep_input_is_refused_by_depth_when_the_size_limit_allows_it(
    cli_env: None,
    pool: asyncpg.Pool[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("THREADWARDEN_MAX_INPUT_BYTES", "10485760")
    before = await row_counts(pool)
    assert await run_cli(*SUBMIT, "--input", "[" * 100_000 + "]" * 100_000) == 2
    assert "input: expected JSON nested at most 64 levels deep" in capsys.readouterr().err
    assert await run_cli(*SUBMIT, "--input", json.dumps(nested(65))) == 2  # parses, too deep
    assert "nested at most 64" in capsys.readouterr().err
    assert await row_counts(pool) == before


async def test_cli_refuses_a_stack_file_that_is_not_a_stack_record(
    cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for garbage in [b"\xff\xfe{\x00", b"[" * 100_000, b'{"pid": "1; rm -rf /"}', b"[]"]:
        (tmp_path / "stack.json").write_bytes(garbage)
        assert await run_cli("--data-dir", str(tmp_path), "status", "--thread", "t") == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "data_dir: expected" in err


def test_cli_process_refuses_non_utf8_argv_bytes(tmp_path: Path) -> None:
    """Real argv bytes (not a Python str): the console script path, decoded by the OS layer."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "THREADWARDEN_DATA_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    cases: list[tuple[list[bytes], str]] = [
        ([b"submit", b"t\xff", b"--agent", b"scripted", b"--input", b"[]"], "thread"),
        ([b"submit", b"t", b"--agent", b"scripted", b"--input", b'["\xff\xfe"]'], "input"),
        ([b"deny", b"sub_1", b"--reason", b"\xc3\x28"], "reason"),
    ]
    for argv, field in cases:
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"threadwarden.cli.main", *argv, b"--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr[-500:]
        assert done.stdout == b""
        report = json.loads(done.stderr)
        assert (report["field"], report["exit_code"]) == (field, 2)
