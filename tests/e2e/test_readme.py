"""The README's first screen and docs/agents.md's first example run as pasted, in a fresh clone
and a fresh shell (issue 30, item 4).

The clone is `git clone` of this checkout's commit. Its ``.venv`` is a new virtual environment
that borrows this checkout's installed packages (a ``.pth`` file) and has its own
``threadwarden`` script and the Makefile's install stamp: a pip install would take minutes and
need the network, and the code that runs is this commit's either way. Each shell starts from an
empty environment (``env -i``: no venv on PATH, no THREADWARDEN_* settings), as a newcomer's
terminal does. `make test` itself, the first screen's second command, is what runs this test.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.chat_server import chat_server
from tests.helpers.polling import eventually

pytestmark = pytest.mark.xdist_group("usual-ports")

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(path: Path, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in a Markdown file, in order."""
    return [body for lang, body in FENCE.findall(path.read_text()) if lang == language]


def commands(block: str) -> list[str]:
    """A shell block's commands: its lines without comments, continuations joined."""
    joined = block.replace("\\\n", " ")
    lines = [line.split("  #")[0].split(" # ")[0].rstrip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.lstrip().startswith("#")]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A fresh clone of this commit with a ready ``.venv`` (see the module's docstring)."""
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(target)], check=True)
    venv = target / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    ours = sysconfig.get_paths()["purelib"]
    (venv / "lib" / version / "site-packages" / "borrowed.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n"
    )
    for tool in Path(sys.executable).parent.iterdir():  # the `temporal` binary among them
        if not (venv / "bin" / tool.name).exists() and tool.name != "threadwarden":
            (venv / "bin" / tool.name).symlink_to(tool)
    script = venv / "bin" / "threadwarden"
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\n"
        "from threadwarden.cli.main import main\nraise SystemExit(main())\n"
    )
    script.chmod(0o755)
    subprocess.run(["make", "-n", "demo"], cwd=target, check=True, capture_output=True)
    (venv / ".installed").touch()  # after the Makefile listed the sources: nothing to install
    return target


def fresh_shell(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a new terminal: PATH without any venv, no settings."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **extra}


async def run(script: str, cwd: Path, env: dict[str, str], timeout_s: float) -> str:
    """Run ``script`` in ``bash`` there; its output (stdout and stderr) once it exits 0."""
    process = await asyncio.create_subprocess_exec(
        "bash", "-euo", "pipefail", "-c", script, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    text = out.decode()
    assert process.returncode == 0, f"{script}\n--- exit {process.returncode}:\n{text[-3000:]}"
    return text


async def started(
    script: str, cwd: Path, env: dict[str, str]
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Start ``script`` (a long-running command) in its own process group; Ctrl-C it after, as
    a terminal does (``make`` and ``bash`` die of the signal: exit -2; the stack must have
    stopped cleanly, its ``stack.json`` gone, no traceback)."""
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", script, cwd=cwd, env=env, start_new_session=True,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGINT)
        out, _ = await asyncio.wait_for(process.communicate(), 90)
        text = out.decode()
        assert process.returncode in (0, -signal.SIGINT), text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        assert not (cwd / ".threadwarden" / "stack.json").exists(), text[-3000:]


async def _api_up(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as http:
            return (await http.get(f"{url}/v1/openapi.json")).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.no_ledger_check(reason="the stacks are the clone's own, gone when they stop")
async def test_the_readme_first_screen_runs_as_pasted(clone: Path, tmp_path: Path) -> None:
    first, api = blocks(clone / "README.md", "sh")[:2]
    assert commands(first) == ["make demo", "make test"]  # `make test` is this run
    demo = await run("make demo", clone, fresh_shell(tmp_path), timeout_s=300)
    assert "settled 22/22" in demo and "22 submissions on 12 threads in all" in demo
    hint = demo.strip().splitlines()[-1].strip()
    assert hint.startswith(".venv/bin/threadwarden --data-dir ")  # runs without an activated venv

    dev, *shell_two = commands(api)
    assert dev.startswith("THREADWARDEN_CONSOLE_ADDRESS=127.0.0.1:8470 make dev")
    url = "http://127.0.0.1:8470"
    async for process in started(dev, clone, fresh_shell(tmp_path)):
        await eventually(lambda: _api_up(url), bool, timeout_s=120, what="make dev's API")
        out = await run("\n".join(shell_two), clone, fresh_shell(tmp_path), timeout_s=60)
        assert '"outcome":"completed"' in out and '"said":["hello"]' in out, out
        assert process.returncode is None  # the stack ran throughout


@pytest.mark.no_ledger_check(reason="the stack is the clone's own, gone when it stops")
async def test_the_agents_guide_first_example_runs_as_pasted(clone: Path, tmp_path: Path) -> None:
    guide = REPO / "docs" / "agents.md"
    (clone / "support.py").write_text(blocks(guide, "python")[0])
    setup = next(b for b in blocks(guide, "sh") if "--bindings support:bindings" in b)
    export, dev, submit, *_ = commands(setup)
    assert export.startswith("export OPENAI_BASE_URL=")
    assert dev == "threadwarden dev --bindings support:bindings"
    assert submit.startswith("threadwarden submit t1 --agent support")
    activate = ". .venv/bin/activate"  # the README's way to a `threadwarden` command
    async with chat_server() as model:
        ours = f"export OPENAI_BASE_URL={model.url} OPENAI_API_KEY=unused MODEL=scripted"
        async for _ in started(f"{activate}\n{ours}\n{dev}", clone, fresh_shell(tmp_path)):

            async def submitted() -> str:
                probe = await asyncio.create_subprocess_exec(
                    "bash", "-c", f"{activate}\n{submit} --wait 60", cwd=clone,
                    env=fresh_shell(tmp_path), stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                out, _ = await probe.communicate()
                return out.decode() if probe.returncode == 0 else ""

            out = await eventually(submitted, bool, timeout_s=120, what="the turn completed")
    assert "completed:" in out and "echo: Where is order 42?" in out, out
    assert shlex.split(submit)[-1] == '"Where is order 42?"'
