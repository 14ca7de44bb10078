"""Where the browser tests find a browser, and what happens without one: a skip naming the fix,
or under ``CI=true`` a failure (CI must run them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.console.browser import MISSING, find_browser, no_browser


def _executable(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_console_browser_prefers_playwrights_own_then_one_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    on_path = _executable(tmp_path, "chromium")
    monkeypatch.setenv("PATH", str(tmp_path))
    own = _executable(tmp_path, "playwright-chrome")
    assert find_browser(str(own)) == str(own)
    assert find_browser(str(tmp_path / "not-downloaded")) == str(on_path)
    on_path.unlink()
    assert find_browser(str(tmp_path / "not-downloaded")) is None


def test_console_browser_missing_is_a_skip_naming_the_fix_outside_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        no_browser()
    message = str(skipped.value)
    assert message == MISSING and "\n" not in message
    assert "apt-get install chromium" in message
    assert "python -m playwright install chromium" in message


def test_console_browser_missing_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        no_browser()
    message = str(failed.value)
    assert message.startswith(MISSING) and "\n" not in message


PROBE = """
from tests.console.browser import chromium


async def test_needs_a_browser():
    async with chromium():
        pass
"""


@pytest.mark.parametrize("ci", ["", "true"])
def test_console_browser_missing_shows_in_the_summary(tmp_path: Path, ci: str) -> None:
    """A run with no browser anywhere: the summary names the fix on a SKIPPED line, or (under
    CI=true) the test fails."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent),  # the venv's tools, no browser
        "PLAYWRIGHT_BROWSERS_PATH": str(tmp_path / "no-browsers"),
        "PYTHONPATH": str(root),
        "CI": ci,
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-ra",
            "-o",
            "asyncio_mode=auto",
            "--rootdir",
            str(tmp_path),
            # Its own base temp: a pytest session on the default one makes
            # /tmp/pytest-of-<user> private again (0700), and the embedded Postgres servers of
            # tests running beside it (as user embedded_postgres) lose their data directory.
            "--basetemp",
            str(tmp_path / "base"),
            str(tmp_path / "test_probe.py"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if ci:
        assert done.returncode == 1, done.stdout
        summary = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
        assert len(summary) == 1 and f"test_needs_a_browser - Failed: {MISSING}" in summary[0]
    else:
        assert done.returncode == 0, done.stdout
        summary = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED ")]
        assert len(summary) == 1 and summary[0].endswith(f": {MISSING}"), done.stdout
