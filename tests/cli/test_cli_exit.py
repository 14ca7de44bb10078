"""Short-lived commands, as processes, end with their real exit code and their output flushed.

The Temporal SDK's native threads used to crash a process at interpreter exit after it printed
success (SIGABRT, ``PyGILState_Release``, about 1 in 3 `setup` runs, 1 in 40 `submit` runs);
`threadwarden.cli.main.main` now leaves through ``os._exit`` after flushing. The test runs the
installed console script against a live stack, each short-lived command once, each beside a
`setup` (the likeliest to crash: 11 setups find a 1-in-3 crash with 99% certainty), and counts
the exits. It ran 50 rounds before (61 s, 55 s of CPU, the suite's costliest test); the rounds
beyond one of each command only repeated the bet.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.checks import say, settled
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings

SCRIPT = Path(sys.executable).parent / "threadwarden"
AT_ONCE = 2
"""Rounds running at once: each process exits on its own, whatever runs beside it."""


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    code: int
    out: str
    err: str


async def threadwarden(env: dict[str, str], *argv: str) -> Run:
    """Run the console script once; its exit code and what it printed."""
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return Run(argv, process.returncode, out.decode(), err.decode())


@pytest.mark.slow
@pytest.mark.xdist_group("slow")  # the long, heavy tests one after another
@pytest.mark.timeout(300)  # 22 processes, two at a time (~1 s of CPU each)
@pytest.mark.usefixtures("worker")
async def test_cli_short_lived_commands_exit_with_their_real_code(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    ids: str,
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "THREADWARDEN_DATABASE_URL": connections.database_url,
        "THREADWARDEN_TEMPORAL_ADDRESS": connections.temporal_address,
        "THREADWARDEN_TASK_QUEUE": settings.task_queue,
        "THREADWARDEN_DATA_DIR": str(tmp_path / "none"),
    }
    others: list[tuple[tuple[str, ...], int]] = [
        (("submit", f"{ids}-s", "--agent", "scripted", "--input", '[{"say": "hi"}]'), 0),
        (("status", "--thread", ids), 0),
        (("status", "--host", ids, "--json"), 0),
        (("approve", "…"), 0),
        (("deny", "…", "--reason", "no"), 0),
        (("abort", "…", "--json"), 0),
        (("resolve", "…", "--outcome", "not-run"), 2),
        (("rebuild-projection", ids), 0),
        (("watch", ids, "--no-follow"), 0),
        (("inbox", "--json"), 0),
        (("migrate",), 0),
    ]
    rounds_n = len(others)  # each command once, each beside a setup
    # approve and deny each decide a submission of their own (a second decision on a settled
    # one is refused with exit 2); abort and resolve address one that already settled: a no-op
    # (exit 0) and a handled refusal (exit 2, one line).
    turns = -(-rounds_n // len(others))  # the most times one of them comes round
    approval = [{"approval": "go?"}, {"say": "approved"}]
    waiting = [
        await client.submit(f"{ids}-w{n}", agent_id="scripted", input=approval)
        for n in range(2 * turns)
    ]
    done = await client.submit(ids, agent_id="scripted", input=say("done"))
    for receipt in waiting:
        await eventually(
            lambda r=receipt: client.thread_status(r.thread_id),  # type: ignore[misc]
            lambda s: s.submissions[0].waiting_for == "approval",
            what=f"{receipt.submission_id} waiting for approval",
        )
    await settled(client, ids, 1)
    subject = {
        "approve": iter(r.submission_id for r in waiting[:turns]),
        "deny": iter(r.submission_id for r in waiting[turns:]),
        "abort": iter([done.submission_id] * turns),
        "resolve": iter([done.submission_id] * turns),
    }
    rounds: list[tuple[tuple[str, ...], int]] = []
    for n in range(rounds_n):
        argv, expected = others[n % len(others)]
        if argv[0] in subject:
            argv = (argv[0], next(subject[argv[0]]), *argv[2:])
        rounds.append((argv, expected))
    gate = asyncio.Semaphore(AT_ONCE)

    async def one_round(argv: tuple[str, ...], expected: int) -> list[tuple[Run, int]]:
        async with gate:
            return [
                (await threadwarden(env, "setup"), 0),
                (await threadwarden(env, *argv), expected),
            ]

    runs = [run for done in await asyncio.gather(*(one_round(*r) for r in rounds)) for run in done]

    wrong = [run for run, expected in runs if run.code != expected]
    assert not wrong, "\n".join(f"{r.argv}: exit {r.code}: {r.err[-600:]}" for r in wrong)
    # The output was flushed before the process left: every success printed, every failure
    # wrote its one line.
    assert all(run.out.strip() for run, expected in runs if expected == 0)
    assert all(len(run.err.strip().splitlines()) == 1 for run, expected in runs if expected)
    counts = Counter(run.argv[0] for run, _ in runs)
    assert counts["setup"] == rounds_n
    assert set(counts) == {"setup"} | {argv[0] for argv, _ in others}
