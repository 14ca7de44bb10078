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
    StackNotFound,
    ThreadwardenError,
)
from threadwarden.scripted import SCRIPTED_AGENT_ID, parse_steps
from threadwarden.validation import parse_json_input, validate_id
from worker import commands
from worker.settings import Settings

BAD_INPUT = (InvalidInput, IdempotencyConflict, HostMismatch)


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
    handlers: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "demo": commands.demo,
        "dev": commands.dev,
        "worker": commands.worker,
        "migrate": commands.migrate,
        "setup": commands.setup,
        "status": commands.status,
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
