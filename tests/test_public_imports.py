"""Public imports keep working while the rooms behind them move (issue 32).

Two lists: every name `threadwarden` exported before the restructuring (its `__all__` at
2d391ed, written out here so that a name dropped from today's `__all__` still fails), and every
`from threadwarden… import …` the README, the docs and the examples show an application.
"""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

EXPORTED_BEFORE = [
    "ApprovalDecision",
    "AttemptContext",
    "Binding",
    "BindingDigestMismatch",
    "BindingRegistry",
    "BindingUnavailable",
    "BudgetExceeded",
    "Completed",
    "ChildConflict",
    "ChildNotSettled",
    "ChildOutcome",
    "DecisionConflict",
    "Failed",
    "HostAllowanceInvalid",
    "HostMaintenance",
    "HostWaveStillRunning",
    "HostMismatch",
    "HostStatus",
    "IdempotencyConflict",
    "InvalidInput",
    "NotFound",
    "NotWaiting",
    "OperatorResult",
    "Outcome",
    "PublicationSink",
    "PoolExhausted",
    "PublishedRecord",
    "Receipt",
    "RecordFeed",
    "ResultTimeout",
    "Retryable",
    "SavedCheckpoint",
    "SchemaVersionMismatch",
    "Settings",
    "StackAlreadyRunning",
    "StackNotFound",
    "StaleAttempt",
    "StalePass",
    "SubmissionResult",
    "SubmissionView",
    "ThreadRecord",
    "ThreadStatus",
    "ThreadwardenClient",
    "ThreadwardenError",
    "ThreadwardenPlugin",
]
"""`threadwarden.__all__` before the worker room was split (issue 32's base, 2d391ed)."""

_IMPORT = re.compile(r"^\s*from (threadwarden[\w.]*) import (\([^)]*\)|[^\n]+)", re.MULTILINE)


def _shown_imports() -> set[tuple[str, str]]:
    """(module, name) for each import of threadwarden the README, docs and examples show."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.py")]
    shown = set()
    for path in files:
        for module, names in _IMPORT.findall(path.read_text()):
            for name in re.findall(r"(\w+)(?:\s+as\s+\w+)?", re.sub(r"#.*", "", names)):
                shown.add((module, name))
    return shown


@pytest.mark.parametrize("name", EXPORTED_BEFORE)
def test_public_imports_each_earlier_export_still_imports_from_threadwarden(name: str) -> None:
    threadwarden = importlib.import_module("threadwarden")
    assert getattr(threadwarden, name) is not None
    assert name in threadwarden.__all__


@pytest.mark.parametrize(("module", "name"), sorted(_shown_imports()))
def test_public_imports_each_import_the_docs_show_works(module: str, name: str) -> None:
    parent = importlib.import_module(module)
    if not hasattr(parent, name):  # `from package import submodule`, as the statement does
        importlib.import_module(f"{module}.{name}")
    assert getattr(parent, name) is not None


def test_public_imports_the_docs_show_the_client_and_the_adapters() -> None:
    """The scan finds what it is for (a broken pattern would pass every case above vacuously)."""
    shown = _shown_imports()
    assert ("threadwarden", "ThreadwardenClient") in shown
    assert ("threadwarden.agents", "pydantic_ai") in shown
    assert ("threadwarden.agents.langgraph", "journaled") in shown
