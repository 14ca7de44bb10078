"""`threadwarden dev` as a user runs it: a real process, found by other commands via stack.json."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from tests.helpers.polling import eventually

CLI = [sys.executable, "-m", "threadwarden.worker.cli"]


async def _cli(data_dir: Path, *argv: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "--data-dir",
        str(data_dir),
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode()


@pytest.mark.no_ledger_check(
    reason="the ledger is the dev stack's own database, gone when it stops"
)
async def test_dev_stack_serves_submit_and_status_from_the_same_folder(tmp_path: Path) -> None:
    data_dir = tmp_path / "tw"
    dev = await asyncio.create_subprocess_exec(
        *CLI,
        "--data-dir",
        str(data_dir),
        "dev",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stack_file = data_dir / "stack.json"

        async def recorded() -> bool:
            return stack_file.exists() and dev.returncode is None

        await eventually(recorded, bool, timeout_s=90, what="dev stack recorded")
        assert json.loads(stack_file.read_text())["ui_url"].startswith("http://127.0.0.1:")
        code, out = await _cli(
            data_dir,
            "submit",
            "dev-thread",
            "--agent",
            "scripted",
            "--input",
            '[{"say": "hi"}]',
            "--json",
        )
        assert code == 0 and json.loads(out)["created"] is True

        async def states() -> list[str]:
            code, out = await _cli(data_dir, "status", "--thread", "dev-thread", "--json")
            assert code == 0
            return [s["state"] for s in json.loads(out)["submissions"]]

        await eventually(states, lambda s: s == ["settled"], what="settled via the dev worker")
    finally:
        if dev.returncode is None:
            dev.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(dev.communicate(), timeout=60)
    assert dev.returncode == 0, err.decode()[-2000:]
    assert not stack_file.exists()
