"""The event-stream clients of ``--streams``: N server-sent-event streams on one console, counted.

``python -m bench.sse URL COUNT THREAD...`` runs in a process of its own (its CPU is reported
apart from the measured processes', and its parsing never delays the bench's submit clock). It
opens COUNT streams ``GET URL/v1/threads/{thread}/events``, round-robin over the threads, with
``Authorization: Bearer $BENCH_SSE_TOKEN`` when that variable is set, over plain asyncio
sockets (HTTP/1.1, chunked or close-delimited bodies), and counts each stream's ``event:
record`` messages, the last ``id:`` it saw and those that did not follow the one before (a
stream reads its thread from sequence 1, so each record's is the last one's + 1), and its
``event: delta`` messages (live text, ``--stream``): how many, the wall-clock time
(``time.time()``) the first one of each submission arrived, and the steps whose text started
over (a delta with ``"restart": true``: the step was cut off mid-answer and run again). On
stdio:

1. once every stream has answered (its ``: live`` comment, or a refusal or an error), one line
   ``streams open K/N``;
2. then it reads one JSON line ``{thread: last sequence}`` from stdin, waits (at most
   `CATCH_UP_S`) until every open stream of each thread has seen that sequence, prints one JSON
   object (`result`) and exits.

Standard library only: the process starts fast and small.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

CATCH_UP_S = 60.0
"""How long the streams may take to deliver the last records once told what they are."""
OPEN_DEADLINE_S = 60.0
"""How long every stream may take to answer."""
POLL_S = 0.02
TOKEN_ENV = "BENCH_SSE_TOKEN"
MAX_ERRORS = 5
"""Distinct error messages kept in the result."""


@dataclass
class Stream:
    """One event stream's state, updated as its bytes arrive."""

    thread: str
    opened: bool = False
    events: int = 0
    last: int = 0
    """The sequence (``id:``) of the last record event."""
    out_of_order: int = 0
    """Record events whose sequence is not the one after the last (a gap or a repeat)."""
    deltas: int = 0
    """Live-text events (``event: delta``)."""
    first_delta: dict[str, float] = field(default_factory=dict)
    """Each submission's first live-text event: when it arrived (``time.time()``)."""
    restarted: set[tuple[str, int]] = field(default_factory=set)
    """The steps (submission, step) whose text started over (a delta with ``restart``)."""
    status: int | None = None
    error: str | None = None
    ended: bool = False
    """The server ended the stream (it never should while the bench runs)."""
    _buffer: bytearray = field(default_factory=bytearray, repr=False)

    @property
    def answered(self) -> bool:
        return self.opened or self.error is not None or self.ended

    def feed(self, data: bytes) -> None:
        """Count the complete messages in ``data`` and what came before it (``\\n\\n`` ends a
        message, as the console writes them)."""
        buffer = self._buffer
        buffer += data
        start = 0
        while (end := buffer.find(b"\n\n", start)) >= 0:
            self._message(bytes(buffer[start:end]))
            start = end + 2
        del buffer[:start]

    def _message(self, message: bytes) -> None:
        if message.startswith(b":"):
            self.opened = self.opened or message.startswith(b": live")
            return
        is_record = is_delta = False
        sequence = None
        data = b""
        for line in message.split(b"\n"):
            if line == b"event: record":
                is_record = True
            elif line == b"event: delta":
                is_delta = True
            elif line.startswith(b"id: "):
                with contextlib.suppress(ValueError):
                    sequence = int(line[4:])
            elif line.startswith(b"data: "):
                data += line[6:]
        if is_delta:
            self._delta(data)
        if is_record:
            self.events += 1
            self.out_of_order += sequence != self.last + 1
            if sequence is not None:
                self.last = max(self.last, sequence)

    def _delta(self, data: bytes) -> None:
        arrived = time.time()
        self.deltas += 1
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            delta = json.loads(data)
            submission = delta.get("submission_id")
            if isinstance(submission, str):
                self.first_delta.setdefault(submission, arrived)
                if delta.get("restart") is True:
                    self.restarted.add((submission, delta.get("step")))


def _request(url: str, thread: str, token: str | None) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = f"{parts.path.rstrip('/')}/v1/threads/{quote(thread, safe='')}/events"
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Accept: text/event-stream",
        *([f"Authorization: Bearer {token}"] if token else []),
    ]
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode()


async def follow(url: str, stream: Stream, token: str | None = None) -> None:
    """Read ``stream``'s events until the server ends it or the task is cancelled."""
    host, port, request = _request(url, stream.thread, token)
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, _, headers = head.partition(b"\r\n")
        stream.status = int(status_line.split()[1])
        if stream.status != 200:
            body = await asyncio.wait_for(reader.read(300), 5)
            stream.error = f"HTTP {stream.status}: {body.decode(errors='replace')[:200]}"
            return
        if b"transfer-encoding: chunked" in headers.lower():
            # A server that stops cuts the body without its last chunk: the end all the same.
            while (line := await reader.readline()) and (size := int(line.split(b";")[0], 16)):
                stream.feed((await reader.readexactly(size + 2))[:-2])
        else:
            while data := await reader.read(65536):
                stream.feed(data)
        stream.ended = True
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as error:
        stream.error = f"{type(error).__name__}: {error}"[:200]
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def wait_for_all(check: Any, deadline_s: float) -> bool:
    """Poll ``check()`` every `POLL_S` until it holds (True) or ``deadline_s`` passes (False)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while not check():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


def caught_up(streams: Sequence[Stream], expected: dict[str, int]) -> int:
    """Streams that saw their thread's last sequence (an unknown thread: nothing to see)."""
    return sum(s.last >= expected.get(s.thread, 0) for s in streams if s.opened)


def result(
    streams: Sequence[Stream], expected: dict[str, int], catch_up_s: float
) -> dict[str, Any]:
    """What the streams received; ``events_expected`` is every opened stream's thread's last
    sequence (a stream reads its thread from its first record); ``first_deltas``: ``[submission,
    time]`` of each stream's first live-text event of each submission; ``restarted_steps``: the
    steps whose text started over at some stream (each counted once)."""
    errors = list(dict.fromkeys(s.error for s in streams if s.error is not None))
    return {
        "requested": len(streams),
        "opened": sum(s.opened for s in streams),
        "events_received": sum(s.events for s in streams),
        "events_expected": sum(expected.get(s.thread, 0) for s in streams if s.opened),
        "caught_up": caught_up(streams, expected),
        "out_of_order": sum(s.out_of_order for s in streams),
        "ended_by_server": sum(s.ended for s in streams),
        "failed": sum(s.error is not None for s in streams),
        "catch_up_s": round(catch_up_s, 3),
        "deltas_received": sum(s.deltas for s in streams),
        "first_deltas": [[sub, at] for s in streams for sub, at in s.first_delta.items()],
        "restarted_steps": len(set().union(*(s.restarted for s in streams))),
        "errors": errors[:MAX_ERRORS],
    }


async def _stdin_line() -> str:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return (await reader.readline()).decode()


async def run(url: str, count: int, threads: Sequence[str]) -> None:
    token = os.environ.get(TOKEN_ENV) or None
    streams = [Stream(threads[n % len(threads)]) for n in range(count)]
    tasks = [asyncio.create_task(follow(url, s, token)) for s in streams]
    await wait_for_all(lambda: all(s.answered for s in streams), OPEN_DEADLINE_S)
    print(f"streams open {sum(s.opened for s in streams)}/{count}", flush=True)
    line = await _stdin_line()
    expected = {str(k): int(v) for k, v in json.loads(line or "{}").items()}
    started = time.perf_counter()
    await wait_for_all(
        lambda: caught_up(streams, expected) == sum(s.opened for s in streams), CATCH_UP_S
    )
    print(json.dumps(result(streams, expected, time.perf_counter() - started)), flush=True)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or not argv[1].isdigit():
        print("usage: python -m bench.sse URL COUNT THREAD...", file=sys.stderr)
        return 2
    asyncio.run(run(argv[0], int(argv[1]), list(argv[2:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
