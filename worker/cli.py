"""The ``threadwarden`` command line.

Exit codes: 0 success, 1 operational failure (no stack, not found, service error), 2 bad input
(one line naming the field; nothing written).
"""

import argparse
import asyncio
import contextlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Coroutine
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from opentelemetry import trace
from pydantic import ValidationError

from threadwarden.errors import (
    HostMismatch,
    IdempotencyConflict,
    InvalidInput,
    NotWaiting,
    StackNotFound,
    ThreadwardenError,
)
from threadwarden.scripted import SCRIPTED_AGENT_ID, parse_steps
from threadwarden.validation import parse_json_input, validate_id, validate_text
from threadwarden.worker import commands
from threadwarden.worker.cli_output import print_error
from threadwarden.worker.settings import Settings, with_temporal_envconfig

BAD_INPUT = (InvalidInput, IdempotencyConflict, HostMismatch, NotWaiting)
FIELD_OF = {IdempotencyConflict: "idempotency_key", HostMismatch: "host", NotWaiting: "submission"}
"""The field a bad-input error other than `InvalidInput` (which names its own) is about."""


# Argument types raise `InvalidInput`, which argparse lets through (it only catches its own
# errors, TypeError and ValueError), so the field reaches `_run` by name, not as text.
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
        metavar="MODULE:ATTR",
        help="extra bindings: a BindingRegistry, a Binding or a list of them (the module is"
        " imported from the current folder, then sys.path)",
    )
    parser.add_argument(
        "--plugins",
        action="append",
        metavar="MODULE:ATTR",
        help="publication sinks and a host plug-in: a sink, a host plug-in or a list of them"
        " (repeatable; imported like --bindings)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="threadwarden", description="Durable AI-agent threads on Temporal.")
    parser.add_argument(
        "--version",
        action="version",
        version=f"threadwarden {_version()}",
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
    _json_flag(submit)

    approve = _command(sub, "approve", "grant a suspended submission's pending approval")
    approve.add_argument("submission", type=_id("submission"), help="the submission id")
    _json_flag(approve)
    deny = _command(sub, "deny", "refuse a pending approval (the submission fails)")
    deny.add_argument("submission", type=_id("submission"), help="the submission id")
    deny.add_argument("--reason", type=_text("reason"), help="why (one line, recorded)")
    _json_flag(deny)
    resolve = _command(sub, "resolve", "decide an unknown side effect")
    resolve.add_argument("submission", type=_id("submission"), help="the submission id")
    resolve.add_argument(
        "--outcome",
        required=True,
        choices=["ran", "not-run", "fail"],
        help="the tool call ran, did not run, or the submission fails",
    )
    resolve.add_argument("--result", help="with --outcome ran: the tool's result as JSON")
    _json_flag(resolve)
    abort = _command(sub, "abort", "abort a submission (at once, or at its next boundary)")
    abort.add_argument("submission", type=_id("submission"), help="the submission id")
    _json_flag(abort)

    watch = _command(sub, "watch", "print a thread's records, then new ones live")
    watch.add_argument("thread", type=_id("thread"), help="the thread to watch")
    watch.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    watch.add_argument("--json", action="store_true", help="one JSON record per line")

    rebuild = _command(
        sub, "rebuild-projection", "drop a host's thread summaries; its passes rebuild them"
    )
    rebuild.add_argument("host", type=_id("host"), help="the host id")
    _json_flag(rebuild)

    status = _command(sub, "status", "show a thread's submissions or a host's state")
    which = status.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", type=_id("thread"), help="show this thread's submissions")
    which.add_argument("--host", type=_id("host"), help="show this host's state")
    _json_flag(status)
    return parser


def _version() -> str:
    try:
        return metadata.version("threadwarden")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


EMBEDDED_COMMANDS = {"dev", "demo"}
"""Commands that run their own embedded Temporal server: Temporal's envconfig (which describes
another server) does not apply to them."""


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings()
    if args.command not in EMBEDDED_COMMANDS:
        settings = with_temporal_envconfig(settings)
    if args.data_dir is not None:
        settings = settings.model_copy(update={"data_dir": args.data_dir})
    return settings


def _dispatch(args: argparse.Namespace, settings: Settings) -> Coroutine[Any, Any, int]:
    if args.command == "submit":
        value = parse_json_input("input", args.input, max_bytes=settings.max_input_bytes)
        if args.agent == SCRIPTED_AGENT_ID:
            parse_steps(value)
        return commands.submit(settings, args, value)
    if args.command == "resolve":
        if (args.outcome == "ran") != (args.result is not None):
            raise InvalidInput("result", "a JSON value with --outcome ran, and only then")
        result = None
        if args.result is not None:
            result = parse_json_input("result", args.result, max_bytes=settings.max_input_bytes)
        return commands.resolve(settings, args, result)
    handlers: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "approve": commands.approve,
        "watch": commands.watch,
        "deny": commands.deny,
        "abort": commands.abort,
        "demo": commands.demo,
        "dev": commands.dev,
        "worker": commands.worker,
        "migrate": commands.migrate,
        "setup": commands.setup,
        "status": commands.status,
        "rebuild-projection": commands.rebuild_projection,
    }
    return handlers[args.command](settings, args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``threadwarden`` console script.

    With ``argv`` (tests, applications embedding the CLI) it returns the exit code. Without
    (the console script, ``python -m threadwarden.worker.cli``) the command line is ``sys.argv`` and
    the process ends here, through `_leave`, with the command's real exit code.
    """
    if argv is not None:
        return _run(argv)
    try:
        code = _run(sys.argv[1:])
    except BaseException:  # what _run does not turn into a line (a bug): show it, exit 1
        traceback.print_exc()
        code = 1
    return _leave(code)


def _leave(code: int) -> NoReturn:
    """Flush what the command wrote, then end the process without interpreter finalization.

    The Temporal SDK's Rust runtime keeps native threads alive until the process ends; when
    CPython finalizes while one of them still touches the interpreter, a command that already
    printed success dies with ``Fatal Python error: PyGILState_Release`` (SIGABRT) or a segfault
    (temporalio/sdk-python#300). Every command closed its pools, clients and servers before
    returning, so nothing is left for finalization but those threads; spans and log records
    are flushed here because ``os._exit`` skips the ``atexit`` handlers that would do it.
    """
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if callable(flush):
        with contextlib.suppress(Exception):
            flush()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe must not change the exit code
            stream.flush()
    os._exit(code)


def _run(argv: list[str]) -> int:
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    as_json = "--json" in words  # until parsed: an error may come before the flag is read
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help: report the code instead of exiting
        return stop.code if isinstance(stop.code, int) else 2
    except UsageError as error:
        return print_error(str(error), code=2, field=error.field, as_json=as_json, prog=error.prog)
    except InvalidInput as error:
        return _fail(str(error), code=2, field=error.field, as_json=as_json)
    as_json = bool(getattr(args, "json", False))
    settings: Settings | None = None
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = _settings(args)
        return asyncio.run(_dispatch(args, settings))
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        where = f"THREADWARDEN_{field.upper()}: " if field else ""
        return _fail(f"settings: {where}{message}", code=2, field=field or None, as_json=as_json)
    except BAD_INPUT as error:
        named = error.field if isinstance(error, InvalidInput) else FIELD_OF[type(error)]
        if args.verbose and error.__cause__ is not None:  # e.g. the error inside --bindings
            _print_traceback(error.__cause__, settings)
        return _fail(str(error), code=2, field=named, as_json=as_json, settings=settings)
    except (StackNotFound, ThreadwardenError) as error:
        return _fail(str(error), code=1, as_json=as_json, settings=settings)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # one line for operators; -v shows the traceback first
        if args.verbose:
            _print_traceback(error, settings)
        message = f"{type(error).__name__}: {error}"
        return _fail(message, code=1, as_json=as_json, settings=settings)


def _print_traceback(error: BaseException, settings: Settings | None) -> None:
    """The traceback on stderr, masked like every other line (a frame may hold the DSN)."""
    shown = "".join(traceback.format_exception(error))
    print(settings.redact(shown) if settings else shown, end="", file=sys.stderr)


def _fail(
    message: str,
    *,
    code: int,
    as_json: bool,
    field: str | None = None,
    settings: Settings | None = None,
) -> int:
    """Print the error (secrets masked: a driver's message may echo its DSN); return ``code``."""
    shown = settings.redact(message) if settings is not None else message
    return print_error(shown, code=code, field=field, as_json=as_json, prog="threadwarden")


if __name__ == "__main__":
    main()
