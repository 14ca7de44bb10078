"""`threadwarden console` and the console `threadwarden dev` starts, as real processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.console.api import post
from tests.console.helpers import cli_process, console_url_of, interrupt, serving_console
from tests.helpers.polling import eventually

pytestmark = pytest.mark.xdist_group("usual-ports")
"""Stacks of `dev` and `demo` take Temporal's usual ports when free: under xdist, the tests that
start one run one after the other on one worker (`make test` runs with `--dist loadgroup`)."""


async def test_console_command_serves_the_configured_ledger_and_logs_what_the_api_did(
    cli_env: None, ids: str
) -> None:
    process = await cli_process("console", "--address", "127.0.0.1:0")
    try:
        async with httpx.AsyncClient(base_url=await console_url_of(process)) as http:
            inbox = await http.get("/inbox", params={"format": "json"})
            assert inbox.status_code == 200 and set(inbox.json()) == {"entries", "more"}
            body = {"agent": "scripted", "input": [{"say": "hi"}]}
            receipt = await post(http, f"/v1/threads/{ids}/submissions", body)
            assert receipt.status_code == 201, receipt.text
    finally:
        code, err = await interrupt(process)
    assert code == 0, err[-2000:]
    # docs/api.md: "the console logs each call", at INFO, which other commands leave out.
    submission_id = receipt.json()["submission_id"]
    assert (
        f" INFO threadwarden.console.api_threads: api: submit {submission_id} on thread {ids}"
        in err
    )


async def test_console_command_refuses_a_public_address_without_a_token(cli_env: None) -> None:
    process = await cli_process("console", "--address", "0.0.0.0:0")
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2 and out == b""
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "console_address" in lines[0], err.decode()
    assert "THREADWARDEN_CONSOLE_TOKEN" in lines[0]


async def test_dev_starts_the_console_prints_and_records_its_url(tmp_path: Path) -> None:
    data_dir = tmp_path / "tw"
    async with serving_console("--data-dir", str(data_dir), "dev") as url:
        stack_file = data_dir / "stack.json"

        async def recorded() -> str | None:
            if not stack_file.exists():
                return None
            value: str | None = json.loads(stack_file.read_text()).get("console_url")
            return value

        assert await eventually(recorded, bool, timeout_s=30, what="console_url") == url
        async with httpx.AsyncClient(base_url=url) as http:
            threads = await http.get("/", params={"format": "json"})
            assert threads.status_code == 200 and threads.json()["threads"] == []
