"""`threadwarden console` and the console `threadwarden dev` starts, as real processes."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers.polling import eventually

CLI = [sys.executable, "-m", "threadwarden.cli.main"]
pytestmark = pytest.mark.xdist_group("usual-ports")
"""Stacks of `dev` and `demo` take Temporal's usual ports when free: under xdist, the tests that
start one run one after the other on one worker (`make test` runs with `--dist loadgroup`)."""
CONSOLE_LINE = re.compile(r"^ *console +(http://127\.0\.0\.1:\d+)$")


async def _console_url(process: asyncio.subprocess.Process) -> str:
    """The URL from the process's ``console http://…`` line (other lines skipped)."""
    assert process.stdout is not None
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=120)
        if not line:
            raise AssertionError(f"no console line; exit {await process.wait()}")
        found = CONSOLE_LINE.match(line.decode().rstrip("\n"))
        if found:
            return found.group(1)


async def _interrupt(process: asyncio.subprocess.Process) -> tuple[int, str]:
    if process.returncode is None:
        process.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, err.decode()


async def test_console_command_serves_the_configured_ledger_until_interrupted(
    cli_env: None,
) -> None:
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "console",
        "--address",
        "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        url = await _console_url(process)
        async with httpx.AsyncClient(base_url=url) as http:
            inbox = await http.get("/inbox", params={"format": "json"})
            assert inbox.status_code == 200 and set(inbox.json()) == {"entries", "more"}
    finally:
        code, err = await _interrupt(process)
    assert code == 0, err[-2000:]


async def test_console_command_refuses_a_public_address_without_a_token(cli_env: None) -> None:
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "console",
        "--address",
        "0.0.0.0:0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2 and out == b""
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "console_address" in lines[0], err.decode()
    assert "THREADWARDEN_CONSOLE_TOKEN" in lines[0]


async def test_dev_starts_the_console_prints_and_records_its_url(tmp_path: Path) -> None:
    data_dir = tmp_path / "tw"
    dev = await asyncio.create_subprocess_exec(
        *CLI,
        "--data-dir",
        str(data_dir),
        "dev",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        url = await _console_url(dev)
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
    finally:
        code, err = await _interrupt(dev)
    assert code == 0, err[-2000:]
