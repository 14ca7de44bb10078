"""With ``--json`` every failure is one JSON object on stderr, ``{"error", "field", "code",
"exit_code"}``, and nothing on stdout (issue 12, CLI); bad input also writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers.cli import json_error, run_cli


@pytest.mark.parametrize(
    ("argv", "code", "field", "exit_code"),
    [
        (["submit", "t"], "usage", "agent", 2),
        (["submit", "t", "--agent", "scripted", "--input", "{nope"], "invalid_input", "input", 2),
        (
            ["submit", "t", "--agent", "scripted", "--input", '[{"x": 1}]'],
            "invalid_input",
            "input[0]",
            2,
        ),
        (["approve", "bad id"], "invalid_input", "submission", 2),
        (["resolve", "sub_x", "--outcome", "ran"], "invalid_input", "result", 2),
        (["inbox", "--limit", "0"], "invalid_input", "limit", 2),
        (["inbox", "--limit", "many"], "invalid_input", "limit", 2),
        (["approve", "sub_missing"], "not_found", "submission", 1),
        (["abort", "sub_missing"], "not_found", "submission", 1),
        (["status", "--thread", "nobody"], "not_found", "thread", 1),
        (["status", "--host", "nobody"], "not_found", "host", 1),
        (["watch", "nobody", "--no-follow"], "not_found", "thread", 1),
    ],
)
@pytest.mark.usefixtures("cli_env")
async def test_cli_json_error_is_one_object_on_stderr_and_writes_nothing(
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: str,
    field: str,
    exit_code: int,
) -> None:
    assert await run_cli(*argv, "--json") == exit_code
    captured = capsys.readouterr()
    assert captured.out == ""
    report = json_error(captured.err)
    assert (report["code"], report["field"], report["exit_code"]) == (code, field, exit_code)
    assert report["error"] and "\n" not in report["error"]
    assert await pool.fetchval("SELECT count(*) FROM threadwarden.submissions") == 0


async def test_cli_json_error_for_settings_and_services(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("THREADWARDEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("THREADWARDEN_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("THREADWARDEN_DATA_DIR", str(tmp_path / "none"))
    assert await run_cli("status", "--thread", "t", "--json") == 1
    report = json_error(capsys.readouterr().err)
    assert (report["code"], report["field"]) == ("stack_not_found", None)

    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", "postgresql://nobody:secret@127.0.0.1:1/none")
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", "127.0.0.1:1")
    assert await run_cli("inbox", "--json") == 1
    err = capsys.readouterr().err
    report = json_error(err)
    assert (report["code"], report["exit_code"]) == ("error", 1)
    assert "secret" not in err

    monkeypatch.setenv("THREADWARDEN_LEASE_MS", "soon")
    assert await run_cli("status", "--host", "h", "--json") == 2
    report = json_error(capsys.readouterr().err)
    assert (report["code"], report["field"]) == ("invalid_setting", "lease_ms")
    assert report["error"].startswith("settings: THREADWARDEN_LEASE_MS: ")
