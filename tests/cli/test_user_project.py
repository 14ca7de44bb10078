"""A user's Temporal project (its own ``workflows.py``, ``activities.py``, ``worker.py``, laid out
like Temporal's templates) runs ``threadwarden worker --bindings myagents:bindings`` from its
folder: the installed package shadows none of the user's modules (issue 11, Tests)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from textwrap import dedent

import pytest

from tests.helpers.cli import user_environment
from tests.helpers.polling import eventually
from tests.helpers.processes import console_worker
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings

USER_FILES = {
    "workflows.py": """
        from datetime import timedelta

        from temporalio import workflow

        with workflow.unsafe.imports_passed_through():
            from activities import compose_greeting


        @workflow.defn
        class GreetingWorkflow:
            @workflow.run
            async def run(self, name: str) -> str:
                return await workflow.execute_activity(
                    compose_greeting, name, start_to_close_timeout=timedelta(seconds=10)
                )
    """,
    "activities.py": """
        from temporalio import activity


        @activity.defn
        async def compose_greeting(name: str) -> str:
            return f"Hello, {name}!"
    """,
    "worker.py": """
        import asyncio

        from temporalio.client import Client
        from temporalio.worker import Worker

        from activities import compose_greeting
        from workflows import GreetingWorkflow

        TASK_QUEUE = "hello-task-queue"


        async def main() -> None:
            client = await Client.connect("localhost:7233")
            worker = Worker(
                client,
                task_queue=TASK_QUEUE,
                workflows=[GreetingWorkflow],
                activities=[compose_greeting],
            )
            await worker.run()


        if __name__ == "__main__":
            asyncio.run(main())
    """,
    "myagents.py": """
        import activities
        import worker
        import workflows
        from threadwarden import Binding, Completed


        async def greet(context):
            text = await activities.compose_greeting(str(context.input))
            await context.append(
                "message",
                {
                    "text": text,
                    "workflows": workflows.__file__,
                    "worker": worker.__file__,
                    "workflow_class": workflows.GreetingWorkflow.__name__,
                },
            )
            return Completed(result={"greeting": text})


        bindings = [Binding(agent_id="greeter", digest="v1", handler=greet)]
    """,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The user's project folder (not on sys.path, not the repository root)."""
    folder = tmp_path / "project"
    folder.mkdir()
    for name, source in USER_FILES.items():
        (folder / name).write_text(dedent(source).lstrip())
    return folder


async def test_user_project_modules_are_not_shadowed_by_the_installed_package(
    project: Path,
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import workflows; print(workflows.__file__)",
        cwd=project,
        env=user_environment(project),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    assert Path(out.decode().strip()).resolve() == (project / "workflows.py").resolve()


async def test_user_project_runs_threadwarden_worker_with_its_bindings(
    project: Path,
    connections: Connections,
    settings: Settings,
    client: ThreadwardenClient,
    ids: str,
) -> None:
    env = user_environment(project, connections, settings)
    async with console_worker(project, env, "--bindings", "myagents:bindings") as (
        process,
        ready,
    ):
        assert "greeter" in ready
        receipt = await client.submit(ids, agent_id="greeter", input="world")
        status = await eventually(
            lambda: client.thread_status(ids),
            lambda s: s.submissions[0].state == "settled",
            timeout_s=60,
            what="the submission settled",
        )
        assert status.submissions[0].submission_id == receipt.submission_id
        assert status.submissions[0].outcome == "completed"
        result = await client.result(receipt.submission_id, timeout=0)
        records = await client.records(ids)
        assert process.returncode is None, "the worker died while the submission ran"

    messages = [
        r for r in records if r["kind"] == "message" and r["submission_id"] == receipt.submission_id
    ]
    assert len(messages) == 1, records
    body = messages[0]["body"]
    assert body["text"] == "Hello, world!"
    assert body["workflow_class"] == "GreetingWorkflow"
    # the worker process imported the user's own modules, not an installed namesake
    assert Path(body["workflows"]).resolve() == (project / "workflows.py").resolve()
    assert Path(body["worker"]).resolve() == (project / "worker.py").resolve()
    assert result.outcome == "completed"
    assert result.result == {"greeting": "Hello, world!"}

    assert process.returncode == 0, (project / "stderr").read_text()[-2000:]
    stderr = (project / "stderr").read_text()
    assert "Traceback" not in stderr, stderr[-2000:]
    assert "is not a package" not in stderr, stderr[-2000:]
