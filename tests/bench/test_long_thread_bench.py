"""The long-thread shape of the bench (``python -m bench --shape long-thread``): its flags, the
offline model, the deciles and the output shape (no services needed)."""

from __future__ import annotations

import json

import pytest
from pydantic_ai.direct import model_request
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart
from pydantic_ai.models import Model

from bench import long_report
from bench.cli import parse_args
from bench.long_graph import OfflineChatModel
from bench.long_sides import SIDES, LongRun, LongShape, decile_edges
from bench.long_support import (
    ANSWER_CHARS,
    BUDGET_TOKENS,
    INSTRUCTIONS,
    KEEP_TURNS,
    SUMMARY_CHARS,
    answer,
    asks_for_summary,
    long_thread_agent,
    prompt,
)
from bench.sqlstats import Written
from threadwarden.agents._core.compaction import SUMMARY_INSTRUCTIONS

DECILE_KEYS = {
    "turns",
    "p50_ms",
    "p95_ms",
    "bytes_written_per_turn",
    "table_bytes_per_turn",
    "statements_per_turn",
}


def test_the_long_thread_shape_takes_turns() -> None:
    assert parse_args(["--shape", "long-thread"]).turns == 1000
    assert parse_args(["--shape", "long-thread", "--turns", "20"]).turns == 20
    assert parse_args([]).turns is None


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--turns", "20"], "--turns"),  # the other shapes have hosts and submissions
        (["--shape", "agent", "--turns", "20"], "--turns"),
        (["--shape", "long-thread", "--turns", "9"], "--turns"),  # fewer than the deciles
        (["--shape", "long-thread", "--soak", "10"], "--soak"),
        (["--shape", "long-thread", "--stream"], "--stream"),
    ],
)
def test_bad_long_thread_flags_exit_2(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2
    assert named in capsys.readouterr().err


def test_each_turn_adds_about_a_kilobyte_and_a_summary_is_short() -> None:
    first, second = answer(prompt(0)), answer(prompt(1))
    assert len(first) == len(second) == ANSWER_CHARS
    assert first != second  # no two turns alike: compression cannot fold one into another
    assert answer(prompt(0)) == first  # the same on every side
    assert len(answer(prompt(0), summary=True)) == SUMMARY_CHARS


def test_a_summary_request_is_told_by_its_instructions() -> None:
    assert asks_for_summary("Summarize the conversation below. Answer with the summary only.")
    assert not asks_for_summary(INSTRUCTIONS)
    assert not asks_for_summary(f"{INSTRUCTIONS}\nSummary of the conversation so far: …")


async def test_the_agent_and_the_graph_model_answer_the_same() -> None:
    result = await long_thread_agent().run(prompt(3))
    assert result.output == answer(prompt(3))
    assert OfflineChatModel().invoke(prompt(3)).content == answer(prompt(3))


async def test_the_agents_summary_request_gets_a_summary() -> None:
    model = long_thread_agent().model
    assert isinstance(model, Model)
    # as the adapter asks for a summary (agent_frameworks/pydantic_ai/_model.py, summarize)
    request = ModelRequest(parts=[SystemPromptPart(SUMMARY_INSTRUCTIONS), UserPromptPart("…")])
    response = await model_request(model, [request])
    assert len(response.text or "") == SUMMARY_CHARS


def test_decile_edges() -> None:
    assert decile_edges(1000) == list(range(0, 1001, 100))
    assert decile_edges(25) == [0, 2, 5, 7, 10, 12, 15, 17, 20, 22, 25]


def _run(side: str, turns: int = 20, *, growing: bool = False) -> LongRun:
    run = LongRun(side, turns, latencies_ms=[10.0 + n for n in range(turns)])
    total = Written(0, 0, 0)
    run.edges.append(total)
    for k in range(10):
        grown = 1000 * (k + 1) if growing else 1000
        total = Written(total.statements + 20, total.wal_bytes + 2 * grown, total.table_bytes)
        run.edges.append(total)
    return run


def test_json_has_ten_deciles_per_side_and_their_growth() -> None:
    runs = {
        "threadwarden": _run("threadwarden"),
        "bare": LongRun("bare", 20, latencies_ms=[1.0] * 20, edges=[Written(0, 0, 0)] * 11),
        "langgraph_postgres": _run("langgraph_postgres", growing=True),
    }
    runs["threadwarden"].records = {"records": 50, "summaries": 1}
    data = long_report.result(runs, LongShape(20, 60.0))
    json.dumps(data)  # serialisable
    assert (data["shape"], data["turns"]) == ("long-thread", 20)
    assert data["memory"] == {"budget_tokens": BUDGET_TOKENS, "keep_turns": KEEP_TURNS}
    assert data["sides"].keys() == set(SIDES)
    for side in data["sides"].values():
        assert len(side["deciles"]) == 10
        assert all(d.keys() >= DECILE_KEYS for d in side["deciles"])
    tw = data["sides"]["threadwarden"]
    assert tw["deciles"][0] == {
        "turns": [0, 1],
        "p50_ms": 10.5,
        "p95_ms": 10.9,  # interpolated
        "bytes_written_per_turn": 1000,
        "table_bytes_per_turn": 0,
        "statements_per_turn": 10.0,
    }
    assert tw["growth"] == {"p50_ms": round(28.5 / 10.5, 3), "bytes_written_per_turn": 1.0}
    assert data["sides"]["langgraph_postgres"]["growth"]["bytes_written_per_turn"] == 10.0
    assert data["sides"]["bare"]["growth"] == {"p50_ms": 1.0, "bytes_written_per_turn": None}
    assert data["within_bounds"] is False  # the p50 grew 2.7x
    assert long_report.complete(data)
    text = long_report.table(data)
    assert "threadwarden: last decile / first: p50 x2.71, bytes/turn x1.00" in text
    assert "50 records, 1 summaries" in text and "error" not in text
    assert "records" not in data["sides"]["bare"]


def test_a_side_that_stopped_early_keeps_its_deciles_and_is_incomplete() -> None:
    stopped = _run("threadwarden")
    stopped.latencies_ms, stopped.edges = stopped.latencies_ms[:9], stopped.edges[:5]
    stopped.error = "turn 9: TimeoutError: … settled not reached within 60.0s"
    runs = {"threadwarden": stopped, "bare": _run("bare"), "langgraph_postgres": _run("lg")}
    data = long_report.result(runs, LongShape(20, 60.0))
    assert len(data["sides"]["threadwarden"]["deciles"]) == 4
    assert data["sides"]["threadwarden"]["growth"]["p50_ms"] is None
    assert data["within_bounds"] is None and not long_report.complete(data)
    text = long_report.table(data)
    assert "threadwarden: error: turn 9" in text
