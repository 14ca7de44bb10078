"""The agent shape of the bench (``python -m bench --shape agent``): its flag, figures and output
shape, and which model requests count (no services needed but the in-process chat server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import agent_bare, agent_report
from bench.agent_report import AgentRun
from bench.agent_support import WARM_UP, measured_requests, unit_prompt
from bench.cli import parse_args
from bench.side import Shape
from tests.helpers.chat_server import chat_server

SIDE_KEYS = {
    "units_per_s",
    "seconds",
    "cpu_ms_per_unit",
    "model_requests_per_unit",
    "sql_statements_per_unit",
    "history_events_per_unit",
    "turn_ms",
    "completed",
    "units",
    "errors",
    "repetitions",
}


def test_the_shape_flag_defaults_to_scripted_and_takes_agent() -> None:
    assert parse_args([]).shape == "scripted"
    args = parse_args(["--shape", "agent", "--hosts", "2", "--submissions", "3"])
    assert (args.shape, args.hosts, args.submissions) == ("agent", 2, 3)


def test_an_unknown_shape_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parse_args(["--shape", "chat"])
    assert stop.value.code == 2
    assert "invalid choice: 'chat'" in capsys.readouterr().err


def _tw(
    seconds: float, cpu_s: float, *, requests: int = 20, turns: list[float] | None = None
) -> AgentRun:
    run = AgentRun("threadwarden", 10, completed=10, seconds=seconds, cpu_s=cpu_s)
    run.model_requests, run.statements, run.history_events = requests, 180, 90
    run.turn_ms = turns
    return run


def _bare(seconds: float, cpu_s: float, *, turns: list[float] | None = None) -> AgentRun:
    run = AgentRun("bare", 10, completed=10, seconds=seconds, cpu_s=cpu_s, model_requests=20)
    run.turn_ms = turns
    return run


def test_json_shape_medians_and_ratios(shape: Shape) -> None:
    runs = {
        "threadwarden": [_tw(s, 0.5) for s in (1.0, 2.0, 4.0)],
        "bare": [_bare(s, 0.2) for s in (0.5, 0.25, 1.0)],
    }
    data = agent_report.result(runs, shape)
    json.dumps(data)  # serialisable
    assert (data["shape"], data["hosts"], data["submissions"], data["repeat"]) == ("agent", 2, 5, 3)
    for side in agent_report.SIDES:
        assert data[side].keys() >= SIDE_KEYS
    tw, bare = data["threadwarden"], data["bare"]
    assert (tw["units_per_s"], bare["units_per_s"]) == (5.0, 20.0)  # medians of 3
    assert data["ratio"] == 0.25
    assert (tw["cpu_ms_per_unit"], bare["cpu_ms_per_unit"]) == (50.0, 20.0)
    assert data["cpu_ratio"] == 2.5
    assert (tw["sql_statements_per_unit"], tw["history_events_per_unit"]) == (18.0, 9.0)
    assert tw["model_requests_per_unit"] == bare["model_requests_per_unit"] == 2.0
    # the bare agent has no ledger and no Temporal history
    assert bare["sql_statements_per_unit"] is None and bare["history_events_per_unit"] is None
    assert data["same_model_requests"] and agent_report.complete(data)
    text = agent_report.table(data)
    assert "ratio threadwarden/bare (median turns/s): 0.25" in text
    assert "error" not in text


def test_turn_latency_p50_p95_and_max_per_side(shape: Shape) -> None:
    """The tail is visible: one slow turn in twenty moves p95 and max, not p50."""
    slow = [200.0] * 19 + [1_200.0]
    runs = {
        "threadwarden": [_tw(1.0, 0.5, turns=t) for t in (slow, [210.0] * 20, [190.0] * 20)],
        "bare": [_bare(1.0, 0.2, turns=t) for t in ([140.0] * 20, [150.0] * 20, [160.0] * 20)],
    }
    data = agent_report.result(runs, shape)
    json.dumps(data)
    tw, bare = data["threadwarden"], data["bare"]
    assert tw["repetitions"][0]["turn_ms"] == {"p50": 200.0, "p95": 200.0, "max": 1200.0, "n": 20}
    assert tw["turn_ms"] == {"p50": 200.0, "p95": 200.0, "max": 210.0}  # medians of 3
    assert bare["turn_ms"] == {"p50": 150.0, "p95": 150.0, "max": 150.0}
    for run in runs["threadwarden"][1:]:  # two slow turns in twenty, in two repetitions
        run.turn_ms = [200.0] * 18 + [1_100.0] * 2
    tail = agent_report.result(runs, shape)["threadwarden"]["turn_ms"]
    assert tail == {"p50": 200.0, "p95": 1100.0, "max": 1100.0}
    text = agent_report.table(agent_report.result(runs, shape))
    assert all(f"turn {q} ms" in text for q in ("p50", "p95", "max")), text


async def test_the_bare_agent_reports_each_turns_latency() -> None:
    async with chat_server() as server:
        figures = await agent_bare.main(server.url, 2, 3)
    assert figures["turns"] == 6 and len(figures["turn_ms"]) == 6
    assert all(ms > 0 for ms in figures["turn_ms"]), figures


def _users(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "user"]


@pytest.mark.parametrize(("layer", "streamed"), [("adapter", False), ("adapter-live", True)])
async def test_an_adapter_layer_runs_the_binding_on_the_thread_so_far(
    layer: str, streamed: bool
) -> None:
    async with chat_server() as server:
        server.stream_delay_s = 0.0
        figures = await agent_bare.main(server.url, 1, 2, layer=layer)
    assert figures["turns"] == 2
    measured = [b for b in server.requests if WARM_UP not in _users(b)]
    assert len(measured) == 4  # two requests a turn: the tool call, the answer
    # The second turn's requests carry the first turn, rebuilt from its records.
    first, second = unit_prompt(0, 0), unit_prompt(0, 1)
    assert [_users(b) for b in measured] == [[first], [first], [first, second], [first, second]]
    assert {bool(b.get("stream")) for b in measured} == {streamed}


def test_a_model_request_asked_twice_is_incomplete(shape: Shape) -> None:
    runs = {"threadwarden": [_tw(1.0, 0.5, requests=21)], "bare": [_bare(1.0, 0.2)]}
    data = agent_report.result(runs, shape)
    assert not data["same_model_requests"]
    assert not agent_report.complete(data)
    assert "sent different model requests" in agent_report.table(data)


def test_a_failed_side_is_reported_incomplete(shape: Shape) -> None:
    late = AgentRun("threadwarden", 10, completed=4, seconds=120.0, error="timeout: 4/10")
    late.model_requests = 20
    runs = {"threadwarden": [late], "bare": [_bare(1.0, 0.2)]}
    data = agent_report.result(runs, shape)
    assert data["threadwarden"]["completed"] == 4
    assert not agent_report.complete(data)
    assert "threadwarden: error: timeout: 4/10" in agent_report.table(data)


def test_warm_up_requests_are_not_counted() -> None:
    def request(*users: object) -> dict[str, object]:
        return {"messages": [{"role": "user", "content": u} for u in users]}

    requests = [
        request(WARM_UP),
        request([{"type": "text", "text": WARM_UP}]),  # content parts
        request(unit_prompt(0, 0)),
        request(unit_prompt(0, 0), unit_prompt(0, 1)),  # a later turn carries the first
    ]
    assert measured_requests(requests) == 2
