"""`make demo` stays true: the demo runs on its own embedded stack and exits 0, and its
pydantic-ai agent thread (an offline model, a tool that needs approval) completes in the feed."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.helpers.processes import run_to_end

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("usual-ports")
"""Stacks of `dev` and `demo` take Temporal's usual ports when free: under xdist, the tests that
start one run one after the other on one worker (`make test` runs with `--dist loadgroup`)."""


@pytest.mark.no_ledger_check(
    reason="the demo runs its own throwaway stack; it exits 1 unless all settled"
)
async def test_demo_settles_everything_and_shows_the_message_delegation_agent_and_feed(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADWARDEN_")}
    data_dir = str(tmp_path / "tw")
    demo = [sys.executable, "-m", "threadwarden.cli.main", "--data-dir", data_dir, "demo"]
    code, text, _ = await run_to_end(*demo, cwd=ROOT, env=env, timeout_s=110, merge_stderr=True)
    assert code == 0, text[-3000:]
    assert " delivered to demo-" in text  # the message between threads
    assert "  feed  demo-" in text  # the live record feed
    assert "settled 22/22" in text  # 20 submitted, the message and the delegated child
    # The digest's streamed step reached the feed as live text, and no step started over.
    assert re.search(r"^live text: [1-9]\d* steps streamed, 0 restarted ", text, re.MULTILINE)
    totals = re.search(r"(\d+) submissions on (\d+) threads in all\.", text)
    assert totals is not None and totals[1] == "22", text[-3000:]  # the same count, announced
    summary_rows = re.findall(r"^demo-\w+-\w+ +\S+ +demo-", text, re.MULTILINE)
    assert len(summary_rows) == int(totals[2]) == 12  # one summary row per thread
    assert "(while the stack runs)" not in text  # nothing printed as running once stopped
    assert "--data-dir" in text.splitlines()[-1] and text.splitlines()[-1].strip().startswith(
        (".venv/bin/threadwarden", "threadwarden", "/")
    )
    api = re.search(r"HTTP API (http://127\.0\.0\.1:\d+/v1) \(while the demo runs\)", text)
    assert api is not None, text[-3000:]
    assert f"admitted with POST {api[1]}/threads/demo-" in text  # the i18n turn, over HTTP
    _assert_graph_thread(text)
    # the delegation: the parent waits for its subagent, then completes with the child's result
    waits = re.search(
        r"  (sub_\S+) on (demo-\S+-planner) delegated to a subagent \((sub_\S+) on"
        r" (demo-\S+-changelog)\) and waits for it",
        text,
    )
    assert waits is not None, text[-3000:]
    parent, child, child_thread = waits[1], waits[3], waits[4]
    completed = text.index(
        f"  {parent} completed with its subagent's result: {child} on {child_thread} completed,"
        ' {"said": ["Collecting merged changes.", "12 changes since beta.95."]}'
    )
    assert text.index(waits[0]) < completed
    assert f"  feed  {child_thread}" in text  # the child's own thread, in the feed too
    _assert_agent_thread(text)


def _assert_agent_thread(text: str) -> None:
    """The pydantic-ai agent's turn: approved, journaled step by step in the live feed (model
    requests and tools by name), completed with the model's answer, and in the summary."""
    done = re.search(
        r"  (sub_\S+) on (demo-\S+-concierge): pydantic-ai agent 'concierge' completed after"
        r" 3 model requests and the tools lookup_order, refund:"
        r' "Refunded 500 cents on order 42\. Sorry about the damage!"',
        text,
    )
    assert done is not None, text[-3000:]
    submission, thread = done[1], done[2]
    approving = text.index(f"  {submission} waits for an approval: approving it")
    assert approving < done.start()
    feed = re.findall(rf"^  feed  {thread}\s+#\d+\s+(.+)$", text, re.MULTILINE)
    steps = [line for line in feed if line.startswith(("tool-call", "tool-result"))]
    assert steps == [
        f"{kind} {tool}"
        for tool in ("model-request", "lookup_order", "model-request", "refund", "model-request")
        for kind in ("tool-call", "tool-result")
    ], feed
    assert "approval-requested" in feed and "settlement" in feed, feed
    row = re.search(rf"^{thread}\s+concierge\s+\S+\s+1\s+1\s+0$", text, re.MULTILINE)
    assert row is not None, text[-3000:]  # the summary: one submission, completed


def _assert_graph_thread(text: str) -> None:
    """The LangGraph graph's turn: its question answered, then completed with the final state,
    one update per node (``reserve``'s before the question, not again after the answer)."""
    asked = re.search(
        r'  (sub_\S+) asks \{"question": "Which size of jacket\?"\}: answering "M"', text
    )
    assert asked is not None, text[-3000:]
    completed = re.search(
        rf"  {asked[1]} on demo-\S+-tailor: LangGraph graph 'tailor' completed"
        r" \(node updates: reserve, ask_size, ship\): (\{.*\})$",
        text,
        re.MULTILINE,
    )
    assert completed is not None, text[-3000:]
    assert asked.start() < completed.start()
    assert json.loads(completed[1]) == {
        "item": "jacket",
        "reserved": True,
        "size": "M",
        "shipped": "jacket in size M",
    }
