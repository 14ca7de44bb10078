"""The adapter contract (docs/agents.md, "A new framework"): every framework's folder holds the
same modules, each module defines its role's entry points (or, where the framework lacks the
capability, says why in ``UNSUPPORTED``, and this test records that exception), the binding
factory is the package's, the digest follows the definition, and errors map as documented.
Run for each adapter; no stack needed (a definition is read, nothing runs a turn)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

import httpx2
import openai
import pytest
from agents import Agent as SdkAgent
from agents import MaxTurnsExceeded
from agents import Model as SdkModel
from langchain_core.language_models import BaseChatModel
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, StateGraph
from pydantic_ai import Agent, ModelHTTPError, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from threadwarden.agents._core.budget import BudgetSpent
from threadwarden.agents._core.compaction import TooLong
from threadwarden.bindings import Binding, Failed
from threadwarden.errors import Retryable, StaleAttempt

FILE_SET = (
    "_binding",
    "_model",
    "_tools",
    "_approvals",
    "_memory",
    "_delegation",
    "_errors",
    "_definition",
)
"""The modules every adapter's folder holds, by role (docs/agents.md, "A new framework")."""

Expected = type[Exception] | str | None
"""What ``verdict`` makes of an error: raises `Retryable`, a `Failed` whose reason starts with
the string, or None (raised again for the runtime to judge)."""


@dataclass(frozen=True)
class Adapter:
    """One adapter as the contract sees it."""

    name: str
    """The folder (and the package under ``threadwarden.agents``)."""
    framework: str
    """The digest's prefix."""
    factory: str
    """The binding factory `_binding` defines and the package exports."""
    model_base: type
    """The framework's model class the journaled model of `_model` stands in for."""
    entry_points: dict[str, tuple[str, ...]]
    """Each module's entry points beyond the factory, the model and the uniform names
    (`_memory.MEMORY_KINDS`, `_errors.verdict`, `_definition.read_definition`)."""
    unsupported: frozenset[str]
    """The modules of `FILE_SET` whose capability the framework lacks (``UNSUPPORTED``)."""
    extras: frozenset[str]
    """The framework's modules beyond `FILE_SET`."""
    bindings: Callable[[], tuple[Binding, Binding, Binding]]
    """Two bindings of one definition, and one of a changed definition."""
    errors: tuple[tuple[Exception, Expected], ...]
    """Errors and what `_errors.verdict` makes of each (docs/agents.md, Errors)."""


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("x")])


def _pydantic_ai_bindings() -> tuple[Binding, Binding, Binding]:
    from threadwarden.agents.pydantic_ai import agent_binding

    def agent(instructions: str) -> Agent[None, str]:
        return Agent(FunctionModel(_reply, model_name="m"), name="a", instructions=instructions)

    same = agent_binding(agent("Be brief.")), agent_binding(agent("Be brief."))
    return (*same, agent_binding(agent("Be thorough.")))


def _openai_agents_bindings() -> tuple[Binding, Binding, Binding]:
    from threadwarden.agents.openai_agents import agent_binding

    def agent(instructions: str) -> SdkAgent[Any]:
        return SdkAgent(name="a", instructions=instructions, model="m")

    same = agent_binding(agent("Be brief.")), agent_binding(agent("Be brief."))
    return (*same, agent_binding(agent("Be thorough.")))


class _State(TypedDict, total=False):
    text: str


def _answer(state: _State) -> _State:
    return {"text": "x"}


def _check(state: _State) -> _State:
    return {}


def _langgraph_bindings() -> tuple[Binding, Binding, Binding]:
    from threadwarden.agents.langgraph import graph_binding

    def graph(*, checked: bool) -> StateGraph[_State, None, _State, _State]:
        builder = StateGraph(_State)
        builder.add_node("answer", _answer)
        if checked:
            builder.add_node("check", _check)
            builder.add_edge(START, "check")
            builder.add_edge("check", "answer")
        else:
            builder.add_edge(START, "answer")
        builder.add_edge("answer", END)
        return builder

    first, again = (graph_binding(graph(checked=False), agent_id="g") for _ in range(2))
    return first, again, graph_binding(graph(checked=True), agent_id="g")


def _status(error: type[openai.APIStatusError], status: int) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://model.invalid/v1/responses")
    return error("refused", response=httpx2.Response(status, request=request), body=None)


COMMON: tuple[tuple[Exception, Expected], ...] = (
    (BudgetSpent("1 unit left"), "budget: 1 unit left"),
    (TooLong("m", "too long", 9000), "context: model m refused a request of about 9000"),
    (ValueError("the application's own"), None),
)
"""What every model adapter judges alike (`threadwarden.agents._core.errors.run_failure`)."""

ADAPTERS = (
    Adapter(
        name="pydantic_ai",
        framework="pydantic-ai",
        factory="agent_binding",
        model_base=Model,
        entry_points={
            "_model": ("JournaledModel", "summarize"),
            "_tools": ("JournaledToolset", "journaled"),
            "_approvals": ("deferred_handler",),
            "_memory": ("TRANSCRIPT", "message_history", "transcript", "render"),
            "_delegation": ("delegation_tool",),
        },
        unsupported=frozenset(),
        extras=frozenset(),
        bindings=_pydantic_ai_bindings,
        errors=(
            (ModelHTTPError(503, "m"), Retryable),
            (ModelHTTPError(400, "m", "bad"), "model m rejected the request: HTTP 400: bad"),
            (UsageLimitExceeded("3 requests"), "usage limit: 3 requests"),
            *COMMON,
        ),
    ),
    Adapter(
        name="openai_agents",
        framework="openai-agents",
        factory="agent_binding",
        model_base=SdkModel,
        entry_points={
            "_model": ("JournaledModel",),
            "_tools": ("journaled_agents", "journaled_tool"),
            "_approvals": ("approved",),
            "_memory": ("TRANSCRIPT", "earlier_items", "transcript", "render"),
            "_delegation": ("delegation_tool", "HANDOFF", "Handoffs"),
        },
        unsupported=frozenset(),
        extras=frozenset({"_tracing", "testing"}),
        bindings=_openai_agents_bindings,
        errors=(
            (_status(openai.InternalServerError, 503), Retryable),
            (_status(openai.BadRequestError, 400), "model endpoint rejected the request: HTTP 400"),
            (MaxTurnsExceeded("10 turns"), "usage limit: 10 turns"),
            *COMMON,
        ),
    ),
    Adapter(
        name="langgraph",
        framework="langgraph",
        factory="graph_binding",
        model_base=BaseChatModel,
        entry_points={
            "_model": ("journaled",),
            "_tools": ("journal_tools", "tool_nodes", "running"),
            "_approvals": ("answers",),
            "_memory": ("LedgerSaver",),
            "_delegation": (),
        },
        unsupported=frozenset({"_delegation"}),
        extras=frozenset({"_chain"}),
        bindings=_langgraph_bindings,
        errors=(
            (ConnectionError("reset"), Retryable),
            (GraphRecursionError("Recursion limit of 25 reached"), "graph: Recursion limit"),
            (ValueError("no stock"), "graph raised ValueError: no stock"),
            (StaleAttempt("fenced out"), None),
        ),
    ),
)

by_name = pytest.mark.parametrize("adapter", ADAPTERS, ids=[a.name for a in ADAPTERS])


def _module(adapter: Adapter, name: str) -> ModuleType:
    return importlib.import_module(f"threadwarden.agents.{adapter.name}.{name}")


@by_name
def test_adapter_contract_each_folder_holds_the_file_set(adapter: Adapter) -> None:
    binding = _module(adapter, "_binding").__file__
    assert binding is not None
    folder = Path(binding).resolve().parent  # the source folder, not an editable link tree
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert modules == set(FILE_SET) | adapter.extras


@by_name
def test_adapter_contract_each_module_defines_its_entry_points(adapter: Adapter) -> None:
    model = _module(adapter, "_model")
    journaled = [
        value
        for value in vars(model).values()
        if inspect.isclass(value)
        and issubclass(value, adapter.model_base)
        and value.__module__ == model.__name__
    ]
    assert journaled, f"{adapter.name}._model defines no journaled {adapter.model_base.__name__}"
    assert callable(getattr(_module(adapter, "_binding"), adapter.factory))
    assert isinstance(_module(adapter, "_memory").MEMORY_KINDS, frozenset)
    assert callable(_module(adapter, "_errors").verdict)
    assert callable(_module(adapter, "_definition").read_definition)
    for name, entry_points in adapter.entry_points.items():
        module = _module(adapter, name)
        missing = [e for e in entry_points if not hasattr(module, e)]
        assert not missing, f"{module.__name__} lacks {missing}"


@by_name
def test_adapter_contract_a_lacking_capability_is_recorded_and_said(adapter: Adapter) -> None:
    """Each module says what it holds; the modules whose capability the framework lacks are
    exactly the recorded ones, each says why and defines no entry point."""
    declared = set()
    for name in FILE_SET:
        module = _module(adapter, name)
        assert (module.__doc__ or "").strip(), f"{module.__name__} has no docstring"
        if hasattr(module, "UNSUPPORTED"):
            declared.add(name)
            assert isinstance(module.UNSUPPORTED, str) and module.UNSUPPORTED
            assert not adapter.entry_points.get(name)
    assert declared == adapter.unsupported


@by_name
def test_adapter_contract_the_package_exports_the_binding_factory(adapter: Adapter) -> None:
    package = importlib.import_module(f"threadwarden.agents.{adapter.name}")
    factory = getattr(_module(adapter, "_binding"), adapter.factory)
    assert getattr(package, adapter.factory) is factory
    assert adapter.factory in package.__all__


@by_name
def test_adapter_contract_the_digest_follows_the_definition(adapter: Adapter) -> None:
    first, again, changed = adapter.bindings()
    assert first.digest.startswith(f"{adapter.framework}-")
    assert first.digest == again.digest
    assert changed.digest != first.digest
    assert first.history_kinds == _module(adapter, "_memory").MEMORY_KINDS


@by_name
def test_adapter_contract_errors_map_as_documented(adapter: Adapter) -> None:
    verdict = _module(adapter, "_errors").verdict
    for error, expected in adapter.errors:
        if expected is Retryable:
            with pytest.raises(Retryable):
                verdict(error)
            continue
        judged = verdict(error)
        if expected is None:
            assert judged is None, f"{error!r} judged {judged!r}"
        else:
            assert isinstance(judged, Failed), f"{error!r} judged {judged!r}"
            assert judged.reason.startswith(str(expected)), judged.reason
