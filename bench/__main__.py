"""``python -m bench``: threadwarden vs. a bare-Temporal baseline, on one embedded stack."""

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any

from bench.baseline import run_baseline
from bench.measure import Measurement
from bench.stack import bench_stack
from bench.threadwarden_run import run_threadwarden


@dataclass(frozen=True)
class Result:
    hosts: int
    submissions: int
    threadwarden: Measurement
    baseline: Measurement

    @property
    def ratio(self) -> float:
        """threadwarden's rate as a fraction of the baseline's."""
        return self.threadwarden.rate / self.baseline.rate

    def as_json(self) -> dict[str, Any]:
        sides = {
            m.side: {"units": m.units, "seconds": round(m.seconds, 4), "rate": round(m.rate, 2)}
            for m in (self.threadwarden, self.baseline)
        }
        return {
            "hosts": self.hosts,
            "submissions": self.submissions,
            **sides,
            "ratio": round(self.ratio, 4),
        }

    def table(self) -> str:
        lines = [
            f"hosts={self.hosts} submissions/host={self.submissions}"
            f" units={self.hosts * self.submissions}",
            f"{'side':<14}{'seconds':>10}{'units/s':>12}",
        ]
        for m in (self.threadwarden, self.baseline):
            lines.append(f"{m.side:<14}{m.seconds:>10.3f}{m.rate:>12.1f}")
        lines.append(f"ratio threadwarden/baseline: {self.ratio:.3f}")
        return "\n".join(lines)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--hosts", type=_positive, default=4, help="hosts (default 4)")
    parser.add_argument(
        "--submissions", type=_positive, default=25, help="submissions per host (default 25)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="deadline per side in seconds (default 300)"
    )
    return parser.parse_args(argv)


async def bench(hosts: int, submissions: int, *, timeout_s: float) -> Result:
    """Both sides, one after the other, on the same PostgreSQL and Temporal servers."""
    async with bench_stack() as stack:
        baseline = await run_baseline(stack, hosts, submissions, timeout_s=timeout_s)
        threadwarden = await run_threadwarden(stack, hosts, submissions, timeout_s=timeout_s)
    return Result(hosts, submissions, threadwarden, baseline)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = asyncio.run(bench(args.hosts, args.submissions, timeout_s=args.timeout))
    print(json.dumps(result.as_json()) if args.json else result.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
