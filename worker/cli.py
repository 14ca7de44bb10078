"""The ``threadwarden`` command line.

Exit codes: 0 success, 1 operational failure (no stack, not found, service error), 2 bad input
(one line naming the field; nothing written).
"""

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn

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
from threadwarden.validation import parse_json_input, validate_id
from worker import commands
from worker.settings import Settings

BAD_INPUT = (InvalidInput, IdempotencyConflict, HostMismatch, NotWaiting)


def _id(field: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        try:
            return validate_id(field, value)
        except InvalidInput as error:
            raise argparse.ArgumentTypeError(str(error)) from error

    return check


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="threadwarden", description="Durable AI-agent threads on Temporal.")
    parser.add_argument(
        "--data-dir", type=Path, help="embedded stack folder (default .threadwarden)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    sub.add_parser("demo", help="run the scripted demo on a throwaway embedded stack")
    dev = sub.add_parser(
        "dev", help="embedded Temporal (with UI) + PostgreSQL + worker, until Ctrl-C"
    )
    dev.add_argument("--bindings", help="module:attribute with extra bindings")
    work = sub.add_parser("worker", help="run a worker against the configured services")
    work.add_argument("--bindings", help="module:attribute with extra bindings")
    sub.add_parser("migrate", help="apply pending ledger migrations")
    sub.add_parser("setup", help="register threadwarden's search attributes in the namespace")

    submit = sub.add_parser("submit", help="admit one submission onto a thread")
    submit.add_argument("thread", type=_id("thread"))
    submit.add_argument("--agent", required=True, type=_id("agent"))
    submit.add_argument("--input", required=True, help="the submission's input as JSON")
    submit.add_argument("--idempotency-key", type=_id("idempotency_key"))
    submit.add_argument("--host", type=_id("host"))
    submit.add_argument(
        "--agent-digest", type=_id("agent_digest"), help="pin the work to this binding digest"
    )
    submit.add_argument("--json", action="store_true")

    approve = sub.add_parser("approve", help="grant a suspended submission's pending approval")
    approve.add_argument("submission", type=_id("submission"))
    approve.add_argument("--json", action="store_true")
    deny = sub.add_parser("deny", help="refuse a pending approval (the submission fails)")
    deny.add_argument("submission", type=_id("submission"))
    deny.add_argument("--reason", help="why (recorded with the decision)")
    deny.add_argument("--json", action="store_true")
    resolve = sub.add_parser("resolve", help="decide an unknown side effect")
    resolve.add_argument("submission", type=_id("submission"))
    resolve.add_argument("--outcome", required=True, choices=["ran", "not-run", "fail"])
    resolve.add_argument("--result", help="with --outcome ran: the tool's result as JSON")
    resolve.add_argument("--json", action="store_true")
    abort = sub.add_parser("abort", help="abort a submission (at once, or at its next boundary)")
    abort.add_argument("submission", type=_id("submission"))
    abort.add_argument("--json", action="store_true")

    watch = sub.add_parser("watch", help="print a thread's records, then new ones live")
    watch.add_argument("thread", type=_id("thread"))
    watch.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    watch.add_argument("--json", action="store_true", help="one JSON record per line")

    rebuild = sub.add_parser(
        "rebuild-projection", help="drop a host's thread summaries; its passes rebuild them"
    )
    rebuild.add_argument("host", type=_id("host"))
    rebuild.add_argument("--json", action="store_true")

    status = sub.add_parser("status", help="show a thread's submissions or a host's state")
    which = status.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", type=_id("thread"))
    which.add_argument("--host", type=_id("host"))
    status.add_argument("--json", action="store_true")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings()
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
    """Entry point of the ``threadwarden`` console script."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # usage errors and --help: report the code instead of exiting
        return stop.code if isinstance(stop.code, int) else 2
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
        print(f"threadwarden: error: settings: {where}{message}", file=sys.stderr)
        return 2
    except BAD_INPUT as error:
        print(f"threadwarden: error: {error}", file=sys.stderr)
        return 2
    except (StackNotFound, ThreadwardenError) as error:
        print(f"threadwarden: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # one line for operators; -v shows the traceback
        if args.verbose:
            raise
        print(f"threadwarden: error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
