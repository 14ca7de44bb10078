"""``python -m bench --shape agent --stream``: its flags, the reader's delta events, the time to
first delta per turn, and how it is reported (no services needed)."""

from __future__ import annotations

import json

import pytest
from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)

from bench import agent_report, sse
from bench.agent_report import AgentRun
from bench.agent_sides import first_deltas, turn_latencies
from bench.agent_support import ANSWER_WORDS, SHIPPED, first_text
from bench.cli import parse_args
from bench.side import Shape


def test_the_stream_flag_and_its_readers() -> None:
    assert (parse_args([]).stream, parse_args([]).readers) == (False, 0)
    args = parse_args(["--shape", "agent", "--stream"])
    assert (args.stream, args.readers) == (True, 1)
    assert parse_args(["--shape", "agent", "--stream", "--readers", "0"]).readers == 0
    assert parse_args(["--shape", "agent", "--stream", "--readers", "3"]).readers == 3


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--stream"], "--stream"),  # the scripted shape has no model
        (["--shape", "agent", "--stream", "--soak", "10"], "--stream"),
        (["--shape", "agent", "--readers", "2"], "--readers"),
        (["--shape", "agent", "--stream", "--readers", "-1"], "--readers"),
    ],
)
def test_bad_stream_flags_exit_2(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2
    assert named in capsys.readouterr().err


def test_the_answer_streams_in_about_twenty_chunks() -> None:
    answer = f"final: order 3-4 {SHIPPED}"
    assert len(answer.split()) == ANSWER_WORDS == 20


def test_the_bare_agents_first_chunk_is_the_first_text_of_the_answer() -> None:
    assert not first_text(PartStartEvent(index=0, part=ToolCallPart("lookup", "{}")))
    assert not first_text(PartStartEvent(index=0, part=TextPart("")))
    assert first_text(PartStartEvent(index=0, part=TextPart("final:")))
    assert not first_text(PartDeltaEvent(index=0, delta=TextPartDelta("")))
    assert first_text(PartDeltaEvent(index=0, delta=TextPartDelta(" order")))


def _delta(submission: str, text: str, *, restart: bool = False, step: int = 3) -> bytes:
    data = json.dumps({"submission_id": submission, "step": step, "text": text, "restart": restart})
    return f"event: delta\ndata: {data}\n\n".encode()


def test_the_reader_counts_deltas_and_times_each_submissions_first() -> None:
    stream = sse.Stream("t")
    stream.feed(b": live\n\n" + _delta("s1", "final:"))
    first = stream.first_delta["s1"]
    record = json.dumps({"sequence": 1, "kind": "tool-result"})
    stream.feed(_delta("s1", " order")[:9])  # a message cut across reads
    stream.feed(_delta("s1", " order")[9:] + f"event: record\nid: 1\ndata: {record}\n\n".encode())
    stream.feed(_delta("s2", "final:") + b"event: delta\ndata: not json\n\n")
    assert (stream.deltas, stream.events, stream.last, stream.out_of_order) == (4, 1, 1, 0)
    assert stream.first_delta["s1"] == first <= stream.first_delta["s2"]
    got = sse.result([stream], {"t": 1}, 0.0)
    assert got["deltas_received"] == 4
    assert [sub for sub, _ in got["first_deltas"]] == ["s1", "s2"]
    assert got["restarted_steps"] == 0


def test_the_readers_count_each_restarted_step_once() -> None:
    one, other = sse.Stream("t"), sse.Stream("t")  # two readers of the thread
    for stream in (one, other):
        stream.feed(_delta("s1", "final:") + _delta("s1", "final:", restart=True))
    one.feed(_delta("s1", "order", step=5) + _delta("s1", "order", step=5, restart=True))
    assert sse.result([one, other], {}, 0.0)["restarted_steps"] == 2


SUBMITTED = {
    "a0": ("ta", 0, 100.0),
    "a1": ("ta", 1, 100.0),  # admitted at once: it starts when a0 settled
    "b0": ("tb", 0, 100.5),
    "b1": ("tb", 1, 103.0),  # submitted after b0 settled: from its submit
}


def test_a_turn_starts_at_its_submit_or_its_threads_previous_settlement() -> None:
    settled = {"a0": 101.0, "a1": 102.0, "b0": 101.5, "b1": 104.0}
    first = [("a0", 100.2), ("a1", 101.3), ("b0", 100.6), ("a0", 100.25)]  # two readers of ta
    samples, missing = first_deltas(SUBMITTED, settled, first)
    assert [round(ms) for ms in samples] == [200, 300, 100, 250]
    assert missing == 1  # b1 reached no reader


def test_a_turns_latency_runs_from_its_start_to_its_settlement() -> None:
    settled = {"a0": 101.0, "a1": 102.5, "b0": 101.5}  # b1 has not settled
    assert [round(ms) for ms in turn_latencies(SUBMITTED, settled)] == [1000, 1500, 1000]


def _tw(first: list[float] | None, missing: int | None = 0, restarted: int | None = 0) -> AgentRun:
    run = AgentRun("threadwarden", 10, completed=10, seconds=2.0, cpu_s=0.5, model_requests=20)
    run.statements, run.history_events, run.console_statements = 300, 90, 40
    run.first_delta_ms, run.turns_without_delta, run.deltas_received = first, missing, 90
    run.restarted_steps = restarted
    run.servers_cpu_s = {"temporal": 0.1, "postgres": 0.2, "console": 0.05, "readers": 0.01}
    return run


def _bare(first: list[float] | None) -> AgentRun:
    run = AgentRun("bare", 10, completed=10, seconds=1.0, cpu_s=0.2, model_requests=20)
    run.first_delta_ms = first
    return run


def test_stream_figures_medians_ratio_and_budget(shape: Shape) -> None:
    runs = {
        "threadwarden": [_tw([150.0] * 9 + [400.0]), _tw([130.0] * 10), _tw([170.0] * 10)],
        "bare": [_bare([100.0] * 10), _bare([90.0] * 10), _bare([110.0] * 10)],
    }
    data = agent_report.result(runs, shape, stream=True, readers=1)
    json.dumps(data)
    tw, bare = data["threadwarden"], data["bare"]
    # medians of each run's
    assert tw["first_delta_ms"] == {"p50": 150.0, "p95": 170.0, "max": 170.0}
    first = {"p50": 150.0, "p95": 400.0, "max": 400.0, "n": 10}
    assert tw["repetitions"][0]["first_delta_ms"] == first
    assert bare["first_delta_ms"] == {"p50": 100.0, "p95": 100.0, "max": 100.0}
    assert (data["stream"], data["readers"], data["first_delta_ratio"]) == (True, 1, 1.5)
    assert data["first_delta_budget_ms"] == 200.0 and data["first_delta_within_budget"]
    assert (tw["deltas_per_unit"], tw["console_sql_statements_per_unit"]) == (9.0, 4.0)
    assert tw["servers_cpu_ms_per_unit"]["console"] == 5.0
    assert tw["restarted_steps"] == 0 and tw["repetitions"][0]["restarted_steps"] == 0
    assert agent_report.complete(data)
    text = agent_report.table(data)
    assert "stream readers/thread=1" in text
    assert "steps restarted (all reps)" in text
    assert "first delta p50 ms" in text and "console SQL/turn (apart)" in text
    assert "first delta max ms" in text
    assert "(first delta p50): 1.50; budget 1.5 x bare + 50 ms = 200.0 ms: within" in text


def test_turns_that_reach_no_reader_are_incomplete(shape: Shape) -> None:
    runs = {"threadwarden": [_tw([], missing=10)], "bare": [_bare([100.0])]}
    data = agent_report.result(runs, shape, stream=True, readers=1)
    assert data["threadwarden"]["first_delta_ms"] is None
    assert data["first_delta_within_budget"] is None
    assert not agent_report.complete(data)
    assert "some turns reached no reader as live text" in agent_report.table(data)


def test_restarted_steps_add_up_over_repetitions_and_are_incomplete(shape: Shape) -> None:
    runs = {
        "threadwarden": [_tw([150.0], restarted=1), _tw([150.0], restarted=2)],
        "bare": [_bare([100.0]), _bare([100.0])],
    }
    data = agent_report.result(runs, shape, stream=True, readers=1)
    assert data["threadwarden"]["restarted_steps"] == 3
    assert not agent_report.complete(data)
    assert "some steps started over" in agent_report.table(data)
    uncounted = {"threadwarden": [_tw([150.0], restarted=None)], "bare": [_bare([100.0])]}
    assert not agent_report.complete(agent_report.result(uncounted, shape, stream=True, readers=1))


def test_without_stream_no_stream_rows(shape: Shape) -> None:
    runs = {"threadwarden": [_tw(None, None, None)], "bare": [_bare(None)]}
    data = agent_report.result(runs, shape)
    assert (data["stream"], data["readers"], data["first_delta_ratio"]) == (False, 0, None)
    assert agent_report.complete(data)
    assert "first delta" not in agent_report.table(data)
