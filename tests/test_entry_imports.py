"""What the application's entry points load (issue 41): the client, the console and the CLI's
read commands stand on the configuration room (`threadwarden.config`), never on the worker, the
activities, the agent adapters or the workflows' code.

The workflows' contract (`threadwarden.workflows.contracts`: the host workflow's name, id,
signal and payloads) and the calls made to it from outside a workflow
(`threadwarden.workflows.client_calls`) are what a Temporal client of the host workflow needs,
as an application's client needs its workflow's name and input type: those two modules load,
no other of `workflows/`. Measured in a fresh process, where nothing else loaded them first.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.helpers.cli import closed_port, user_environment
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings

PROBE = """
import json, sys

def loaded():
    return sorted(name for name in sys.modules if name.startswith("threadwarden"))

from threadwarden import ThreadwardenClient
seen = {"client": loaded()}
import threadwarden.console.app, threadwarden.console.server
seen["console"] = loaded()
from threadwarden.cli.main import main
code = main(["inbox", "--json"])
seen["cli inbox"] = loaded()
print(json.dumps({"code": code, "seen": seen}))
"""
"""Import the client as an application does, then the console, then run ``threadwarden inbox``
(a read command, on the test's Postgres); the package's modules loaded after each step."""

FORBIDDEN_ROOMS = ("worker", "activities", "agents", "workflows")
WORKFLOW_CONTRACT = {
    "threadwarden.workflows",
    "threadwarden.workflows.contracts",
    "threadwarden.workflows.client_calls",
}
"""The modules of `workflows/` a client of the host workflow needs: its package, its contract and
the calls made to it (no workflow code)."""


def _forbidden(modules: list[str]) -> list[str]:
    """The modules of the worker's rooms (and of `workflows/` beyond its contract)."""
    return [
        name
        for name in modules
        if name.split(".")[1:2] and name.split(".")[1] in FORBIDDEN_ROOMS
        if name not in WORKFLOW_CONTRACT
    ]


async def test_entry_imports_client_console_and_cli_reads_load_no_worker_room(
    connections: Connections, settings: Settings, tmp_path: Path
) -> None:
    env = user_environment(tmp_path, connections, settings)
    env["THREADWARDEN_TEMPORAL_ADDRESS"] = f"127.0.0.1:{closed_port()}"  # a read needs none
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROBE,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    report = json.loads(out.decode().splitlines()[-1])
    assert report["code"] == 0, err.decode()  # the read ran, on the test's database
    seen: dict[str, list[str]] = report["seen"]
    client = seen["client"]
    print(f"`from threadwarden import ThreadwardenClient` loads {len(client)} modules")
    assert "threadwarden.client.client" in client  # the probe measured what it names
    assert "threadwarden.config.settings" in client
    for step, modules in seen.items():
        assert _forbidden(modules) == [], step
