"""The scripted binding's ``call``/``calls`` steps, without services: their validation (one
line naming the field, as for ``send``) and what the script does with a context's
``call_agent`` (a fake here; the real one is exercised end to end by the demo)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from threadwarden.bindings import AttemptContext, ChildOutcome, Completed
from threadwarden.errors import InvalidInput
from threadwarden.scripted import STEP_KINDS, parse_steps, run_scripted


def test_step_kinds_name_call_calls_spend_and_stream() -> None:
    assert STEP_KINDS.endswith("send, call, calls, spend, stream")


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([{"spend": -1}], "input[0].spend"),
        ([{"spend": True}], "input[0].spend"),
        ([{"call": {"input": [], "budget": "10"}}], "input[0].call.budget"),
        ([{"call": {"input": [], "budget": -2}}], "input[0].call.budget"),
    ],
)
def test_spend_and_budget_must_be_non_negative_integers(
    steps: list[dict[str, object]], field: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_steps(steps)
    assert raised.value.field == field


def test_spend_and_a_call_budget_are_valid_steps() -> None:
    steps = [{"spend": 0}, {"call": {"input": [{"spend": 3}], "budget": 5}}]
    assert parse_steps(steps) == steps


@pytest.mark.parametrize(
    "steps",
    [
        [{"call": {"input": [{"say": "hi"}]}}],
        [{"call": {"thread": "t-child", "agent": "scripted", "input": [], "host": "h1"}}],
        [{"call": {"thread": None, "host": None, "input": []}}],  # null: the defaults
        [{"call": {"agent": "translator", "input": {"text": "not steps: not scripted"}}}],
        [{"calls": [{"input": []}, {"agent": "translator", "input": 3, "thread": "x"}]}],
        [{"call": {"input": [{"calls": [{"input": [{"fail": "nested"}]}]}]}}],
    ],
)
def test_valid_call_steps_pass(steps: list[dict[str, Any]]) -> None:
    assert parse_steps(steps) is steps


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([{"say": "x"}, {"call": "t-child"}], "input[1].call"),
        ([{"call": {"thread": "t-child"}}], "input[0].call"),  # no input
        ([{"call": {"input": [], "to": "t"}}], "input[0].call"),  # an unknown key
        ([{"call": {"input": [], "thread": "bad id"}}], "input[0].call.thread"),
        ([{"call": {"input": [], "agent": ""}}], "input[0].call.agent"),
        ([{"call": {"input": [], "agent": None}}], "input[0].call.agent"),
        ([{"call": {"input": [], "host": 7}}], "input[0].call.host"),
        ([{"call": {"input": [{"sleep_ms": -1}]}}], "input[0].call.input[0].sleep_ms"),
        ([{"call": {"input": {"say": "not a list"}}}], "input[0].call.input"),
        ([{"call": {"input": [{"bogus": 1}]}}], "input[0].call.input[0]"),
        ([{"calls": []}], "input[0].calls"),
        ([{"calls": {"input": []}}], "input[0].calls"),
        ([{"say": "a"}, {"say": "b"}, {"calls": [{"input": []}, 5]}], "input[2].calls[1]"),
        ([{"calls": [{"input": [], "agent": "a b"}]}], "input[0].calls[0].agent"),
        ([{"call": {"input": []}, "calls": [{"input": []}]}], "input[0]"),  # two kinds
    ],
)
def test_invalid_call_steps_are_refused_naming_the_field(
    steps: list[dict[str, Any]], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_steps(steps)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: expected ")
    assert "\n" not in str(refused.value)


class Halt(BaseException):
    """Stands for the context's suspension (an AttemptStop): never caught by the binding."""


class FakeContext:
    """Just what a scripted run of ``say`` and ``call`` steps touches."""

    def __init__(self, steps: list[dict[str, Any]], *, halt: bool = False) -> None:
        self.input = steps
        self.replaying = False
        self.halt = halt
        self.calls: list[tuple[str, Any, str | None, str | None]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def append(self, kind: str, body: Any) -> None:
        pass

    async def call_agent(
        self,
        agent_id: str,
        input: Any,
        *,
        thread_id: str | None = None,
        host_id: str | None = None,
        budget: int | None = None,
    ) -> ChildOutcome:
        n = len(self.calls)
        self.calls.append((agent_id, input, thread_id, host_id))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1
        if self.halt:
            raise Halt
        failed = agent_id == "flaky"
        return ChildOutcome(
            submission_id=f"sub_c{n}",
            thread_id=thread_id or f"child_p_{n}",
            outcome="failed" if failed else "completed",
            result=None if failed else {"n": n},
            reason="flaked" if failed else None,
        )


async def test_a_script_without_calls_keeps_its_result() -> None:
    outcome = await run_scripted(cast(AttemptContext, FakeContext([{"say": "hi"}])))
    assert outcome == Completed({"said": ["hi"]})


async def test_calls_run_in_order_and_are_listed_as_children() -> None:
    context = FakeContext(
        [
            {"say": "before"},
            {"call": {"input": [{"say": "one"}]}},
            {
                "calls": [
                    {"thread": "t-a", "input": [], "host": "h"},
                    {"agent": "flaky", "input": 1},
                ]
            },
            {"say": "after"},
        ]
    )
    outcome = await run_scripted(cast(AttemptContext, context))
    assert context.calls == [
        ("scripted", [{"say": "one"}], None, None),
        ("scripted", [], "t-a", "h"),
        ("flaky", 1, None, None),
    ]
    assert context.most_in_flight == 2  # the two of `calls` were awaited together
    assert outcome == Completed(
        {
            "said": ["before", "after"],
            "children": [
                {
                    "thread": "child_p_0",
                    "submission_id": "sub_c0",
                    "outcome": "completed",
                    "result": {"n": 0},
                },
                {
                    "thread": "t-a",
                    "submission_id": "sub_c1",
                    "outcome": "completed",
                    "result": {"n": 1},
                },
                # a failed child does not fail the script
                {
                    "thread": "child_p_2",
                    "submission_id": "sub_c2",
                    "outcome": "failed",
                    "result": None,
                },
            ],
        }
    )


async def test_the_suspension_is_not_swallowed() -> None:
    context = FakeContext([{"calls": [{"input": []}, {"input": []}]}, {"say": "never"}], halt=True)
    with pytest.raises(Halt):
        await run_scripted(cast(AttemptContext, context))
