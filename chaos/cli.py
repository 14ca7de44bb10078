"""``python -m chaos`` (``make chaos``): admit a seeded workload onto threadwarden while its
workers are SIGKILLed, PostgreSQL is stopped hard and Temporal is killed, with failpoints firing
inside attempts; then check the ledger. Prints one JSON line; exits 0 only when nothing was lost,
duplicated, reordered or settled with the wrong outcome."""

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
from threadwarden.errors import InvalidInput
from threadwarden.failpoints import Failpoints


def _workers(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_WORKERS} (Postgres connections)")
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
