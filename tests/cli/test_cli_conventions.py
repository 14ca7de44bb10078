"""CLI conventions: ``--version``, help on every command and flag, every flag and scripted
step in the README's summary, ``--bindings`` and ``--plugins`` resolved from the current folder
as the console script runs them."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from importlib import metadata
from pathlib import Path
from textwrap import dedent

import pytest

from tests.helpers.cli import CONSOLE_SCRIPT, run_cli, user_environment
from tests.helpers.polling import eventually
from tests.helpers.processes import console_worker
from threadwarden.cli.main import build_parser
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.scripted import STEP_KINDS


def _parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_cli_every_command_and_flag_has_help() -> None:
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    listed = {choice.dest: choice.help for choice in commands._choices_actions}
    assert set(listed) == set(commands.choices)
    for name, summary in listed.items():
        assert summary and summary.strip(), f"command {name} has no help"
        assert commands.choices[name].description, f"command {name} has no description"
    for prog, each in _parsers(parser):
        for action in each._actions:
            assert action.help and action.help.strip(), f"{prog} {action.dest}: no help"


def test_the_readme_summary_names_every_flag_and_every_scripted_step() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    summary = readme.split("## The command line", 1)[1].split("```sh\n", 1)[1].split("```")[0]
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{name} {flag}"
        for name, command in commands.choices.items()
        for action in command._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help" and flag not in summary
    ]
    assert not missing, f"README's command summary leaves out {missing}"
    steps = readme.split("The built-in `scripted` binding takes a list of steps", 1)[1]
    steps = steps.split(") so demos", 1)[0]
    assert [k for k in STEP_KINDS.split(", ") if f"`{k}`" not in steps] == []


async def test_cli_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert await run_cli("--version") == 0
    assert capsys.readouterr().out.strip() == f"threadwarden {metadata.version('threadwarden')}"


async def _console(folder: Path, *argv: str) -> tuple[int, str]:
    """Run the installed console script in ``folder``; its exit code and stderr."""
    process = await asyncio.create_subprocess_exec(
        CONSOLE_SCRIPT,
        *argv,
        cwd=folder,
        env=user_environment(folder),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, err.decode()


@pytest.fixture
def app_folder(tmp_path: Path) -> Path:
    """A user's project folder (not on sys.path) holding a broken module, one whose own import
    fails, one with bad plug-ins, and ``myagents.py`` / ``myplugins.py`` that work."""
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "broken.py").write_text('raise RuntimeError("agent table missing")\n')
    (folder / "needsdep.py").write_text("import tw_dependency_not_installed\n")
    (folder / "badplugins.py").write_text(
        dedent("""
            class Sink:
                name = "s"
                async def publish(self, records): ...

            class Host:
                dispatch_timeout_ms = 1000
                async def wave(self, host_id, *, dispatch_until): return False
                async def pending_deadline(self, host_id): return None

            number = 7
            a_class = Sink
            two_hosts = [Host(), Host()]
            empty = []
        """)
    )
    (folder / "myagents.py").write_text(
        dedent("""
            from threadwarden.bindings import Binding
            from threadwarden.scripted import run_scripted

            bindings = [Binding(agent_id="myagent", digest="v1", handler=run_scripted)]
        """)
    )
    (folder / "myplugins.py").write_text(
        dedent("""
            import json
            from pathlib import Path

            class FileSink:
                name = "file"

                def __init__(self, path):
                    self.path = path

                async def publish(self, records):
                    with self.path.open("a") as out:
                        for r in records:
                            row = {"thread_id": r.thread_id, "submission_id": r.submission_id,
                                   "kind": r.kind, "sequence": r.sequence}
                            out.write(json.dumps(row) + "\\n")

            plugins = [FileSink(Path(__file__).with_name("published.jsonl"))]
        """)
    )
    return folder


async def test_cli_bindings_tells_a_missing_module_from_one_that_fails_to_import(
    app_folder: Path,
) -> None:
    code, err = await _console(app_folder, "worker", "--bindings", "absent_module:bindings")
    assert code == 2
    assert err.strip() == (
        "threadwarden: error: bindings: expected an importable module: absent_module not found"
        f" in {app_folder} or sys.path"
    )

    code, err = await _console(app_folder, "worker", "--bindings", "broken:bindings")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "not found" not in err
    assert "importing broken raised RuntimeError: agent table missing" in err

    code, err = await _console(app_folder, "worker", "--bindings", "needsdep:bindings")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (
        "importing needsdep raised ModuleNotFoundError: No module named"
        " 'tw_dependency_not_installed'" in err
    )

    code, err = await _console(app_folder, "-v", "worker", "--bindings", "broken:bindings")
    assert code == 2
    assert 'broken.py", line 1, in <module>' in err  # the traceback under -v
    assert err.strip().splitlines()[-1].startswith("threadwarden: error: bindings: ")

    code, err = await _console(app_folder, "worker", "--bindings", "myagents:nothing_here")
    assert code == 2 and "myagents: it has no 'nothing_here'" in err


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("badplugins:number", "got 'badplugins:number: 7'"),
        ("badplugins:a_class", "instances, not classes"),
        ("badplugins:two_hosts", "at most one host plug-in"),
        ("badplugins:empty", "(empty)"),
        ("absent_module:x", "absent_module not found"),
        ("not a spec", "module:attribute"),
    ],
)
async def test_cli_bad_plugins_exit_2_naming_the_option(
    app_folder: Path, spec: str, expected: str
) -> None:
    code, err = await _console(app_folder, "worker", "--plugins", spec)
    assert code == 2
    assert err.startswith("threadwarden: error: plugins: ") and len(err.strip().splitlines()) == 1
    assert expected in err


@pytest.fixture
async def user_worker(
    app_folder: Path, connections: Connections, settings: Settings
) -> AsyncIterator[str]:
    """``threadwarden worker --bindings myagents:bindings --plugins myplugins:plugins`` run by
    the console script in the user's folder; yields what it printed once ready."""
    env = user_environment(app_folder, connections, settings)
    flags = ["--bindings", "myagents:bindings", "--plugins", "myplugins:plugins"]
    async with console_worker(app_folder, env, *flags) as (_, ready):
        yield ready


async def test_cli_worker_runs_bindings_and_plugins_from_the_current_folder(
    user_worker: str, client: ThreadwardenClient, app_folder: Path, ids: str
) -> None:
    assert "agents: myagent (v1), scripted (scripted-v1)" in user_worker
    receipt = await client.submit(ids, agent_id="myagent", input=[{"say": "hello"}])
    status = await eventually(
        lambda: client.thread_status(ids),
        lambda s: s.submissions[0].state == "settled",
        what="settled",
    )
    assert status.submissions[0].outcome == "completed"
    published = app_folder / "published.jsonl"

    async def rows() -> list[dict[str, object]]:
        text = published.read_text() if published.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    got = await eventually(
        rows,
        lambda found: any(r["submission_id"] == receipt.submission_id for r in found),
        what="the plug-in sink received the submission's records",
    )
    mine = [r for r in got if r["thread_id"] == ids]
    assert {r["submission_id"] for r in mine} == {receipt.submission_id}
    assert len(mine) >= 2  # admission's input record and the settlement at least
