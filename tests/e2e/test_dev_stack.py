"""`threadwarden dev` as a user runs it: a real process, found by other commands via stack.json."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.polling import eventually
from threadwarden.worker.embedded import port_from

CLI = [sys.executable, "-m", "threadwarden.cli.main"]
pytestmark = pytest.mark.xdist_group("usual-ports")
"""Stacks of `dev` and `demo` take Temporal's usual ports when free: under xdist, the tests that
start one run one after the other on one worker (`make test` runs with `--dist loadgroup`)."""


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
            if not stack_file.exists() or dev.returncode is not None:
                return False
            return json.loads(stack_file.read_text()).get("api_url") is not None

        await eventually(recorded, bool, timeout_s=90, what="dev stack recorded")
        endpoints = json.loads(stack_file.read_text())
        assert endpoints["ui_url"].startswith("http://127.0.0.1:")
        assert endpoints["api_url"] == endpoints["console_url"] + "/v1"
        async with httpx.AsyncClient(base_url=endpoints["api_url"], timeout=30) as api:
            posted = await api.post(
                "/threads/api-thread/submissions",
                json={"agent": "scripted", "input": [{"say": "over http"}]},
            )
            assert posted.status_code == 201, posted.text
            done = await api.get(
                f"/submissions/{posted.json()['submission_id']}/result", params={"wait": 60}
            )
            assert done.status_code == 200 and done.json()["result"] == {"said": ["over http"]}
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


# --- the stack's processes: SIGHUP, survivors, usual ports -------------------------------------


async def _start_dev(data_dir: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *CLI,
        "--data-dir",
        str(data_dir),
        "dev",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _recorded(data_dir: Path, dev: asyncio.subprocess.Process) -> dict[str, Any]:
    stack_file = data_dir / "stack.json"

    async def probe() -> dict[str, Any] | None:
        if dev.returncode is not None:
            _, err = await dev.communicate()
            said = err.decode(errors="replace")[-1500:] if err else ""
            raise AssertionError(f"dev exited {dev.returncode}: {said}")
        if not stack_file.exists():
            return None
        loaded: dict[str, Any] = json.loads(stack_file.read_text())
        return loaded

    recorded = await eventually(probe, bool, timeout_s=90, what="dev stack recorded")
    assert recorded is not None
    return recorded


async def _gone(pids: list[int]) -> None:
    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    async def living() -> list[int]:
        return [p for p in pids if alive(p)]

    await eventually(living, lambda left: left == [], timeout_s=60, what=f"{pids} gone")


@pytest.mark.no_ledger_check(reason="the dev stack's own database is gone when it stops")
async def test_sighup_stops_every_process_the_dev_stack_started(tmp_path: Path) -> None:
    data_dir = tmp_path / "tw"
    dev = await _start_dev(data_dir)
    try:
        recorded = await _recorded(data_dir, dev)
        started = [recorded["pid"], recorded["temporal_pid"], recorded["postgres_pid"]]
        assert all(isinstance(p, int) for p in started) and started[0] == dev.pid
        dev.send_signal(signal.SIGHUP)  # the terminal closed
        _, err = await asyncio.wait_for(dev.communicate(), timeout=60)
        assert dev.returncode == 0, err.decode()[-2000:]
        await _gone(started)
        assert not (data_dir / "stack.json").exists() and not (data_dir / "stack.pids").exists()
    finally:
        if dev.returncode is None:
            dev.kill()
            await dev.wait()


@pytest.mark.no_ledger_check(reason="the dev stack's own database is gone when it stops")
async def test_a_second_dev_on_a_live_stack_is_refused_naming_its_processes(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "tw"
    first = await _start_dev(data_dir)
    orphans: list[int] = []
    try:
        recorded = await _recorded(data_dir, first)
        second = await _start_dev(data_dir)
        _, err = await asyncio.wait_for(second.communicate(), timeout=60)
        assert second.returncode == 1, err.decode()
        assert f"dev pid {first.pid}" in err.decode(), err.decode()
        assert first.returncode is None  # the running stack is left alone
        # The first dev dies without cleaning up (SIGKILL): its servers live on as orphans.
        first.kill()
        await first.wait()
        orphans = [recorded["temporal_pid"], recorded["postgres_pid"]]
        again = await _start_dev(data_dir)
        _, err = await asyncio.wait_for(again.communicate(), timeout=60)
        message = err.decode()
        assert again.returncode == 1, message
        assert f"temporal pid {recorded['temporal_pid']}" in message, message
        assert f"postgres pid {recorded['postgres_pid']}" in message, message
        assert len(message.strip().splitlines()) == 1, message
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)  # Temporal stops; PostgreSQL does a fast shutdown
        await _gone(orphans)


def _port_free(port: int) -> bool:
    return port_from(port, tries=1) == port


def _sockets_on(port: int) -> str:
    """What holds ``port`` on this machine (for the message of a failed check)."""
    try:
        shown = subprocess.run(
            ["ss", "-tanp", f"sport = :{port}"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"sockets on {port}: unknown ({error})"
    return f"sockets on {port}:\n{shown.stdout}"


# First of the usual-port group: no stack of the tests before it may still hold 7233 while it
# shuts down. (It got 7234 about one full run in three. The likely cause, fixed since: the
# server exited on a port it picks for itself, taken by another test's connection, and the next
# start moved off 7233; it now moves only when 7233 itself is taken. Its log is in the message.)
@pytest.mark.first
@pytest.mark.no_ledger_check(reason="the dev stack's own database is gone when it stops")
async def test_dev_takes_temporals_usual_ports_so_the_temporal_cli_needs_no_flags(
    tmp_path: Path,
) -> None:
    # The stacks of the tests before this one (run on this worker, one after the other) may
    # take a moment to let go of the ports: wait for them, then fail naming what holds them.
    try:
        await eventually(
            lambda: asyncio.sleep(0, _port_free(7233) and _port_free(8233)),
            bool,
            timeout_s=60,
            what="ports 7233 and 8233 free",
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{_sockets_on(7233)}\n{_sockets_on(8233)}") from None
    data_dir = tmp_path / "tw"
    dev = await _start_dev(data_dir)
    try:
        recorded = await _recorded(data_dir, dev)
        log = data_dir / "temporal.log"
        assert recorded["temporal_address"] == "127.0.0.1:7233", (
            f"{_sockets_on(7233)}\nits temporal.log: {log.read_text()[-800:]}"
        )
        assert recorded["ui_url"] == "http://127.0.0.1:8233"
        code, out = await _cli(
            data_dir, "submit", "usual-ports", "--agent", "scripted", "--input", '[{"say": "hi"}]'
        )
        assert code == 0, out
        temporal = str(Path(sys.executable).parent / "temporal")

        async def listed() -> str:
            done = await asyncio.create_subprocess_exec(
                temporal, "workflow", "list", stdout=asyncio.subprocess.PIPE
            )
            stdout, _ = await done.communicate()
            return stdout.decode()

        hosts = await eventually(
            listed, lambda text: "threadwarden-host/usual-ports" in text, what="hosts listed"
        )
        assert "ThreadHost" in hosts
        # With 7233 taken (this stack), a second stack elsewhere takes the next free port.
        other = tmp_path / "other"
        second = await _start_dev(other)
        try:
            beside = await _recorded(other, second)
            port = int(beside["temporal_address"].rpartition(":")[2])
            assert 7233 < port < 7233 + 20
        finally:
            if second.returncode is None:
                second.send_signal(signal.SIGTERM)
            await asyncio.wait_for(second.communicate(), timeout=60)
            assert second.returncode == 0
    finally:
        if dev.returncode is None:
            dev.send_signal(signal.SIGTERM)
        await asyncio.wait_for(dev.communicate(), timeout=60)
    assert dev.returncode == 0
