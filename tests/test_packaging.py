"""The installed distribution is one import package, `threadwarden` (issue 11).

The repository keeps the design's folders (`api/`, `protocol/`, `workflows/`, `activities/`,
`ledger/`, `worker/`, `client/`, `cli/`, ...) and pyproject.toml maps them into `threadwarden`.
These tests install a copy of the sources non-editable into a fresh virtualenv and look at it
from a neutral folder. The venv borrows the dependencies of the running (dev) venv through a
`.pth` line, which adds that site-packages to the path without running its `.pth` files, so the
editable install's link tree stays out of sight. Offline: no index, no build isolation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = (
    "protocol",
    "workflows",
    "activities",
    "ledger",
    "reading",
    "config",
    "worker",
    "client",
    "cli",
    "console",
    "agent_frameworks",
)
SOURCES = ("pyproject.toml", "README.md", "api", *ROOMS)


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _run(argv: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A fresh venv with a non-editable `pip install .` of a copy of the sources: its python, and
    what the install printed (the build backend's warnings among it)."""
    base = tmp_path_factory.mktemp("packaging")
    source = base / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base
    )
    own = Path(purelib.stdout.strip())
    (own / "_dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    pip += ["--no-deps", "--no-index", "--no-build-isolation", str(source)]
    done = _run(pip, base)
    assert done.returncode == 0, done.stdout + done.stderr
    return python, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(install: tuple[Path, str]) -> Path:
    return install[0]


@pytest.fixture
def neutral(tmp_path: Path) -> Path:
    """An empty folder to run the installed distribution in, the sources out of reach."""
    folder = tmp_path / "neutral"
    folder.mkdir()
    return folder


def _printed(python: Path, code: str, cwd: Path) -> str:
    """What ``code`` prints when ``python`` runs it in ``cwd`` (it must exit 0)."""
    done = _run([str(python), "-c", code], cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_packaging_installed_imports_threadwarden_rooms(installed: Path, neutral: Path) -> None:
    code = (
        "import threadwarden, threadwarden.workflows.host, threadwarden.cli.main, "
        "threadwarden.ledger.pool, threadwarden.activities.attempt, "
        "threadwarden.protocol.decisions;"
        "from importlib import resources;"
        "print(threadwarden.__file__);"
        "print(sorted(p.name for p in resources.files('threadwarden.ledger')"
        ".joinpath('migrations').iterdir())[0]);"
        "print(resources.files('threadwarden').joinpath('py.typed').is_file());"
        "print(all(resources.files('threadwarden.console').joinpath(f).is_file()"
        " for f in ('templates/base.html', 'static/htmx.min.js', 'static/console.js')))"
    )
    where, first_migration, typed, console_files = _printed(installed, code, neutral).split()
    assert Path(where).is_relative_to(installed.parent.parent), "imported from the fresh venv"
    assert first_migration == "0001_initial.sql"
    assert typed == "True"
    assert console_files == "True", "the console's templates and static files are package data"


def test_packaging_build_prints_no_package_data_warnings_and_installs_every_file(
    install: tuple[Path, str], neutral: Path
) -> None:
    """The wheel build (the same build_py as `make`'s editable install) takes the data folders
    (console/static, console/templates, ledger/migrations) as data, not as undeclared packages:
    no setuptools "Package would be ignored" screens in `make demo` (issue 30). And `package-data`
    alone (include-package-data = false) still installs every file of every mapped folder."""
    python, output = install
    for warning in ("would be ignored", "is absent from the `packages`", "as data is deprecated"):
        assert warning not in output, output
    expected = set()
    for package, folder in _pyproject()["tool"]["setuptools"]["package-dir"].items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                relative = path.relative_to(ROOT / folder).as_posix()
                expected.add(f"{package.replace('.', '/')}/{relative}")
    code = (
        "from importlib.metadata import distribution;"
        "print('\\n'.join(str(f) for f in distribution('threadwarden').files or []))"
    )
    printed = _printed(python, code, neutral).split()
    recorded = {f for f in printed if f.startswith("threadwarden/")}
    recorded = {f for f in recorded if "__pycache__" not in f}
    assert recorded == expected


def test_packaging_public_api_is_importable_from_threadwarden_and_stays_light(
    installed: Path, neutral: Path
) -> None:
    code = (
        "import sys, threadwarden;"
        "print(sorted(m for m in ('temporalio', 'asyncpg') if m in sys.modules));"
        "from threadwarden import ThreadwardenClient, ThreadwardenPlugin, SubmissionResult;"
        "from threadwarden import Settings, ThreadStatus, OperatorResult, RecordFeed;"
        "print(ThreadwardenClient.__module__, ThreadwardenPlugin.__module__);"
        "print(all(hasattr(threadwarden, n) for n in threadwarden.__all__))"
    )
    loaded, modules, complete = _printed(installed, code, neutral).strip().splitlines()
    assert loaded == "[]"  # a bindings module imports threadwarden without Temporal or asyncpg
    assert modules == "threadwarden.client.client threadwarden.worker.plugin"
    assert complete == "True"


@pytest.mark.parametrize(
    "name", ["workflows", "activities", "ledger", "config", "worker", "api", "protocol"]
)
def test_packaging_installed_has_no_other_top_level(
    installed: Path, neutral: Path, name: str
) -> None:
    done = _run([str(installed), "-c", f"import {name}"], neutral)
    assert done.returncode != 0
    assert f"No module named '{name}'" in done.stderr


def test_packaging_distribution_top_level_is_threadwarden(installed: Path, neutral: Path) -> None:
    code = (
        "from importlib.metadata import distribution;"
        "d = distribution('threadwarden');"
        "print(repr((d.read_text('top_level.txt') or '').split()));"
        "print(repr(sorted({str(f).split('/')[0] for f in d.files or []"
        " if not str(f).startswith(('..', 'threadwarden-'))})))"
    )
    top_level, recorded = _printed(installed, code, neutral).splitlines()
    assert top_level == "['threadwarden']"
    assert recorded == "['threadwarden']", "RECORD lists files of one top-level package"


def test_packaging_console_script_runs(installed: Path, neutral: Path) -> None:
    done = _run([str(installed.parent / "threadwarden"), "--version"], neutral)
    assert done.returncode == 0, done.stderr
    assert "0.1.0" in done.stdout + done.stderr


def test_packaging_every_package_folder_is_mapped() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    mapped = {folder: package for package, folder in setuptools["package-dir"].items()}
    assert set(mapped) == {"api", *ROOMS}
    expected = set()
    for folder, package in mapped.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            expected.add(".".join((package, *relative)))
    assert set(setuptools["packages"]) == expected, "a new subpackage goes into `packages`"


def test_packaging_public_api_contract_lists_every_api_module() -> None:
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    (public,) = [c for c in contracts if c["name"] == "the public agent API stands alone"]
    modules = {
        f"threadwarden.{p.stem}" for p in (ROOT / "api").glob("*.py") if p.stem != "__init__"
    }
    assert set(public["source_modules"]) == modules
