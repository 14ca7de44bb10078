"""The chaos run's ledger check catches each violation on a hand-made ledger state; the seeded
workload, fault order, failpoint counting and flags (no services needed)."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path

import pytest

from chaos.checks import VIOLATIONS, Counts, check, matches
from chaos.cli import parse_args
from chaos.faults import DEFAULT_FAILPOINTS, failpoints_fired, plan_faults
from chaos.planned import (
    OPENAI_AGENTS,
    PYDANTIC_AI,
    Ids,
    Linked,
    Planned,
    agent_view,
    all_planned,
    answer,
    message_of,
)
from chaos.rows import MarkerRow, RecordRow, SubmissionRow, child_thread_for, workload_key
from chaos.thread_order import fifo_violations
from chaos.workload import LONG_SLEEP_MS, host_name, plan_workload

Ledger = tuple[list[SubmissionRow], list[RecordRow], list[MarkerRow]]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def faithful_ledger(planned: list[Planned], *, waited: bool = True) -> Ledger:
    """What an uninterrupted threadwarden leaves: per thread, submissions in order, each one's
    records then its settlement, at one epoch per attempt; a delegating parent's children
    (rows after every submission's) settle, each with its marker, before their parent joins
    them (``waited``: after it suspended, recording ``children-awaited``); the messages of
    long sends are admitted on their destination threads after that thread's own submissions
    (rows after the children's), linked to their sender's message, and settle last."""
    submissions: list[SubmissionRow] = []
    children: list[SubmissionRow] = []
    records: list[RecordRow] = []
    markers: list[MarkerRow] = []
    next_record: dict[str, int] = defaultdict(lambda: 1)
    clock = count()

    def write(plan: Planned, row: SubmissionRow, ids: Ids) -> None:
        expected = [*plan.records(ids), ("settlement", plan.settlement(ids))]
        for kind, body in expected:
            if kind == "children-awaited" and not waited:
                continue
            sequence = next_record[row.thread_id]
            next_record[row.thread_id] += 1
            step = None
            if kind in ("call-started", "call-joined"):
                child = body.get("child_submission_id", body.get("submission_id"))
                step = next(n for n, link in ids.children.items() if link.submission_id == child)
            records.append(
                RecordRow(row.thread_id, sequence, row.submission_id, kind, body, row.epoch,
                          step, f"{row.thread_id}:{sequence}",
                          T0 + timedelta(seconds=next(clock)))
            )  # fmt: skip

    for plan in sorted(planned, key=lambda p: (p.thread or "", p.n)):
        assert plan.thread is not None and plan.host is not None
        submission_id = f"s-{plan.key}"
        row = SubmissionRow(submission_id, plan.thread, plan.n + 1, plan.input, "settled",
                            plan.outcome, plan.n + 1)  # fmt: skip
        submissions.append(row)
        linked: dict[int, Linked] = {}
        for child in plan.children:
            assert child.call_step is not None
            thread = child.thread or child_thread_for(submission_id, child.call_step)
            child_row = SubmissionRow(f"s-{child.key}", thread, 1, child.steps, "settled",
                                      child.outcome, 1, submission_id, child.call_step)  # fmt: skip
            children.append(child_row)
            parent = Linked(submission_id, plan.thread, plan.host)
            write(child, child_row, Ids(child_row.submission_id, {}, parent))
            markers.append(MarkerRow(submission_id, child_row.submission_id, child.outcome))
            settlement = f"{thread}:{next_record[thread] - 1}"
            linked[child.call_step] = Linked(
                child_row.submission_id, thread, child.host or thread, settlement
            )
        write(plan, row, Ids(submission_id, linked))
    messages: list[SubmissionRow] = []
    sequences = Counter(row.thread_id for row in submissions)
    for plan in planned:
        for message in plan.messages:
            assert message.thread is not None
            sequences[message.thread] += 1
            sequence = sequences[message.thread]
            source = message_of(f"s-{plan.key}", message)
            message_row = SubmissionRow(f"s-{message.key}", message.thread, sequence,
                                        message.steps, "settled", message.outcome, sequence,
                                        source_message_id=source)  # fmt: skip
            messages.append(message_row)
    for message_row in sorted(messages, key=lambda r: (r.thread_id, r.sequence)):
        plan = next(p for p in all_planned(planned) if f"s-{p.key}" == message_row.submission_id)
        write(plan, message_row, Ids(message_row.submission_id))
    return [*submissions, *children, *messages], records, markers


def violations(counts: Counts) -> dict[str, int]:
    return {name: getattr(counts, name) for name in VIOLATIONS if getattr(counts, name)}


@pytest.fixture
def planned() -> list[Planned]:
    """A small seeded workload: 3 threads, 4 submissions each."""
    return plan_workload(12, 3, seed=5)


def test_check_counts_nothing_on_a_faithful_ledger(planned: list[Planned]) -> None:
    counts = check(planned, *faithful_ledger(planned))
    assert violations(counts) == {}
    assert counts.clean
    assert (counts.submissions, counts.settled) == (12, 12)
    assert counts.failed_on_purpose == sum(p.outcome == "failed" for p in planned)
    assert (counts.children, counts.children_settled) == (1, 1)  # chaos-t000.1 delegates


def test_check_counts_a_duplicate_settlement(planned: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(planned)
    settlement = max(records, key=lambda r: (r.thread_id, r.sequence))  # the last thread's last
    assert settlement.kind == "settlement"
    again = dataclasses.replace(settlement, sequence=settlement.sequence + 1)
    counts = check(planned, submissions, [*records, again], markers)
    assert violations(counts) == {"duplicate_settlements": 1}


def test_check_counts_a_later_submission_served_before_the_earlier_settled(
    planned: list[Planned],
) -> None:
    submissions, records, markers = faithful_ledger(planned)
    thread = planned[0].thread
    lane = sorted((r for r in records if r.thread_id == thread), key=lambda r: r.sequence)
    first_settlement = next(r for r in lane if r.kind == "settlement")
    # The second submission's first record swaps places with the first one's settlement.
    second = next(r for r in lane if r.sequence == first_settlement.sequence + 1)
    moved = [
        dataclasses.replace(first_settlement, sequence=second.sequence),
        dataclasses.replace(second, sequence=first_settlement.sequence),
    ]
    others = [r for r in records if r is not first_settlement and r is not second]
    counts = check(planned, submissions, [*others, *moved], markers)
    # The second one's record, at its higher epoch, also precedes a record of the first.
    assert violations(counts) == {"fifo_violations": 1, "stale_writes": 1}


def test_check_counts_submissions_admitted_out_of_submission_order(
    planned: list[Planned],
) -> None:
    submissions, records, markers = faithful_ledger(planned)
    a, b = (s for s in submissions if s.thread_id == planned[0].thread and s.sequence <= 2)
    others = [s for s in submissions if s is not a and s is not b]
    swapped = [dataclasses.replace(a, sequence=2), dataclasses.replace(b, sequence=1)]
    counts = check(planned, [*others, *swapped], records, markers)
    # Admitted in the wrong order, and (by admission order) served in the wrong order too.
    assert violations(counts) == {"fifo_violations": 1}


def test_check_counts_wrong_outcomes_and_histories(planned: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(planned)
    completed = next(s for s in submissions if s.outcome == "completed")
    flipped = dataclasses.replace(completed, outcome="failed")
    message = next(r for r in records if r.kind == "message")
    said_twice = dataclasses.replace(message, sequence=10_000)
    counts = check(
        planned,
        [flipped if s is completed else s for s in submissions],
        [*records, said_twice],
        markers,
    )
    assert counts.wrong_outcomes == 1
    assert counts.wrong_histories == 1
    assert counts.fifo_violations >= 1  # the repeated message comes after later settlements


def test_check_counts_lost_and_duplicate_admissions(planned: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(planned)
    own = [s for s in submissions if s.parent_submission_id is None]
    gone, stuck = own[-1], own[-2]  # the last thread's last two
    waiting = dataclasses.replace(stuck, state="ready", outcome=None)
    kept = [r for r in records if r.submission_id not in {gone.submission_id, stuck.submission_id}]
    twice = dataclasses.replace(submissions[0], submission_id="s-again", sequence=99)
    others = [s for s in submissions if s not in (gone, stuck)]
    counts = check(planned, [*others, waiting, twice], kept, markers)
    assert counts.lost == 2
    assert counts.unsettled_states == {"missing": 1, "ready": 1}
    assert counts.duplicate_admissions == 1


def test_check_counts_stale_writes_and_unexpected_submissions(planned: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(planned)
    last = max(
        (r for r in records if r.thread_id.startswith("chaos-t") and ".c" not in r.thread_id),
        key=lambda r: (r.thread_id, r.sequence),
    )
    stale = dataclasses.replace(last, sequence=last.sequence + 1, epoch=0, kind="note")
    stranger = dataclasses.replace(submissions[0], submission_id="s-x", input=[{"say": "x.0"}])
    counts = check(planned, [*submissions, stranger], [*records, stale], markers)
    assert counts.stale_writes == 1
    assert counts.unexpected_submissions == 1


@pytest.fixture
def family() -> list[Planned]:
    """A seeded workload with every kind of delegation: a ``call`` (a named child, on its own
    host, its parent's or another thread's), a ``calls`` of two, and both."""
    planned = plan_workload(24, 3, seed=3)
    kinds = {tuple(next(iter(s)) for s in p.steps if {"call", "calls"} & s.keys()) for p in planned}
    assert kinds == {(), ("call",), ("calls",), ("call", "calls")}
    return planned


def parent_of(planned: list[Planned], key: str) -> Planned:
    return next(p for p in planned if p.key == key)


LAST_PARENT = "chaos-t001.7"
"""The last submission of its thread, with one named child: changes to its records are seen
by the delegation checks alone (no later submission to be out of FIFO order with)."""


@pytest.mark.parametrize("waited", [True, False])
def test_check_counts_nothing_on_a_faithful_ledger_with_children(
    family: list[Planned], waited: bool
) -> None:
    """Whether or not a parent waited (``children-awaited``) for its children, which settled
    first."""
    counts = check(family, *faithful_ledger(family, waited=waited))
    assert violations(counts) == {}
    children = [c for p in family for c in p.children]
    assert (counts.submissions, counts.settled, counts.children) == (24, 24, len(children))
    assert counts.children_settled == len(children) == 8
    assert counts.children_failed_on_purpose == sum(c.outcome == "failed" for c in children) > 0


def test_check_tolerates_calls_awaited_together_starting_in_either_order(
    family: list[Planned],
) -> None:
    submissions, records, markers = faithful_ledger(family)
    pair = [r for r in records if r.kind == "call-started" and r.thread_id == "chaos-t000"]
    first, second = sorted(pair, key=lambda r: r.sequence)[:2]
    assert second.sequence == first.sequence + 1  # chaos-t000.1's calls of two
    swapped = [
        dataclasses.replace(first, sequence=second.sequence),
        dataclasses.replace(second, sequence=first.sequence),
    ]
    others = [r for r in records if r is not first and r is not second]
    assert violations(check(family, submissions, [*others, *swapped], markers)) == {}


def test_check_counts_a_child_never_joined(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    parent = next(s for s in submissions if workload_key(s) == LAST_PARENT)
    join = next(
        r for r in records if r.submission_id == parent.submission_id and r.kind == "call-joined"
    )
    counts = check(family, submissions, [r for r in records if r is not join], markers)
    # (Settling a parent without its call-joined also leaves a history its script never wrote.)
    assert violations(counts) == {"unjoined_children": 1, "wrong_histories": 1}


def test_check_counts_a_child_joined_twice(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    parent = next(s for s in submissions if workload_key(s) == LAST_PARENT)
    lane = [r for r in records if r.thread_id == parent.thread_id]
    join = next(
        r for r in lane if r.submission_id == parent.submission_id and r.kind == "call-joined"
    )
    again = dataclasses.replace(join, sequence=max(r.sequence for r in lane) + 1)
    counts = check(family, submissions, [*records, again], markers)
    assert violations(counts) == {
        "duplicate_joins": 1,
        "unjoined_children": 1,
        "wrong_histories": 1,
    }


def test_check_counts_a_join_of_another_settlement_than_the_childs(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    parent = next(s for s in submissions if workload_key(s) == LAST_PARENT)
    join = next(
        r for r in records if r.submission_id == parent.submission_id and r.kind == "call-joined"
    )
    elsewhere = dataclasses.replace(join, body={**join.body, "settlement_record_id": "x:1"})
    others = [r for r in records if r is not join]
    counts = check(family, submissions, [*others, elsewhere], markers)
    assert violations(counts) == {"unjoined_children": 1, "wrong_histories": 1}


def test_check_counts_a_parent_settled_before_its_child(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    child = next(s for s in submissions if workload_key(s) == f"{LAST_PARENT}.c0")
    settlement = next(
        r for r in records if r.submission_id == child.submission_id and r.kind == "settlement"
    )
    late = dataclasses.replace(settlement, created_at=T0 + timedelta(days=1))
    others = [r for r in records if r is not settlement]
    counts = check(family, submissions, [*others, late], markers)
    assert violations(counts) == {"parents_settled_before_children": 1}


def test_check_counts_a_parent_settled_with_its_child_unsettled(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    child = next(s for s in submissions if workload_key(s) == f"{LAST_PARENT}.c0")
    running = dataclasses.replace(child, state="running", outcome=None)
    kept = [
        r
        for r in records
        if not (r.submission_id == child.submission_id and r.kind == "settlement")
    ]
    left = [m for m in markers if m.child_submission_id != child.submission_id]
    counts = check(family, [running if s is child else s for s in submissions], kept, left)
    # The parent's call-joined names a settlement the child does not have.
    assert violations(counts) == {
        "lost": 1,
        "unjoined_children": 1,
        "parents_settled_before_children": 1,
        "wrong_histories": 1,
    }
    assert counts.unsettled_states == {"running": 1}


def test_check_counts_a_second_child_of_one_call(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    child = next(s for s in submissions if workload_key(s) == f"{LAST_PARENT}.c0")
    twin = dataclasses.replace(child, submission_id="s-twin", thread_id="twin", state="ready",
                               outcome=None)  # fmt: skip
    counts = check(family, [*submissions, twin], records, markers)
    # Its call has no one child to join: the parent's records and result name neither.
    assert violations(counts) == {
        "duplicate_children": 1,
        "duplicate_admissions": 1,
        "unjoined_children": 1,
        "parents_settled_before_children": 1,
        "wrong_histories": 1,
        "wrong_outcomes": 1,
    }


def test_check_counts_a_child_of_a_call_no_script_made(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    parent = next(s for s in submissions if workload_key(s) == "chaos-t000.0")  # no calls
    stray = SubmissionRow("s-stray", "stray", 1, [{"say": "stray"}], "ready", None, 0,
                          parent.submission_id, 2)  # fmt: skip
    counts = check(family, [*submissions, stray], records, markers)
    assert violations(counts) == {"duplicate_children": 1, "unexpected_submissions": 1}


def test_check_counts_wrong_child_markers(family: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(family)
    gone, flipped, *kept = markers
    wrong = dataclasses.replace(flipped, outcome="aborted")
    stranger = MarkerRow(gone.parent_submission_id, "s-chaos-t000.0", "completed")
    counts = check(family, submissions, records, [*kept, wrong, stranger])
    assert violations(counts) == {"wrong_child_markers": 3}


def test_matches_leaves_out_only_optional_records_and_reorders_only_starts() -> None:
    started = [("call-started", {"n": 1}), ("call-started", {"n": 2})]
    awaited = ("children-awaited", {"children": ["a", "b"]})
    joined = [("call-joined", {"n": 1}), ("call-joined", {"n": 2})]
    expected = [("message", {"text": "x"}), *started, awaited, *joined]
    assert matches(expected, expected)
    assert matches([expected[0], *started, *joined], expected)  # never waited
    assert matches([expected[0], *reversed(started), awaited, *joined], expected)
    assert not matches([expected[0], *started, *reversed(joined)], expected)
    assert not matches([expected[0], *started, awaited, awaited, *joined], expected)
    assert not matches([expected[0], awaited, *started, *joined], expected)
    assert not matches([expected[0], *started, awaited, joined[0]], expected)


def test_workload_delegates_in_a_seeded_share_with_children_planned_inside() -> None:
    planned = plan_workload(1000, 50, seed=1)
    parents = [p for p in planned if p.children]
    children = [c for p in parents for c in p.children]
    assert len(planned) == 1000 and 60 < len(parents) < 150  # of the 800 scripted turns
    assert len(all_planned(planned)) == 1000 + len(children)
    assert len({c.key for c in children}) == len(children)
    assert all(c.key.startswith(f"{c.parent}.c") for c in children)
    assert 10 < sum(c.outcome == "failed" for c in children) < len(children) // 2
    assert {c.thread is None for c in children} == {True, False}  # derived and named threads
    assert {c.host is None for c in children} == {True, False}
    for parent in parents:
        # Each call's journal step: one per say, tool and call before it (sleeps take none).
        steps = [s for s in parent.steps if "sleep_ms" not in s]
        calls = [n for n, s in enumerate(steps, 1) if "call" in s]
        calls += [n + k for n, s in enumerate(steps, 1) if "calls" in s for k in range(2)]
        assert parent.steps[0] == {"say": parent.key}
        assert sorted(c.call_step or 0 for c in parent.children) == sorted(calls), parent
        assert all(c.settlement()["outcome"] == c.outcome for c in parent.children)


def test_workload_is_seeded_round_robin_and_fails_only_where_scripted() -> None:
    planned = plan_workload(1000, 50, seed=1)
    assert planned == plan_workload(1000, 50, seed=1)
    assert planned != plan_workload(1000, 50, seed=2)
    assert len({p.key for p in planned}) == 1000
    assert len({p.thread for p in planned}) == 50
    assert 50 > len({p.host for p in planned}) > 25  # some hosts serve two lanes
    failing = [p for p in planned if p.outcome == "failed"]
    assert 50 < len(failing) < 150
    assert all(p.settlement()["outcome"] == p.outcome for p in planned)
    assert all("never" not in str(p.records()) for p in failing)


def test_workload_sends_every_fifth_threads_turns_to_a_framework_agent() -> None:
    planned = plan_workload(100, 10, seed=1)
    agents = {p.thread: p.agent for p in planned if p.framework}
    assert agents == {"chaos-t004": PYDANTIC_AI, "chaos-t009": OPENAI_AGENTS}
    turn = next(p for p in planned if p.framework)
    assert turn.input == {"prompt": turn.key} and turn.children == ()
    assert turn.settlement() == {"outcome": "completed", "result": answer(turn.key), "reason": None}


def test_check_counts_nothing_on_a_faithful_ledger_with_framework_agents() -> None:
    planned = plan_workload(20, 10, seed=3)
    assert sum(p.framework for p in planned) == 4
    counts = check(planned, *faithful_ledger(planned))
    assert violations(counts) == {}
    assert (counts.settled, counts.agent_turns, counts.agent_turns_settled) == (20, 4, 4)


def test_check_counts_a_framework_agents_model_step_recorded_twice() -> None:
    """A model request answered twice (a re-run that asked the model again for a step it had
    recorded) shows as a wrong history, as does a tool run with other arguments."""
    planned = plan_workload(10, 10, seed=3)
    submissions, records, markers = faithful_ledger(planned)
    turn = next(r for r in submissions if isinstance(r.input, dict))
    own = [r for r in records if r.submission_id == turn.submission_id]
    again = [dataclasses.replace(r, sequence=r.sequence + 100) for r in own[:2]]
    counts = check(planned, submissions, [*records, *again], markers)
    assert violations(counts) == {"wrong_histories": 1}
    lookup = next(r for r in own if r.kind == "tool-call" and r.body["tool"] == "lookup")
    other = dataclasses.replace(lookup, body={**lookup.body, "args": {"key": "other"}})
    changed = [other if r is lookup else r for r in records]
    assert violations(check(planned, submissions, changed, markers)) == {"wrong_histories": 1}


def test_agent_view_keeps_the_tool_and_lookup_but_not_the_frameworks_json() -> None:
    step = {"tool": "model-request", "args": {"model": "chaos"}, "side_effect": False}
    assert agent_view(("tool-call", step)) == ("tool-call", {"tool": "model-request"})
    result = {"tool": "lookup", "result": "found k", "extra": 1}
    assert agent_view(("tool-result", result)) == (
        "tool-result",
        {"tool": "lookup", "result": "found k"},
    )
    assert agent_view(("pydantic-ai-messages", {"messages": []})) == ("pydantic-ai-messages", None)


def test_faults_keep_their_counts_in_a_seeded_order() -> None:
    faults = plan_faults(worker_kills=3, postgres_stops=2, temporal_kills=1, seed=4)
    assert sorted(faults) == ["postgres_stop"] * 2 + ["temporal_kill"] + ["worker_kill"] * 3
    assert faults == plan_faults(worker_kills=3, postgres_stops=2, temporal_kills=1, seed=4)


def test_failpoints_fired_counts_the_failed_passes_they_caused(tmp_path: Path) -> None:
    log = tmp_path / "worker0.stderr"
    log.write_text(
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h1: FailpointError: claim\n"
        "threadwarden.failpoints.FailpointError: claim\n"
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h2: attempt failed"
        " (FailpointError: attempt:append) ({'attempt': 1})\n"
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h2: FailpointError: claim\n"
        "2026-12-01 WARNING temporalio.workflow: pass failed on host h3: OSError: gone\n"
        "2026-12-01 WARNING temporalio.activity: lease renewal of attempt a1 failed, retrying:"
        " FailpointError('attempt:renew') ({'attempt': 1})\n"
    )
    fired = failpoints_fired([log, tmp_path / "absent"])
    assert fired == {"attempt:append": 1, "attempt:renew": 1, "claim": 2}


def test_flags_default_to_the_full_run_and_refuse_bad_values(tmp_path: Path) -> None:
    options = parse_args([])
    assert (options.submissions, options.threads, options.workers) == (1000, 50, 3)
    assert (options.postgres_stops, options.failpoints) == (2, DEFAULT_FAILPOINTS)
    for bad in (
        ["--workers", "9"],
        ["--failpoints", "nowhere=0.5"],
        ["--failpoints", "claim=0.1:seed=3"],
        ["--submissions", "0"],
    ):
        with pytest.raises(SystemExit) as stop:
            parse_args(bad)
        assert stop.value.code == 2
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("")
    with pytest.raises(SystemExit):
        parse_args(["--keep", str(tmp_path / "used")])
    assert parse_args(["--failpoints", "", "--json"]).failpoints == ""


@pytest.fixture
def sending() -> list[Planned]:
    """A seeded workload where long sends message other threads (two to ``chaos-t001``)."""
    planned = plan_workload(30, 5, seed=2, long_send_share=0.3)
    assert [(p.key, p.messages[0].thread) for p in planned if p.messages] == [
        ("chaos-t001.0", "chaos-t002"),
        ("chaos-t002.0", "chaos-t001"),
        ("chaos-t000.3", "chaos-t001"),
    ]
    return planned


def test_workload_long_sends_a_seeded_share_to_other_scripted_threads() -> None:
    plain = plan_workload(1000, 50, seed=1)
    planned = plan_workload(1000, 50, seed=1, long_send_share=0.15)
    senders = [p for p in planned if p.messages]
    assert 80 < len(senders) < 160  # 15% of the 800 scripted turns
    assert plan_workload(1000, 50, seed=1, long_send_share=0.0) == plain
    # The others keep their seeded scripts; the framework agents' turns never send.
    sent = {p.key for p in senders}
    assert [p for p in planned if not p.messages] == [p for p in plain if p.key not in sent]
    assert all(not p.framework for p in senders)
    messages = [m for p in senders for m in p.messages]
    assert len(all_planned(planned)) == 1000 + sum(len(p.children) for p in planned) + len(senders)
    for sender in senders:
        (message,) = sender.messages
        index = int(message.thread.removeprefix("chaos-t"))  # type: ignore[union-attr]
        assert message.thread != sender.thread and index % 5 != 4  # another scripted thread
        assert message.host == host_name(index)  # that thread's host, whether it exists yet
        assert (message.key, message.sender) == (f"{sender.key}.m0", sender.key)
        assert message.send_step == 2  # the journal step after the first say
        assert message.steps == [{"say": message.key}] and message.outcome == "completed"
        send = {"thread": message.thread, "input": message.steps, "host": message.host}
        assert sender.steps == [{"say": sender.key}, {"send": send}, {"sleep_ms": LONG_SLEEP_MS}]
        assert sender.children == () and sender.outcome == "completed"
        assert sender.settlement()["result"] == {"said": [sender.key]}
        sent_body = {
            "message_id": "msg_abc_2",  # the id threadwarden derives from submission and step
            "to_thread": message.thread,
            "to_host": message.host,
            "agent_id": "scripted",
            "input": message.steps,
        }
        assert sender.records(Ids("sub_abc")) == [
            ("message", {"text": sender.key}),
            ("message-sent", sent_body),
        ]
        assert message_of("sub_abc", message) == "msg_abc_2"
    assert LONG_SLEEP_MS == 10_000 and len({m.key for m in messages}) == len(messages)


def test_check_expects_the_delivered_messages(sending: list[Planned]) -> None:
    counts = check(sending, *faithful_ledger(sending))
    assert violations(counts) == {}
    assert (counts.submissions, counts.settled) == (30, 30)  # the run's own, messages apart
    assert (counts.messages, counts.messages_settled) == (3, 3)


def test_check_counts_a_message_never_delivered_or_delivered_twice(
    sending: list[Planned],
) -> None:
    submissions, records, markers = faithful_ledger(sending)
    message = next(s for s in submissions if workload_key(s) == "chaos-t001.0.m0")
    kept = [r for r in records if r.submission_id != message.submission_id]
    counts = check(sending, [s for s in submissions if s is not message], kept, markers)
    assert violations(counts) == {"lost": 1}
    assert counts.unsettled_states == {"missing": 1}
    assert (counts.messages, counts.messages_settled, counts.settled) == (3, 2, 30)
    again = dataclasses.replace(
        message, submission_id="s-again", sequence=99, state="ready", outcome=None
    )
    counts = check(sending, [*submissions, again], records, markers)
    assert violations(counts) == {"duplicate_admissions": 1}


def test_check_counts_a_message_unsettled_or_linked_to_another_send(
    sending: list[Planned],
) -> None:
    submissions, records, markers = faithful_ledger(sending)
    message = next(s for s in submissions if workload_key(s) == "chaos-t000.3.m0")
    stuck = dataclasses.replace(message, state="running", outcome=None)
    settlement = next(
        r for r in records if r.submission_id == message.submission_id and r.kind == "settlement"
    )
    kept = [r for r in records if r is not settlement]
    counts = check(sending, [stuck if s is message else s for s in submissions], kept, markers)
    assert violations(counts) == {"lost": 1}
    assert counts.unsettled_states == {"running": 1}
    elsewhere = dataclasses.replace(message, source_message_id="msg_other_2")
    unlinked = [elsewhere if s is message else s for s in submissions]
    assert violations(check(sending, unlinked, records, markers)) == {"unlinked_messages": 1}


def test_check_counts_a_message_sent_under_another_id(sending: list[Planned]) -> None:
    submissions, records, markers = faithful_ledger(sending)
    sent = next(r for r in records if r.kind == "message-sent")
    other = dataclasses.replace(sent, body={**sent.body, "message_id": "msg_x_2"})
    changed = [other if r is sent else r for r in records]
    assert violations(check(sending, submissions, changed, markers)) == {"wrong_histories": 1}


def test_fifo_leaves_a_message_anywhere_among_a_threads_own_submissions() -> None:
    """A delivery admits its message whenever it runs: between a thread's own submissions
    it breaks no order, but it is served in its turn like every other."""

    def lane(*keys: str) -> tuple[list[SubmissionRow], list[RecordRow]]:
        """Submissions ``s1``, ``s2``, … of thread ``t`` (saying ``keys``), each one's message
        then its settlement."""
        rows = [
            SubmissionRow(f"s{n}", "t", n, [{"say": key}], "settled", "completed", n)
            for n, key in enumerate(keys, 1)
        ]
        written = [(row.submission_id, kind) for row in rows for kind in ("message", "settlement")]
        records = [RecordRow("t", i, sid, kind, {}, 1) for i, (sid, kind) in enumerate(written, 1)]
        return rows, records

    assert fifo_violations(*lane("t.0", "a.1.m0", "t.1", "b.0.m0", "t.2")) == 0
    assert fifo_violations(*lane("t.1", "a.1.m0", "t.0")) == 1  # its own out of order
    rows, records = lane("t.0", "a.1.m0", "t.1")
    settled, said = records[1], records[2]  # the message says its text before s1 settled
    swapped = [dataclasses.replace(settled, sequence=3), dataclasses.replace(said, sequence=2)]
    assert fifo_violations(rows, [records[0], *swapped, *records[3:]]) == 1
