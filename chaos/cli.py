"""``python -m chaos`` (``make chaos``): admit a seeded workload onto threadwarden while its
workers are SIGKILLed or deployed (SIGTERM, then a new one), PostgreSQL is stopped hard and
Temporal is killed, with failpoints firing inside attempts; then check the ledger. Prints one
JSON line; exits 0 only when nothing was lost, duplicated, reordered or settled with the wrong
outcome, and every worker told to stop exited within 90 s."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import fields
from pathlib import Path

from bench.cli import _non_negative_int, _positive_float, _positive_int
from chaos.faults import DEFAULT_FAILPOINTS
from chaos.run import MAX_WORKERS, Options, run
from chaos.workers import EXIT_DEADLINE_S
from threadwarden.errors import InvalidInput
from threadwarden.failpoints import Failpoints

LONG_SEND_SHARE = 0.15
"""``--long-send-share`` when ``--deploys`` is given and it is not."""


def _workers(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_WORKERS} (Postgres connections)")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text}")
    return value


def _failpoints(text: str) -> str:
    try:
        Failpoints.from_spec(text)
    except InvalidInput as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if ":seed=" in text:
        raise argparse.ArgumentTypeError("leave out ':seed=': each worker gets its own from --seed")
    return text


def _fresh_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and any(path.iterdir()):
        raise argparse.ArgumentTypeError(f"{text}: expected a new or empty folder")
    return path


def parse_args(argv: list[str] | None) -> Options:
    defaults = Options()
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    add = parser.add_argument
    add("--submissions", type=_positive_int, default=defaults.submissions, help="(1000)")
    add("--threads", type=_positive_int, default=defaults.threads, help="(50)")
    add("--workers", type=_workers, default=defaults.workers, help="worker processes (3)")
    add("--seed", type=int, default=defaults.seed, help="seeds scripts, fault order, failpoints")
    add("--worker-kills", type=_non_negative_int, default=defaults.worker_kills, help="(3)")
    add("--postgres-stops", type=_non_negative_int, default=defaults.postgres_stops, help="(2)")
    add("--temporal-kills", type=_non_negative_int, default=defaults.temporal_kills, help="(1)")
    add(
        "--deploys",
        type=_non_negative_int,
        default=defaults.deploys,
        help=f"graceful worker restarts: SIGTERM, exit within {EXIT_DEADLINE_S:g}s, a new one (0)",
    )
    add(
        "--long-send-share",
        type=_share,
        help="share of scripted submissions that send a message to another thread, then sleep"
        f" 10 s ({LONG_SEND_SHARE:g} with --deploys, else 0)",
    )
    add(
        "--failpoints",
        type=_failpoints,
        default=DEFAULT_FAILPOINTS,
        help="location=probability,… armed in every worker ('' for none)",
    )
    add("--in-flight", type=_positive_int, default=defaults.in_flight, help="unsettled at most")
    add("--outage-ms", type=_non_negative_int, default=defaults.outage_ms, help="(2000)")
    add("--timeout", type=_positive_float, default=defaults.timeout_s, help="run deadline, s")
    add("--keep", type=_fresh_dir, help="keep data dirs and worker logs in this new folder")
    add("--json", action="store_true", help="print only the JSON line (no progress on stderr)")
    args = parser.parse_args(argv)
    if args.long_send_share is None:
        args.long_send_share = LONG_SEND_SHARE if args.deploys else 0.0
    named = {f.name: getattr(args, f.name) for f in fields(Options) if hasattr(args, f.name)}
    return Options(**named, timeout_s=args.timeout, logs=args.keep, quiet=args.json)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)

    def say(text: str) -> None:
        if not options.quiet:
            print(f"chaos: {text}", file=sys.stderr, flush=True)

    result = asyncio.run(run(options, say))
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1
