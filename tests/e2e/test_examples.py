"""examples/plugin_app runs as its README says: the application's own worker, with
`ThreadwardenPlugin` on its client, serves its workflow and a threadwarden agent on one task
queue; its starter gets both outcomes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

from tests.helpers.polling import eventually
from tests.helpers.processes import run_to_end
from threadwarden.config.connect import Connections

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin_app"


async def test_the_plugin_example_serves_its_workflow_and_an_agent_on_one_worker(
    connections: Connections, tmp_path: Path
) -> None:
    queue = f"hello-app-{uuid.uuid4().hex[:8]}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("THREADWARDEN_")},
        "DATABASE_URL": connections.database_url,
        "TEMPORAL_ADDRESS": connections.temporal_address,
        "APP_TASK_QUEUE": queue,
        "THREADWARDEN_DATA_DIR": str(tmp_path / "tw"),
    }
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "worker.py", cwd=EXAMPLE, env=env, stdout=stdout, stderr=stderr
        )
    try:

        async def printed() -> str:
            if worker.returncode is not None:
                raise AssertionError(f"worker exited {worker.returncode}: {err.read_text()}")
            return out.read_text()

        await eventually(printed, lambda text: f"worker on {queue}" in text, what="worker ready")
        code, output, errors = await run_to_end(
            sys.executable, "starter.py", cwd=EXAMPLE, env=env, timeout_s=120
        )
        assert code == 0, errors[-3000:]
    finally:
        worker.terminate()
        await worker.wait()
    printed_json = json.loads(output.strip().splitlines()[-1])
    assert printed_json["workflow"] == "Hello, Temporal!"
    submission = printed_json["submission"]
    assert (submission["outcome"], submission["result"]) == (
        "completed",
        {"greeted": "threadwarden"},
    )
    assert "awaits a compatible binding" not in err.read_text()
