"""`--bindings` given several times loads every module it names (issue 30, item 1), and the
worker says which agents it serves, with their digests (item 2): a second `--bindings` no
longer silently replaces the first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.processes import worker_process
from threadwarden.cli.parser import build_parser
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.errors import InvalidInput
from threadwarden.worker.loading import load_registry, served_agents

ALPHA = "tests.helpers.routing_agents:ALPHA"
BETA = "tests.helpers.routing_agents:BETA"
ALPHA_V2 = "tests.helpers.routing_agents:ALPHA_V2"


@pytest.mark.parametrize("command", ["worker", "dev"])
def test_bindings_given_twice_loads_both_modules(command: str) -> None:
    args = build_parser().parse_args([command, "--bindings", ALPHA, "--bindings", BETA])
    registry = load_registry(args.bindings)
    assert registry.agent_ids() == ["alpha", "beta", "scripted"]
    assert served_agents(registry) == "alpha (alpha-v1), beta (beta-v1), scripted (scripted-v1)"


def test_an_agent_named_by_two_bindings_flags_is_refused_naming_both() -> None:
    with pytest.raises(InvalidInput) as refused:
        load_registry([ALPHA, ALPHA_V2])
    assert refused.value.field == "bindings"
    assert ALPHA in str(refused.value) and ALPHA_V2 in str(refused.value)


async def test_the_worker_refuses_an_agent_given_twice_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await run_cli("worker", "--bindings", ALPHA, "--bindings", ALPHA_V2) == 2
    [line] = capsys.readouterr().err.strip().splitlines()  # one line, naming the field
    assert line.startswith("threadwarden: error: bindings: expected each agent id once"), line


async def test_the_worker_prints_every_agent_it_serves_with_its_digest(
    settings: Settings, connections: Connections, tmp_path: Path
) -> None:
    async with worker_process(settings, connections, tmp_path / "w", bindings=ALPHA):
        printed = (tmp_path / "w" / "stdout").read_text()
    assert (
        f"task queue {settings.task_queue}; agents: alpha (alpha-v1), scripted (scripted-v1)"
        in (printed)
    )
