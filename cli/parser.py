"""The ``threadwarden`` command line's grammar: every command, flag and help line.

Argument types raise `InvalidInput`, which argparse lets through (it only catches its own
errors, TypeError and ValueError), so the field reaches the CLI's error report by name, not as
text; argparse's own refusals become `UsageError`.
"""

import argparse
import re
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from threadwarden.errors import InvalidInput
from threadwarden.validation import IF_BUSY, validate_id, validate_text

INBOX_DEFAULT_LIMIT = 100
INBOX_MAX_LIMIT = 1_000


def _id(field: str) -> Callable[[str], str]:
    return lambda value: validate_id(field, value)


def _text(field: str) -> Callable[[str], str]:
    return lambda value: validate_text(field, value)


def _path(field: str) -> Callable[[str], Path]:
    def check(value: str) -> Path:
        if "\x00" in value:
            raise InvalidInput(field, "a path without NUL characters", value)
        return Path(value)

    return check


def _bounded(field: str, low: int, high: int) -> Callable[[str], int]:
    def check(value: str) -> int:
        expected = f"an integer from {low} to {high}"
        try:
            number = int(value)
        except ValueError:
            raise InvalidInput(field, expected, value) from None
        if not low <= number <= high:
            raise InvalidInput(field, expected, number)
        return number

    return check


WAIT_FOREVER = -1.0
"""``--wait`` without seconds: wait until the submission settles."""


def _seconds(field: str) -> Callable[[str], float]:
    def check(value: str) -> float:
        expected = "a number of seconds from 0 to 86400"
        try:
            seconds = float(value)
        except ValueError:
            raise InvalidInput(field, expected, value) from None
        if not 0 <= seconds <= 86_400:  # NaN fails this too
            raise InvalidInput(field, expected, seconds)
        return seconds

    return check


class UsageError(Exception):
    """A command line argparse refused; ``prog`` is the (sub)command it was refused for."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog
        found = re.match(r"argument (?:-+)?([\w-]+)|.*required: (?:-+)?([\w-]+)", message)
        name = next((g for g in found.groups() if g), None) if found else None
        self.field = name.replace("-", "_") if name else None


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, message)


def _command(
    sub: "argparse._SubParsersAction[_Parser]", name: str, summary: str
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` opens with the same line the command list shows."""
    return sub.add_parser(name, help=summary, description=summary)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print JSON (errors: one JSON object on stderr)"
    )


def _worker_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bindings",
        action="append",
        metavar="MODULE:ATTR",
        help="extra bindings: a BindingRegistry, a Binding or a list of them (repeatable; the"
        " module is imported from the current folder, then sys.path)",
    )
    parser.add_argument(
        "--plugins",
        action="append",
        metavar="MODULE:ATTR",
        help="publication sinks and a host plug-in: a sink, a host plug-in or a list of them"
        " (repeatable; imported like --bindings)",
    )


def _submission(
    sub: "argparse._SubParsersAction[_Parser]", name: str, summary: str
) -> argparse.ArgumentParser:
    parser = _command(sub, name, summary)
    parser.add_argument("submission", type=_id("submission"), help="the submission id")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: global options and one subparser per command."""
    parser = _Parser(prog="threadwarden", description="Durable AI-agent threads on Temporal.")
    parser.add_argument(
        "--version",
        action="version",
        version=f"threadwarden {version()}",
        help="print the installed version and exit",
    )
    parser.add_argument(
        "--data-dir", type=_path("data_dir"), help="embedded stack folder (default .threadwarden)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log at INFO level; tracebacks on errors"
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser, help="the command"
    )

    _command(sub, "demo", "run the scripted demo on a throwaway embedded stack")
    dev = _command(sub, "dev", "embedded Temporal (with UI) + PostgreSQL + worker, until Ctrl-C")
    _worker_flags(dev)
    work = _command(sub, "worker", "run a worker against the configured services")
    _worker_flags(work)
    _command(sub, "migrate", "apply pending ledger migrations")
    _command(sub, "setup", "register threadwarden's search attributes in the namespace")
    _submit_command(sub)
    _decision_commands(sub)

    watch = _command(
        sub, "watch", "print a thread's records, then new ones and live text as they come"
    )
    watch.add_argument(
        "thread", type=_id("thread"), help="the thread to watch (waited for if it does not exist)"
    )
    watch.add_argument(
        "--no-follow",
        action="store_true",
        help="print the records there are and exit (no live text)",
    )
    watch.add_argument(
        "--json",
        action="store_true",
        help='one JSON record per line; live text as {"delta": ...} lines',
    )
    watch.add_argument(
        "--no-text",
        action="store_true",
        help="records only: not the live text of a model's answer as it is generated",
    )
    watch.add_argument(
        "--verbose", action="store_true", help="each record's whole body (default: in a few words)"
    )

    rebuild = _command(
        sub, "rebuild-projection", "drop a host's thread summaries; its passes rebuild them"
    )
    rebuild.add_argument("host", type=_id("host"), help="the host id")
    _json_flag(rebuild)

    status = _command(sub, "status", "show a thread's submissions or a host's state (Postgres)")
    which = status.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", type=_id("thread"), help="show this thread's submissions")
    which.add_argument("--host", type=_id("host"), help="show this host's state")
    _json_flag(status)

    inbox = _command(sub, "inbox", "list what waits for a person, oldest first (Postgres)")
    inbox.add_argument(
        "--limit",
        type=_bounded("limit", 1, INBOX_MAX_LIMIT),
        default=INBOX_DEFAULT_LIMIT,
        help=f"show at most this many (default {INBOX_DEFAULT_LIMIT}, at most {INBOX_MAX_LIMIT})",
    )
    _json_flag(inbox)

    console = _command(sub, "console", "serve the operator console (web) until Ctrl-C")
    console.add_argument(
        "--address",
        help="host:port to serve on (default THREADWARDEN_CONSOLE_ADDRESS, 127.0.0.1:8470);"
        " a non-loopback host needs THREADWARDEN_CONSOLE_TOKEN",
    )
    console.add_argument(
        "--temporal-ui", help="base URL of the Temporal UI, for the host page's workflow link"
    )
    return parser


def _submit_command(sub: "argparse._SubParsersAction[_Parser]") -> None:
    submit = _command(sub, "submit", "admit one submission onto a thread")
    submit.add_argument("thread", type=_id("thread"), help="the thread to admit onto")
    submit.add_argument(
        "--agent", required=True, type=_id("agent"), help="the agent id of the binding to run"
    )
    submit.add_argument("--input", required=True, help="the submission's input as JSON")
    submit.add_argument(
        "--idempotency-key",
        type=_id("idempotency_key"),
        help="admit at most once per key on this thread (a repeat returns the first)",
    )
    submit.add_argument(
        "--host", type=_id("host"), help="the host to group the thread under (default: itself)"
    )
    submit.add_argument(
        "--agent-digest", type=_id("agent_digest"), help="pin the work to this binding digest"
    )
    submit.add_argument(
        "--if-busy",
        choices=IF_BUSY,
        default="enqueue",
        help="when the thread has a submission that has not settled: queue behind it (enqueue,"
        " the default), admit nothing (reject), or abort the earlier ones and run next"
        " (interrupt)",
    )
    submit.add_argument(
        "--wait",
        nargs="?",
        const=WAIT_FOREVER,
        type=_seconds("wait"),
        metavar="SECONDS",
        help="wait for the settlement (at most SECONDS; none: as long as it takes) and print it:"
        " exit 0 completed, 1 failed or aborted, 3 still unsettled when the wait ends",
    )
    _json_flag(submit)


def _decision_commands(sub: "argparse._SubParsersAction[_Parser]") -> None:
    """approve, deny, answer, resolve, abort: idempotent operator decisions on one submission."""
    approve = _submission(sub, "approve", "grant a suspended submission's pending approval")
    _json_flag(approve)
    deny = _submission(sub, "deny", "refuse a pending approval (it fails, or its agent hears why)")
    deny.add_argument("--reason", type=_text("reason"), help="why (one line, recorded)")
    _json_flag(deny)
    answer = _submission(sub, "answer", "answer a submission's pending question")
    answer.add_argument("--value", required=True, help="the answer, as JSON (e.g. '\"L\"')")
    _json_flag(answer)
    resolve = _submission(sub, "resolve", "decide an unknown side effect")
    resolve.add_argument(
        "--outcome",
        required=True,
        choices=["ran", "not-run", "fail"],
        help="the tool call ran, did not run, or the submission fails",
    )
    resolve.add_argument("--result", help="with --outcome ran: the tool's result as JSON")
    _json_flag(resolve)
    abort = _submission(sub, "abort", "abort a submission (at once, or at its next boundary)")
    _json_flag(abort)


def version() -> str:
    """The installed package's version."""
    try:
        return metadata.version("threadwarden")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"
