"""Stored host-workflow histories must keep replaying against the current workflow code.

A failure here means a change altered the workflow's commands. Nothing has been released, so
there are no patch markers: record fresh histories with
``python -m tests.workflows.record_histories`` (and delete the older host histories) in the
same commit as the change.
"""

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from threadwarden.workflows.host import HostWorkflow
from threadwarden.workflows.sweeper import SweeperWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_host_workflow_replays_stored_history(path: Path) -> None:
    replayer = Replayer(
        workflows=[HostWorkflow, SweeperWorkflow], data_converter=pydantic_data_converter
    )
    history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


def test_replay_histories_are_present() -> None:
    assert len(HISTORIES) >= 2
