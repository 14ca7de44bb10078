"""The ``threadwarden`` command line.

Exit codes: 0 success, 1 operational failure (no stack, not found, service error), 2 bad input
or a conflicting decision (one line naming the field, or under ``--json`` one JSON object with
``error``, ``field`` and ``code``; nothing written). The grammar is in `cli_parser`.
"""

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from opentelemetry import trace
from pydantic import ValidationError

from threadwarden.cli import commands
from threadwarden.cli.output import print_error
from threadwarden.cli.parser import UsageError, build_parser
from threadwarden.config.envconfig import with_temporal_envconfig
from threadwarden.config.settings import Settings
from threadwarden.errors import (
    InvalidInput,
    NotFound,
    ThreadwardenError,
    error_code,
    field_of,
)
from threadwarden.scripted import SCRIPTED_AGENT_ID, parse_steps
from threadwarden.validation import parse_json_input

__all__ = ["build_parser", "main"]


def _subject(args: argparse.Namespace) -> str | None:
    """The field a `NotFound` is about: the id the command was given."""
    if args.command == "status":
        return "thread" if args.thread is not None else "host"
    return {"watch": "thread", "rebuild-projection": "host"}.get(
        args.command, "submission" if getattr(args, "submission", None) else None
    )


CONSOLE_COMMANDS = {"dev", "console"}
"""Commands that serve the console and log its audit lines on stderr: each submission and
decision made through its pages or the HTTP API (INFO on ``threadwarden.console``: ``api:
approve sub_… by web-app (changed)``), as docs/api.md and docs/console.md show them. Not
``demo``: its own story is its output."""
WORKER_COMMANDS = {"demo", "dev", "worker", "setup"}
"""Commands that run a worker or the embedded stack, or set a namespace up for the worker
(`threadwarden.cli.worker_commands`): only they load the worker's rooms."""
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
    if args.command == "answer":
        value = parse_json_input("value", args.value, max_bytes=settings.max_input_bytes)
        return commands.answer(settings, args, value)
    if args.command == "resolve":
        if (args.outcome == "ran") != (args.result is not None):
            raise InvalidInput("result", "a JSON value with --outcome ran, and only then")
        result = None
        if args.result is not None:
            result = parse_json_input("result", args.result, max_bytes=settings.max_input_bytes)
        return commands.resolve(settings, args, result)
    if args.command in WORKER_COMMANDS:
        from threadwarden.cli.worker_commands import COMMANDS  # the worker's rooms: only here

        return COMMANDS[args.command](settings, args)
    handlers: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "approve": commands.approve,
        "watch": commands.watch,
        "deny": commands.deny,
        "abort": commands.abort,
        "migrate": commands.migrate,
        "status": commands.status,
        "rebuild-projection": commands.rebuild_projection,
        "inbox": commands.inbox,
        "console": commands.console,
    }
    return handlers[args.command](settings, args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``threadwarden`` console script.

    With ``argv`` (tests, applications embedding the CLI) it returns the exit code. Without
    (the console script, ``python -m threadwarden.cli.main``) the command line is ``sys.argv`` and
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
    as_json = "--json" in argv  # until parsed: an error may come before the flag is read
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help: report the code instead of exiting
        return stop.code if isinstance(stop.code, int) else 2
    except UsageError as error:
        return print_error(
            str(error), code=2, field=error.field, kind="usage", as_json=as_json, prog=error.prog
        )
    except InvalidInput as error:
        return _fail(error, str(error), code=2, field=error.field, as_json=as_json)
    as_json = bool(getattr(args, "json", False))
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command in CONSOLE_COMMANDS:
        logging.getLogger("threadwarden.console").setLevel(logging.INFO)
    return _execute(args, as_json)


def _execute(args: argparse.Namespace, as_json: bool) -> int:
    """Run the parsed command; every failure becomes one line (or one JSON object)."""
    settings: Settings | None = None
    try:
        settings = _settings(args)
        return asyncio.run(_dispatch(args, settings))
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        where = f"THREADWARDEN_{field.upper()}: " if field else ""
        return print_error(
            f"settings: {where}{message}",
            code=2,
            field=field or None,
            kind="invalid_setting",
            as_json=as_json,
            prog="threadwarden",
        )
    except ThreadwardenError as error:
        named = field_of(error)
        if named is not None:  # bad input: the caller's to fix, nothing was written
            if args.verbose and error.__cause__ is not None:  # e.g. the error inside --bindings
                _print_traceback(error.__cause__, settings)
            return _fail(error, str(error), code=2, field=named, as_json=as_json, settings=settings)
        about = _subject(args) if isinstance(error, NotFound) else None
        return _fail(error, str(error), code=1, field=about, as_json=as_json, settings=settings)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # one line for operators; -v shows the traceback first
        if args.verbose:
            _print_traceback(error, settings)
        message = f"{type(error).__name__}: {error}"
        return _fail(error, message, code=1, as_json=as_json, settings=settings)


def _print_traceback(error: BaseException, settings: Settings | None) -> None:
    """The traceback on stderr, masked like every other line (a frame may hold the DSN)."""
    shown = "".join(traceback.format_exception(error))
    print(settings.redact(shown) if settings else shown, end="", file=sys.stderr)


def _fail(
    error: BaseException,
    message: str,
    *,
    code: int,
    as_json: bool,
    field: str | None = None,
    settings: Settings | None = None,
) -> int:
    """Print the error (secrets masked: a driver's message may echo its DSN); return ``code``."""
    shown = settings.redact(message) if settings is not None else message
    return print_error(
        shown, code=code, field=field, kind=error_code(error), as_json=as_json, prog="threadwarden"
    )


if __name__ == "__main__":
    main()
