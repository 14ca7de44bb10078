"""Hostile values on every input path of the CLI: its arguments, settings and stack file, and
the bytes of a real argv. Each is refused with one line naming the field (one JSON object under
``--json``), exit code 2, nothing written. The client's twin is
tests/client/test_client_hostile_input.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers.cli import run_cli
from tests.helpers.hostile import ESCAPE, HUGE, NON_UTF8, NUL, SQL, nested, row_counts

ROOT = Path(__file__).resolve().parents[2]
DEEP_TEXT = "[" * 30_000 + "]" * 30_000  # under the 64 KiB limit, past Python's recursion limit

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
@pytest.mark.usefixtures("cli_env")
async def test_cli_refuses_hostile_arguments_by_field_with_exit_2_and_writes_nothing(
    pool: asyncpg.Pool[Any], capsys: pytest.CaptureFixture[str], as_json: bool
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
@pytest.mark.usefixtures("cli_env")
async def test_cli_refuses_hostile_settings_by_variable_with_exit_2(
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


@pytest.mark.usefixtures("cli_env")
async def test_cli_deep_input_is_refused_by_depth_when_the_size_limit_allows_it(
    pool: asyncpg.Pool[Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADWARDEN_MAX_INPUT_BYTES", "10485760")
    before = await row_counts(pool)
    assert await run_cli(*SUBMIT, "--input", "[" * 100_000 + "]" * 100_000) == 2
    assert "input: expected JSON nested at most 64 levels deep" in capsys.readouterr().err
    assert await run_cli(*SUBMIT, "--input", json.dumps(nested(65))) == 2  # parses, too deep
    assert "nested at most 64" in capsys.readouterr().err
    assert await row_counts(pool) == before


@pytest.mark.usefixtures("cli_env")
async def test_cli_refuses_a_stack_file_that_is_not_a_stack_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
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
