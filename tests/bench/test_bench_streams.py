"""``python -m bench --streams N``: its flag, the event-stream client process against a small
chunked SSE server, and how the figures are reported (no database, Temporal or console)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench import report, sse
from bench.cli import parse_args
from bench.measure import SideRun
from bench.procs import environment
from bench.side import Shape
from bench.streams import OPEN_LINE, memory_kib

TOKEN = "bench-test-token"
DEADLINE_S = 15.0


def test_the_streams_flag() -> None:
    assert parse_args([]).streams == 0
    assert parse_args(["--streams", "200", "--hosts", "50"]).streams == 200


@pytest.mark.parametrize(
    "argv",
    [
        ["--streams", "-1"],
        ["--streams", "many"],
        ["--streams", "5", "--soak", "10"],
        ["--streams", "5", "--shape", "agent"],
    ],
)
def test_bad_streams_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2
    assert "--streams" in capsys.readouterr().err


def _event(sequence: int) -> bytes:
    data = json.dumps({"sequence": sequence, "kind": "settlement", "body": {"say": "a\nb"}})
    return f"event: record\nid: {sequence}\ndata: {data}\n\n".encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@contextlib.asynccontextmanager
async def sse_server(records: dict[str, int], late: asyncio.Event) -> AsyncIterator[str]:
    """A console-like stream per thread: ``: live``, then records 1..N-1 (the last one split
    across two chunks), then record N once ``late`` is set; ``busy`` and a missing token: 503
    and 401."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        thread = head.split()[1].split("/")[3]
        if f"authorization: bearer {TOKEN}" not in head.lower() or thread not in records:
            status = "401 Unauthorized" if thread in records else "503 Service Unavailable"
            writer.write(f"HTTP/1.1 {status}\r\ncontent-length: 4\r\n\r\nnope".encode())
        else:
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n" + _chunk(b": live\n\n")
            )
            last = records[thread]
            for sequence in range(1, last - 1):
                writer.write(_chunk(_event(sequence)))
            split = _event(last - 1)
            writer.write(_chunk(split[:10]) + _chunk(split[10:]) + _chunk(b": keepalive\n\n"))
            await writer.drain()
            await late.wait()
            writer.write(_chunk(_event(last)))
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client leaves
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_the_stream_process_counts_record_events_until_caught_up() -> None:
    records = {"t1": 4, "t2": 3}
    late = asyncio.Event()
    async with sse_server(records, late) as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.sse",
            url,
            "5",
            "t1",
            "t2",
            "busy",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=environment({sse.TOKEN_ENV: TOKEN}),
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), DEADLINE_S)
            opened = OPEN_LINE.match(line.decode().strip())
            assert opened is not None, line
            assert opened.groups() == ("4", "5")  # t1, t2, busy, t1, t2: "busy" is refused
            proc.stdin.write((json.dumps(records) + "\n").encode())
            await proc.stdin.drain()
            late.set()  # the last record of each thread arrives only now: they wait for it
            result = json.loads(await asyncio.wait_for(proc.stdout.readline(), DEADLINE_S))
            assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert result["requested"] == 5 and result["opened"] == 4
    assert result["caught_up"] == 4
    assert result["events_received"] == result["events_expected"] == 2 * (4 + 3)
    assert (result["failed"], result["ended_by_server"], result["out_of_order"]) == (1, 0, 0)
    assert result["errors"] == ["HTTP 503: nope"]


async def test_a_stream_without_the_token_is_refused() -> None:
    late = asyncio.Event()
    late.set()
    async with sse_server({"t1": 2}, late) as url:
        stream = sse.Stream("t1")
        await asyncio.wait_for(sse.follow(url, stream, token=None), DEADLINE_S)
    assert not stream.opened and stream.error == "HTTP 401: nope"


async def test_a_body_cut_without_its_last_chunk_ends_the_stream() -> None:
    """As a console stopping with streams open does (uvicorn cancels them)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(_chunk(b": live\n\n") + _chunk(_event(1)))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        stream = sse.Stream("t1")
        port = server.sockets[0].getsockname()[1]
        await asyncio.wait_for(sse.follow(f"http://127.0.0.1:{port}", stream), DEADLINE_S)
    assert (stream.opened, stream.events, stream.ended, stream.error) == (True, 1, True, None)


def test_a_message_split_anywhere_is_counted_once() -> None:
    stream = sse.Stream("t")
    data = b": live\n\n" + _event(1) + b": keepalive\n\n" + _event(2)
    for n in range(len(data)):
        stream.feed(data[n : n + 1])
    assert (stream.opened, stream.events, stream.last, stream.out_of_order) == (True, 2, 2, 0)
    stream.feed(_event(2) + _event(4))  # a repeat, a gap
    assert (stream.events, stream.last, stream.out_of_order) == (4, 4, 2)


def _streams(
    caught_up: int, *, received: int = 40, errors: list[str] | None = None
) -> dict[str, Any]:
    return {
        "requested": 4,
        "opened": 4,
        "events_received": received,
        "events_expected": 40,
        "caught_up": caught_up,
        "ended_by_server": 0,
        "out_of_order": 0,
        "failed": 0,
        "catch_up_s": 0.01,
        "console_rss_idle_mib": 80.0,
        "console_rss_open_mib": 82.0,
        "console_rss_peak_mib": 90.0,
        "console_rss_end_mib": 88.0,
        "errors": errors or [],
        "console_sql_statements": 30,
    }


def _run(side: str, seconds: float, streams: dict[str, Any] | None = None) -> SideRun:
    run = SideRun(side, 10, completed=10, seconds=seconds)
    run.cpu_s = {"workers": 0.1, "temporal": 0.1, "postgres": 0.1, "console": 0.02}
    run.streams = streams
    return run


def test_stream_figures_are_reported_beside_threadwarden(shape: Shape) -> None:
    runs = {
        "threadwarden": [_run("threadwarden", 1.0, _streams(4)) for _ in range(3)],
        "baseline": [_run("baseline", 1.0) for _ in range(3)],
    }
    runs["threadwarden"][1].streams = _streams(4) | {"console_rss_peak_mib": 120.0}
    data = report.result(runs, shape, streams=4)
    json.dumps(data)
    assert data["streams"] == 4
    tw = data["threadwarden"]
    assert tw["streams"]["console_rss_peak_mib"] == 90.0  # the median of 90, 120, 90
    assert tw["streams"]["events_received"] == 40
    assert data["baseline"]["streams"] is None
    assert tw["cpu_ms_per_unit"] == 30.0  # the console's CPU is reported apart
    assert tw["cpu_ms_per_unit_by_process"]["console"] == 2.0
    assert report.complete(data)
    text = report.table(data)
    assert "event streams open (worst rep)" in text and "4/4" in text
    assert "peak (VmHWM)" in text


@pytest.mark.parametrize(
    "streams",
    [
        _streams(3),
        _streams(4, received=39),
        _streams(4, errors=["HTTP 503"]),
        _streams(4) | {"out_of_order": 1},
    ],
)
def test_a_stream_that_missed_records_makes_the_run_incomplete(
    streams: dict[str, Any], shape: Shape
) -> None:
    runs = {
        "threadwarden": [
            _run("threadwarden", 1.0, _streams(4)),
            _run("threadwarden", 1.0, streams),
        ],
        "baseline": [_run("baseline", 1.0)] * 2,
    }
    data = report.result(runs, shape, streams=4)
    assert not report.complete(data)


def test_without_streams_no_stream_rows(shape: Shape) -> None:
    runs = {name: [_run(name, 1.0)] for name in report.SIDES}
    data = report.result(runs, shape)
    assert data["threadwarden"]["streams"] is None and data["streams"] == 0
    assert "event streams" not in report.table(data)


def test_memory_of_a_process() -> None:
    memory = memory_kib(os.getpid())
    assert memory["VmHWM"] >= memory["VmRSS"] > 0
