"""The Agents SDK binding warns once per process when the SDK's tracing would send traces to
OpenAI without a real key or while the models are served elsewhere (issue 30 item 8), and
stays quiet when tracing is off or a real-looking key goes with OpenAI's own endpoint.

Each test runs on a fresh `DefaultTraceProvider` with no processors (nothing is exported,
whatever the settings say) and puts the SDK's provider and export key back afterwards. The
first example of docs/agents.md, pointed at a local server, turns tracing off: no warning."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    set_tracing_disabled,
    set_tracing_export_api_key,
)
from agents.tracing import get_trace_provider, set_trace_provider
from agents.tracing.processors import default_exporter
from agents.tracing.provider import DefaultTraceProvider
from openai import AsyncOpenAI

from tests.agents.conftest import AgentsWorker
from tests.helpers.chat_server import ChatServer
from threadwarden.agents.openai_agents import _tracing, agent_binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.worker.loading import load_registry
from threadwarden.worker.runtime import running_worker

LOGGER = _tracing.__name__
DOCS = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
REAL_LOOKING = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5kL7nP9rS1uV3x"


@pytest.fixture(autouse=True)
def fresh_tracing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    """No OpenAI settings in the environment, a fresh provider, the warning not given yet (and
    captured when it is: `warnings`)."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_AGENTS_DISABLE_TRACING"):
        monkeypatch.delenv(name, raising=False)
    exporter = default_exporter()
    kept_key = exporter.api_key  # with no key in the environment: only one set in code
    kept_provider = get_trace_provider()
    set_trace_provider(DefaultTraceProvider())  # tracing on, no processors: nothing leaves
    monkeypatch.setattr(_tracing, "_checked", False)
    try:
        yield
    finally:
        set_trace_provider(kept_provider)
        exporter.api_key = kept_key


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING
    ]


@pytest.fixture
def dummy_key_on_a_local_server(monkeypatch: pytest.MonkeyPatch, server: ChatServer) -> ChatServer:
    """The models served by the test's chat server (OPENAI_BASE_URL), with a dummy key."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    return server


def local_agent() -> Agent[Any]:
    """An agent whose client reads OPENAI_BASE_URL and OPENAI_API_KEY, as docs/agents.md's."""
    client = AsyncOpenAI(max_retries=0, timeout=10)
    return Agent(name="local", model=OpenAIChatCompletionsModel("scripted", openai_client=client))


async def test_a_dummy_key_and_a_local_server_warn_once_at_the_first_turn(
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    ids: str,
    dummy_key_on_a_local_server: ChatServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = dummy_key_on_a_local_server
    binding = agent_binding(local_agent())
    assert warnings(caplog) == []  # building it says nothing: the application may still decide
    async with agents_worker(binding):
        for turn in ("hi", "again"):
            receipt = await client.submit(ids, agent_id="local", input=turn)
            result = await client.result(receipt.submission_id, timeout=30)
            assert (result.outcome, result.result) == ("completed", f"echo: {turn}")
    (warned,) = warnings(caplog)
    assert "would be sent to OpenAI" in warned
    assert f"OPENAI_BASE_URL=http://127.0.0.1:{server.port}" in warned
    assert "does not look like an OpenAI key" in warned and "dummy" not in warned
    assert "agents.set_tracing_disabled(True)" in warned
    assert "OPENAI_AGENTS_DISABLE_TRACING=1" in warned


async def test_tracing_disabled_by_the_application_runs_the_turn_without_a_warning(
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    ids: str,
    dummy_key_on_a_local_server: ChatServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_tracing_disabled(True)  # as docs/agents.md shows for a local model
    async with agents_worker(agent_binding(local_agent())):
        receipt = await client.submit(ids, agent_id="local", input="hi")
        assert (await client.result(receipt.submission_id, timeout=30)).result == "echo: hi"
    assert warnings(caplog) == []


@pytest.mark.parametrize(
    ("key", "base_url", "says"),
    [
        ("dummy", None, "does not look like an OpenAI key"),
        ("sk-dummy", None, "does not look like an OpenAI key"),
        ("EMPTY", "http://localhost:8000/v1", "OPENAI_BASE_URL=http://localhost:8000"),
        (None, None, "has no API key"),
        (REAL_LOOKING, "http://127.0.0.1:11434/v1", "OPENAI_BASE_URL=http://127.0.0.1:11434"),
    ],
)
def test_the_warning_names_why_and_comes_once(
    key: str | None,
    base_url: str | None,
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if key is not None:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    if base_url is not None:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    _tracing.warn_if_traces_go_to_openai()
    _tracing.warn_if_traces_go_to_openai()
    (warned,) = warnings(caplog)
    assert says in warned


@pytest.mark.parametrize("base_url", [None, "https://api.openai.com/v1"])
def test_a_real_looking_key_with_openai_itself_does_not_warn(
    base_url: str | None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", REAL_LOOKING)
    if base_url is not None:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    _tracing.warn_if_traces_go_to_openai()
    assert warnings(caplog) == []


def test_tracing_disabled_by_the_environment_does_not_warn(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    _tracing.warn_if_traces_go_to_openai()
    assert warnings(caplog) == []


def test_a_real_key_given_to_the_exporter_in_code_counts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "ollama")  # the model's key: a local server's
    set_tracing_export_api_key(REAL_LOOKING)  # the key the export uses, set in code
    _tracing.warn_if_traces_go_to_openai()
    assert warnings(caplog) == []


async def test_the_docs_first_example_on_a_local_server_answers_without_the_warning(
    settings: Settings,
    connections: Connections,
    failpoints: Failpoints,
    client: ThreadwardenClient,
    ids: str,
    server: ChatServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    example = DOCS.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    assert example.startswith("# support.py")
    (tmp_path / "support.py").write_text(example)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)  # as its table says for a local server
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.setenv("MODEL", "scripted")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "support", raising=False)
    try:
        registry = load_registry("support:bindings")  # as --bindings support:bindings does
        async with running_worker(settings, connections, registry, failpoints=failpoints):
            for agent in ("support", "billing"):
                receipt = await client.submit(f"{ids}{agent}", agent_id=agent, input="hello")
                result = await client.result(receipt.submission_id, timeout=30)
                assert (result.outcome, result.result) == ("completed", "echo: hello")
    finally:
        sys.modules.pop("support", None)
    assert {r["model"] for r in server.requests} == {"scripted"}
    assert warnings(caplog) == []
