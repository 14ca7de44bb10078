"""``threadwarden watch THREAD``: the thread's records printed as the live record feed
(`threadwarden.client.feed`) yields them, a line each, and the live text of the steps that
stream as it arrives."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from threadwarden.cli.output import print_json
from threadwarden.cli.record_text import summary
from threadwarden.errors import NotFound
from threadwarden.ledger.pool import create_pool
from threadwarden.ledger.status import StatusReader
from threadwarden.reading.feed import follow_thread
from threadwarden.reading.text import TextDelta

TEXT_MARK = "…"
"""Where a record line has its sequence, a line of live text has this."""


class _Printer:
    """``watch``'s output: a line per record; live text grows on a line of its own (``…``,
    the step, the submission, then each fragment as it comes), ended before the next line."""

    def __init__(self, *, as_json: bool, verbose: bool) -> None:
        self._as_json = as_json
        self._verbose = verbose
        self._open: tuple[str, int] | None = None
        """The step whose line of live text is being written."""

    def record(self, record: dict[str, Any]) -> None:
        self._end_line()
        _show(record, self._as_json, self._verbose)

    def delta(self, delta: TextDelta) -> None:
        if self._as_json:
            print_json({"delta": delta.model_dump()})
            print(end="", flush=True)
            return
        key = (delta.submission_id, delta.step)
        if delta.restart:
            self._end_line()
            print(f"{TEXT_MARK:>6}  (step {delta.step} started over)")
        if self._open != key:
            self._end_line()
            print(f"{TEXT_MARK:>6}  {f'step {delta.step}':<18} {delta.submission_id}  ", end="")
            self._open = key
        indent = " " * (29 + len(delta.submission_id))  # under the records' summaries
        print(delta.text.replace("\n", "\n" + indent), end="", flush=True)

    def _end_line(self) -> None:
        if self._open is not None:
            print(flush=True)
            self._open = None

    def close(self) -> None:
        with contextlib.suppress(OSError):  # stdout may be gone (a closed pipe)
            self._end_line()


def _show(record: dict[str, Any], as_json: bool, verbose: bool) -> None:
    if as_json:
        print_json(record)
    else:
        what = (
            json.dumps(record["body"], default=str)
            if verbose
            else summary(record["kind"], record["body"])
        )
        print(f"{record['sequence']:>6}  {record['kind']:<18} {record['submission_id']}  {what}")
    print(end="", flush=True)


async def watch(
    database_url: str,
    thread_id: str,
    *,
    as_json: bool,
    follow: bool,
    verbose: bool = False,
    text: bool = True,
) -> int:
    """Print the thread's records in order, each in a few words (a model's reply as its text;
    ``verbose``: the whole body); with ``follow``, keep printing new ones, waiting for a thread
    that does not exist yet (``tail -F``; a note on stderr says so, except under ``--json``),
    and, with ``text``, the live text of the steps that stream as it arrives (`_Printer`;
    ``--json``: ``{"delta": TextDelta}`` lines). Without ``follow`` it prints the records only
    (the journal: no live text, which a re-run could still replace), and an unknown thread
    raises `NotFound`."""
    pool = await create_pool(database_url, max_size=2)
    printer = _Printer(as_json=as_json, verbose=verbose)
    try:
        if follow and not as_json:
            try:
                await StatusReader(pool).thread(thread_id)
            except NotFound:
                print(
                    f"threadwarden: thread {thread_id} does not exist yet; waiting for it",
                    file=sys.stderr,
                    flush=True,
                )
        feed = follow_thread(pool, thread_id, live=follow, wait_for_thread=follow, text=text)
        async with contextlib.aclosing(feed):
            async for item in feed:
                if isinstance(item, TextDelta):
                    printer.delta(item)
                else:
                    printer.record(item)
        return 0
    finally:
        printer.close()
        await pool.close()
