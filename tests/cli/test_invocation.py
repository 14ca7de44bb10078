"""The command the CLI's hints name (the ``dev`` banner's ``In another shell here: …``) runs
from the shell it was printed in: ``threadwarden`` only when that name on ``PATH`` is the
program itself, else its path (``make dev`` runs ``.venv/bin/threadwarden``, off ``PATH``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from threadwarden.cli.output import invocation


def _program(folder: Path) -> Path:
    folder.mkdir(parents=True)
    program = folder / "threadwarden"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return program


def test_the_hint_names_the_program_as_this_shell_can_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = _program(tmp_path / "repo" / ".venv" / "bin")
    elsewhere = _program(tmp_path / "pipx" / "bin")
    monkeypatch.chdir(tmp_path / "repo")

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # make dev: the venv is not on PATH
    assert invocation(".venv/bin/threadwarden") == ".venv/bin/threadwarden"
    monkeypatch.setenv("PATH", f"{elsewhere.parent}:/usr/bin")  # another one is: not it
    assert invocation(".venv/bin/threadwarden") == ".venv/bin/threadwarden"
    monkeypatch.setenv("PATH", f"{program.parent}:/usr/bin")  # an activated venv
    assert invocation(".venv/bin/threadwarden") == "threadwarden"

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(elsewhere.parent)  # a shell elsewhere: the whole path
    assert invocation(str(program)) == str(program)
    assert invocation("/x/cli/main.py") == f"{sys.executable} -m threadwarden.cli.main"
