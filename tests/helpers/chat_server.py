"""A small scripted OpenAI-compatible chat-completions server on 127.0.0.1 for agent tests.

The answer is a pure function of the conversation, so a replayed step would ask the same
question and the request count shows it: a last message from a tool is answered with text
``final: <tool content>``; a user message ``call TOOL {json args}`` with that tool call; any
other user message with ``echo: <message>``. `fail_next` scripts error statuses (a 503 past the
client's retries, a 400). Every request body is kept (`requests`), failed ones included.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChatServer:
    """The server's script and what it saw; `url` is the ``base_url`` for the clients."""

    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    connections: set[asyncio.StreamWriter] = field(default_factory=set)

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
        if self.failures:
            status, message = self.failures.pop(0)
            self.statuses.append(status)
            kind = "server_error" if status >= 500 else "invalid_request_error"
            return status, {"error": {"message": message, "type": kind, "code": None}}
        self.statuses.append(200)
        return 200, _completion(body, len(self.requests))


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _completion(body: dict[str, Any], number: int) -> dict[str, Any]:
    last = body["messages"][-1]
    message: dict[str, Any] = {"role": "assistant", "content": None}
    text = _text(last.get("content"))
    if last.get("role") == "tool":
        message["content"] = f"final: {text}"
    elif text.startswith("call "):
        name, _, args = text[5:].partition(" ")
        call = {"name": name, "arguments": args.strip() or "{}"}
        message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": call}]
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
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


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
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status, answer = server.reply(json.loads(body or b"{}"))
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
        listener.close()
        for writer in list(state.connections):  # idle keep-alive connections end with EOF
            writer.close()
        await listener.wait_closed()
