"""What the console tests share: reading the CSRF token off a page, submitting and waiting for
states, and the console command as a process of its own."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tests.helpers.polling import eventually
from threadwarden import Receipt
from threadwarden.client.client import ThreadwardenClient

CLI = [sys.executable, "-m", "threadwarden.cli.main"]
CONSOLE_LINE = re.compile(r"^ *console +(http://127\.0\.0\.1:\d+)$")

_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')


async def csrf_of(http: httpx.AsyncClient, path: str = "/inbox", **kwargs: Any) -> str:
    """The CSRF token the console's page at ``path`` carries in its forms."""
    page = await http.get(path, **kwargs)
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None, page.text
    return found.group(1)


async def settled_state(client: ThreadwardenClient, thread_id: str, submission_id: str) -> str:
    """The submission's state, or its outcome once settled."""
    status = await client.thread_status(thread_id)
    view = next(s for s in status.submissions if s.submission_id == submission_id)
    return view.outcome or view.state


async def wait_for_state(
    client: ThreadwardenClient, thread_id: str, submission_id: str, wanted: str
) -> None:
    """Poll (with a deadline) until the submission reaches ``wanted`` (a state or outcome)."""
    await eventually(
        lambda: settled_state(client, thread_id, submission_id),
        lambda state: state == wanted,
        what=f"{submission_id} {wanted}",
    )


async def submit_until(
    client: ThreadwardenClient, thread_id: str, script: list[dict[str, Any]], wanted: str
) -> Receipt:
    """Submit ``script`` to the ``scripted`` agent on ``thread_id`` and wait until the submission
    reaches ``wanted`` (a state or outcome)."""
    receipt = await client.submit(thread_id, agent_id="scripted", input=script)
    await wait_for_state(client, thread_id, receipt.submission_id, wanted)
    return receipt


async def cli_process(*argv: str) -> asyncio.subprocess.Process:
    """``threadwarden ARGV…`` as a process of its own, its stdout and stderr piped."""
    return await asyncio.create_subprocess_exec(
        *CLI, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def console_url_of(process: asyncio.subprocess.Process) -> str:
    """The URL from the process's ``console http://…`` line (other lines skipped)."""
    assert process.stdout is not None
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=120)
        if not line:
            raise AssertionError(f"no console line; exit {await process.wait()}")
        found = CONSOLE_LINE.match(line.decode().rstrip("\n"))
        if found:
            return found.group(1)


async def interrupt(process: asyncio.subprocess.Process) -> tuple[int, str]:
    """Ctrl-C, as an operator stops it; its exit code and stderr."""
    if process.returncode is None:
        process.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, err.decode()


@asynccontextmanager
async def serving_console(*argv: str) -> AsyncIterator[str]:
    """``threadwarden ARGV…`` (``console``, or ``dev`` which starts one) until it prints its
    console's URL; yields the URL, then interrupts it and asserts that it exited cleanly."""
    process = await cli_process(*argv)
    try:
        yield await console_url_of(process)
    finally:
        code, err = await interrupt(process)
    assert code == 0, err[-2000:]
