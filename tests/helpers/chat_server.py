"""A small scripted OpenAI-compatible chat-completions server on 127.0.0.1 for agent tests.

The answer is a pure function of the conversation, so a replayed step would ask the same
question and the request count shows it: a last message from a tool is answered with text
``final: <tool content>``; a user message ``call TOOL {json args}`` with that tool call; a user
message ``say N`` with N words ``w1 w2 … wN`` (a long answer to stream); any other user message
with ``echo: <message>``. `fail_next` scripts error statuses (a 503 past the client's retries, a
400). Every request body is kept (`requests`), failed ones included.

A request with ``"stream": true`` is answered as the OpenAI API streams (``text/event-stream``,
``chat.completion.chunk`` events): the role first, then the content a word at a time with
`ChatServer.stream_delay_s` between words (a tool call's arguments in a few pieces), then the
``finish_reason``, the usage when ``stream_options.include_usage`` asks for it, and ``[DONE]``.
`streams_started` and `streams_finished` count the streamed answers begun and sent whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from threadwarden.agents._core.compaction import SUMMARY_INSTRUCTIONS

USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}


@dataclass
class ChatServer:
    """The server's script and what it saw; `url` is the ``base_url`` for the clients."""

    port: int = 0
    stream_delay_s: float = 0.1
    """The pause between the words (and tool-argument pieces) of a streamed answer."""
    first_pause_s: float = 0.0
    """A longer pause after a streamed answer's first word, when above `stream_delay_s`: an
    answer that otherwise arrives at once still takes the worker past its first fragment's wait
    (`threadwarden.activities.live_text.FIRST_S`), so its text is live."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    connections: set[asyncio.StreamWriter] = field(default_factory=set)
    streams_started: int = 0
    streams_finished: int = 0
    context_limit: int | None = None
    """Refuse requests whose messages hold more characters than this (400, too long)."""
    hold_after_summary: bool = False
    """Once a summary is asked for, hold the next other request unanswered (until the server
    stops), once: a worker can be killed between a summary and the request that carries it."""
    held: int = 0
    """Requests held so far."""
    released: asyncio.Event = field(default_factory=asyncio.Event)
    _armed: bool = False

    def holds(self, body: dict[str, Any]) -> bool:
        """Whether to hold ``body`` (`hold_after_summary`)."""
        if self.hold_after_summary and summarizes(body):
            self._armed = True
        elif self._armed and self.hold_after_summary:
            self.held += 1
            self._armed = False
            return True
        return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def fail_next(self, status: int, message: str = "scripted failure", *, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``status`` and an OpenAI error body."""
        self.failures.extend([(status, message)] * times)

    def answered(self) -> list[dict[str, Any]]:
        """The requests answered with 200, in order."""
        return [r for r, s in zip(self.requests, self.statuses, strict=True) if s == 200]

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        size = characters(body)
        if self.context_limit is not None and size > self.context_limit:
            self.statuses.append(400)
            message = (
                f"This model's maximum context length is {self.context_limit} characters;"
                f" the messages hold {size}."
            )
            error = {"message": message, "type": "invalid_request_error"}
            return 400, {"error": {**error, "code": "context_length_exceeded"}}
        if self.failures:
            status, message = self.failures.pop(0)
            self.statuses.append(status)
            kind = "server_error" if status >= 500 else "invalid_request_error"
            return status, {"error": {"message": message, "type": kind, "code": None}}
        self.statuses.append(200)
        return 200, _completion(body, len(self.requests))


def words(count: int) -> str:
    """The answer to ``say COUNT``: ``w1 w2 … wCOUNT``."""
    return " ".join(f"w{n}" for n in range(1, count + 1))


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def characters(body: dict[str, Any]) -> int:
    """How many characters a request's messages hold (their text and tool calls)."""
    return sum(
        len(_text(m.get("content"))) + len(json.dumps(m.get("tool_calls") or ""))
        for m in body.get("messages", [])
    )


def summarizes(body: dict[str, Any]) -> bool:
    """Whether a request asks for a summary (the adapters' summary instructions)."""
    return any(
        m.get("role") in ("system", "developer")
        and _text(m.get("content")).startswith(SUMMARY_INSTRUCTIONS)
        for m in body.get("messages", [])
    )


def markers(text: str) -> list[str]:
    """The ``#N`` markers in ``text``, in number order, each once."""
    return sorted(set(re.findall(r"#\d+", text)), key=lambda m: int(m[1:]))


def _completion(body: dict[str, Any], number: int) -> dict[str, Any]:
    last = body["messages"][-1]
    message: dict[str, Any] = {"role": "assistant", "content": None}
    text = _text(last.get("content"))
    said = re.fullmatch(r"say (\d+)", text.strip())
    if summarizes(body):
        message["content"] = "summary: " + " ".join(markers(text))
    elif last.get("role") == "tool":
        message["content"] = f"final: {text}"
    elif text.startswith("call "):
        name, _, args = text[5:].partition(" ")
        call = {"name": name, "arguments": args.strip() or "{}"}
        message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": call}]
    elif said is not None:
        message["content"] = words(int(said.group(1)))
    else:
        message["content"] = f"echo: {text}"
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model", "scripted"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
            }
        ],
        "usage": dict(USAGE),
    }


def _pieces(text: str, parts: int) -> list[str]:
    """``text`` cut into about ``parts`` pieces (a tool call's arguments as they stream)."""
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _deltas(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``delta`` objects of a streamed answer, after the role: each word of the content,
    or each tool call's header and then its arguments in pieces."""
    content = message.get("content")
    if content:
        for word in re.split(r"(?<=\s)(?=\S)", content):
            yield {"content": word}
    for index, call in enumerate(message.get("tool_calls", [])):
        yield {
            "tool_calls": [
                {
                    "index": index,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""},
                }
            ]
        }
        for piece in _pieces(call["function"]["arguments"], 3):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def _chunks(completion: dict[str, Any], body: dict[str, Any]) -> Iterator[dict[str, Any] | None]:
    """A completion as the ``chat.completion.chunk`` objects that stream it; None stands for
    a pause of `ChatServer.stream_delay_s` (between words)."""
    choice = completion["choices"][0]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for n, delta in enumerate(_deltas(choice["message"])):
        if n:
            yield None
        yield chunk(delta)
    yield chunk({}, choice["finish_reason"])
    options = body.get("stream_options") or {}
    if options.get("include_usage"):
        yield {**chunk({}), "choices": [], "usage": completion["usage"]}


async def _stream(
    server: ChatServer, writer: asyncio.StreamWriter, completion: dict[str, Any], body: Any
) -> None:
    """Send ``completion`` as an event stream (chunked transfer encoding: keep-alive holds)."""

    async def send(data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        writer.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        await writer.drain()

    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    server.streams_started += 1
    pause = max(server.stream_delay_s, server.first_pause_s)
    for chunk in _chunks(completion, body):
        if chunk is None:
            await asyncio.sleep(pause)
            pause = server.stream_delay_s
        else:
            await send(json.dumps(chunk))
    await send("[DONE]")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    server.streams_finished += 1


async def _serve(
    server: ChatServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    server.connections.add(writer)
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while True:  # keep-alive: one request after another on the connection
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)
            }
            body = json.loads(
                await reader.readexactly(int(headers.get("content-length", "0"))) or b"{}"
            )
            if server.holds(body):
                await server.released.wait()
                break
            status, answer = server.reply(body)
            if status == 200 and body.get("stream") is True:
                await _stream(server, writer, answer, body)
                continue
            payload = json.dumps(answer).encode()
            writer.write(
                f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
    server.connections.discard(writer)
    writer.close()


@contextlib.asynccontextmanager
async def chat_server() -> AsyncIterator[ChatServer]:
    """Serve on a free port of 127.0.0.1 until the block exits."""
    state = ChatServer()
    listener = await asyncio.start_server(
        lambda r, w: _serve(state, r, w), host="127.0.0.1", port=0
    )
    state.port = listener.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        state.released.set()
        listener.close()
        for writer in list(state.connections):  # idle keep-alive connections end with EOF
            writer.close()
        await listener.wait_closed()
