"""Printing for the CLI: JSON documents, text tables, the status and inbox views, errors.
The JSON documents' shapes are the client's (`threadwarden.client.shapes`)."""

import json
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from threadwarden.client.shapes import HOST_STATUS_FIELDS, thread_json
from threadwarden.ledger.inbox import InboxPage
from threadwarden.ledger.messages import Message
from threadwarden.views import HostStatus, SubmissionView, ThreadStatus


def invocation(argv0: str | None = None) -> str:
    """How to run this CLI from the current directory, for the hints it prints:
    ``threadwarden`` when that name on ``PATH`` is this very program, else the path it was
    started by (``.venv/bin/threadwarden`` under ``make dev``, where the venv is not on
    ``PATH``), or ``python -m threadwarden.cli.main`` when started so."""
    script = Path(argv0 if argv0 is not None else sys.argv[0]).absolute()
    if script.name != "threadwarden":
        return f"{shlex.quote(sys.executable)} -m threadwarden.cli.main"
    found = shutil.which("threadwarden")
    if found is not None and Path(found).resolve() == script.resolve():
        return "threadwarden"
    try:
        shown = str(script.relative_to(Path.cwd()))
    except ValueError:  # started from elsewhere: its whole path
        shown = str(script)
    return shlex.quote(shown if "/" in shown else f"./{shown}")


def print_json(value: Any) -> None:
    """One compact JSON document on stdout."""
    print(json.dumps(value, default=str))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(headers, rows))


def format_age(seconds: float) -> str:
    """A duration for a person: ``42s``, ``5m``, ``3h``, ``2d``."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def one_line(text: str) -> str:
    """``text`` on one line, printable whatever its source (non-UTF-8 argv arrives as lone
    surrogates, which a strict stream refuses): line breaks become spaces, unencodable
    characters backslash escapes."""
    flat = " ".join(text.split("\n")).replace("\r", " ")
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


def print_error(
    message: str,
    *,
    code: int,
    field: str | None = None,
    kind: str = "error",
    as_json: bool = False,
    prog: str,
) -> int:
    """Report a failed command on stderr: ``PROG: error: MESSAGE``, or under ``--json`` one
    object ``{"error": MESSAGE, "field": FIELD or null, "code": KIND, "exit_code": CODE}``
    (``KIND`` is a stable snake_case name such as ``invalid_input`` or ``decision_conflict``).
    Returns ``code``."""
    if as_json:
        report = {"error": one_line(message), "field": field, "code": kind, "exit_code": code}
        print(json.dumps(report), file=sys.stderr)
    else:
        print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    return code


def print_thread(thread: ThreadStatus, sent: list[Message], *, as_json: bool) -> None:
    """``status --thread``: its submissions, then the messages it sent."""
    if as_json:
        print_json(thread_json(thread, sent))
        return
    print(f"thread {thread.thread_id} on host {thread.host_id}")
    print_table(
        [
            "seq",
            "submission",
            "agent",
            "state",
            "outcome",
            "waiting for",
            "attempts",
            "parent",
            "reason",
        ],
        [
            [
                s.sequence,
                s.submission_id,
                s.agent_id,
                s.state,
                s.outcome or "",
                waiting_text(s),
                s.attempts,
                s.parent_submission_id or "",
                s.reason or "",
            ]
            for s in thread.submissions
        ],
    )
    if sent:
        print("messages sent")
        print_table(
            ["message", "to thread", "state", "attempts", "accepted as", "last error"],
            [
                [
                    m.message_id,
                    m.destination_thread_id,
                    m.state,
                    m.attempts,
                    m.destination_submission_id or "",
                    m.last_error or "",
                ]
                for m in sent
            ],
        )


def waiting_text(submission: SubmissionView) -> str:
    """The "waiting for" cell: ``child sub_a, sub_b`` for a parent waiting for its children."""
    if submission.waiting_for == "child" and submission.children:
        return f"child {', '.join(submission.children)}"
    return submission.waiting_for or ""


def print_host(host: HostStatus, *, as_json: bool) -> None:
    """``status --host``: one JSON object, or one ``key value`` line per field."""
    if as_json:
        print_json(host.model_dump(mode="json", include=HOST_STATUS_FIELDS))
        return
    for key, value in host.model_dump(mode="json").items():
        shown = json.dumps(value) if isinstance(value, dict | list) else value
        print(f"{key:24} {shown}")


def print_inbox(page: InboxPage, *, as_json: bool) -> None:
    """``inbox``: the page as JSON, or a table oldest first with a line when more wait."""
    if as_json:
        print_json(page.model_dump(mode="json"))
        return
    if not page.entries:
        print("nothing waits for a person")
        return
    print_table(
        ["age", "waiting for", "submission", "thread", "agent", "what"],
        [
            [
                format_age(e.age_s),
                e.waiting_for,
                e.submission_id,
                e.thread_id,
                e.agent_id,
                one_line(e.what),
            ]
            for e in page.entries
        ],
    )
    if page.more:
        print(f"(more wait: showing the oldest {len(page.entries)}; raise --limit)")


def print_line(text: str) -> None:
    """One line on stdout at once (flushed): a long-running command's progress, read as it comes."""
    print(text, flush=True)
