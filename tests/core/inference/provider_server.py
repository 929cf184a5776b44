"""A loopback HTTP server that speaks the OpenAI Responses, OpenAI chat completions
and Anthropic Messages wire formats, for tests and benchmarks.

It is a small HTTP/1.1 keep-alive server on asyncio streams, running its own event
loop in a background thread (``ProviderServer``) or in a child process
(``ProviderServerProcess``, used by the benchmark so the client does not share a
GIL with the server). It binds 127.0.0.1 on an ephemeral port only.

Each request is checked for the provider's shape (model, input/messages, auth
header); a request that does not fit gets a 400 with a provider-style error body.
Tests queue ``Fault`` objects to inject 429 + Retry-After, 5xx, slow responses,
malformed JSON, 400s and dropped connections; the server records every request,
the highest number of requests in flight at once, and the connections it accepted
(in all, and the most open at once).

    with ProviderServer(api_key="sk-test") as server:
        server.base_url            # "http://127.0.0.1:PORT/v1"
        server.enqueue(Fault(status=429, headers={"Retry-After": "1"}))
"""

from __future__ import annotations

import asyncio
import collections
import json
import multiprocessing
import selectors
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httptools

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


@dataclass
class Fault:
    """What the server does with one request instead of answering normally.

    ``status`` other than 200 sends a provider-style error body (or ``body``);
    ``body`` replaces the response body verbatim (e.g. malformed JSON);
    ``delay`` sleeps before answering; ``disconnect`` closes the socket unanswered.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    delay: float = 0.0
    disconnect: bool = False


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    json: Any


class _Handler:
    """Protocol logic shared by the thread and process flavours of the server."""

    def __init__(self, api_key: str | None, service_time: float, record: bool) -> None:
        self.api_key = api_key
        self.service_time = service_time
        self.record = record
        self.requests: list[RecordedRequest] = []
        self.faults: collections.deque[Fault] = collections.deque()
        self.reply: Callable[[RecordedRequest], str] | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.served = 0
        self.connections = 0
        self.open_connections = 0
        self.max_open_connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_connections += 1
        self.max_open_connections = max(self.max_open_connections, self.open_connections)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.served += 1
                if not await self._respond(method, path, headers, body, writer):
                    break
        except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError):
            pass  # client went away, or the server is stopping
        finally:
            self.open_connections -= 1
            writer.close()

    async def _respond(self, method, path, headers, body, writer) -> bool:
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        request = RecordedRequest(method, path, headers, payload)
        if self.record:
            self.requests.append(request)
        fault = self.faults.popleft() if self.faults else Fault()
        # In flight from arrival until the answer is ready (it leaves before the write,
        # so a client's next request can never be counted alongside this one).
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            delay = fault.delay or self.service_time
            if delay:
                await asyncio.sleep(delay)
            if fault.disconnect:
                return False
            if fault.body is not None:
                status, data = fault.status, fault.body
            elif fault.status != 200:
                status, data = fault.status, _error_body(path, f"injected HTTP {fault.status}")
            else:
                status, data = self._answer(request)
        finally:
            self.in_flight -= 1
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        head += [f"{k}: {v}" for k, v in fault.headers.items()]
        head += ["content-type: application/json", f"content-length: {len(data)}", "", ""]
        writer.write("\r\n".join(head).encode("latin-1") + data)
        await writer.drain()
        return True

    def _answer(self, request: RecordedRequest) -> tuple[int, bytes]:
        path, headers, body = request.path, request.headers, request.json
        if path.endswith("/messages"):
            problem = self._check_anthropic(headers, body)
        elif path.endswith("/responses") or path.endswith("/chat/completions"):
            problem = self._check_openai(path, headers, body)
        else:
            return 404, _error_body(path, f"no route for {request.method} {path}")
        if problem is not None:
            return problem
        text = self.reply(request) if self.reply else _echo(request)
        n_in = sum(len(str(m.get("content", "")).split()) for m in _messages(path, body))
        n_out = len(text.split())
        if path.endswith("/responses"):
            out = {
                "id": "resp_1",
                "object": "response",
                "status": "completed",
                "model": body["model"],
                "output": [
                    {"type": "reasoning", "id": "rs_1", "summary": []},
                    {
                        "type": "message",
                        "id": "msg_1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    },
                ],
                "usage": {"input_tokens": n_in, "output_tokens": n_out},
            }
        elif path.endswith("/chat/completions"):
            out = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": n_in,
                    "completion_tokens": n_out,
                    "total_tokens": n_in + n_out,
                },
            }
        else:
            tools = body.get("tools")
            if tools:
                block = {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": tools[0]["name"],
                    "input": json.loads(text),
                }
            else:
                block = {"type": "text", "text": text}
            out = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [block],
                "stop_reason": "tool_use" if tools else "end_turn",
                "usage": {"input_tokens": n_in, "output_tokens": n_out},
            }
        return 200, json.dumps(out).encode()

    def _check_openai(self, path, headers, body) -> tuple[int, bytes] | None:
        auth = headers.get("authorization")
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            # Like the real API, echo what was sent: clients must scrub it.
            return 401, _error_body(path, f"Incorrect API key provided: {auth}")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return 400, _error_body(path, "missing required parameter: 'model'")
        key = "input" if path.endswith("/responses") else "messages"
        value = body.get(key)
        if path.endswith("/responses") and isinstance(value, str):
            return None
        if not _valid_messages(value, {"system", "developer", "user", "assistant"}):
            return 400, _error_body(path, f"invalid '{key}': expected a list of role/content")
        return None

    def _check_anthropic(self, headers, body) -> tuple[int, bytes] | None:
        path = "/v1/messages"
        if self.api_key is not None and headers.get("x-api-key") != self.api_key:
            return 401, _error_body(path, f"invalid x-api-key: {headers.get('x-api-key')}")
        if not headers.get("anthropic-version"):
            return 400, _error_body(path, "anthropic-version: header is required")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return 400, _error_body(path, "model: Field required")
        if not isinstance(body.get("max_tokens"), int):
            return 400, _error_body(path, "max_tokens: Field required")
        if not _valid_messages(body.get("messages"), {"user", "assistant"}):
            return 400, _error_body(path, "messages: roles must be 'user' or 'assistant'")
        return None


def _valid_messages(value: Any, roles: set[str]) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and m.get("role") in roles and "content" in m for m in value)
    )


def _messages(path: str, body: dict) -> list[dict]:
    value = body.get("input") if path.endswith("/responses") else body.get("messages")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value)


def _echo(request: RecordedRequest) -> str:
    last = _messages(request.path, request.json)[-1]
    return f"echo: {last['content']}"


def _error_body(path: str, message: str) -> bytes:
    if path.endswith("/messages"):
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        error = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return json.dumps(error).encode()


class ProviderServer:
    """The fake provider on a background thread: ``with ProviderServer() as s: ...``."""

    def __init__(
        self, *, api_key: str | None = None, service_time: float = 0.0, record: bool = True
    ) -> None:
        self._handler = _Handler(api_key, service_time, record)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self.port = 0

    # Test-facing state lives on the handler; expose it directly.
    @property
    def requests(self) -> list[RecordedRequest]:
        return self._handler.requests

    @property
    def max_in_flight(self) -> int:
        return self._handler.max_in_flight

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        return self._handler.connections

    @property
    def max_open_connections(self) -> int:
        """The most connections that were open at once."""
        return self._handler.max_open_connections

    @property
    def served(self) -> int:
        """Requests received (counted on arrival, so it is exact once a client call returns)."""
        return self._handler.served

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_reply(self, reply: Callable[[RecordedRequest], str] | None) -> None:
        self._handler.reply = reply

    def set_service_time(self, seconds: float) -> None:
        self._handler.service_time = seconds

    def enqueue(self, *faults: Fault) -> None:
        self._handler.faults.extend(faults)

    def reset(self) -> None:
        self._handler.requests.clear()
        self._handler.faults.clear()
        self._handler.max_in_flight = 0
        self._handler.served = 0
        self._handler.connections = 0
        self._handler.max_open_connections = self._handler.open_connections
        self._handler.reply = None

    def start(self) -> ProviderServer:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake provider server did not start within 10 s")
        return self

    def _run(self, ready: threading.Event) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            server = await asyncio.start_server(self._handler.handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            async with server:
                await self._stopped.wait()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        asyncio.run(main())

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _TimedConnection(asyncio.Protocol):
    """One connection of the process flavour: parses with httptools and answers each
    request ``service_time`` after its bytes arrived, so the server's own parsing and
    JSON work count inside the service time instead of queueing in front of it."""

    def __init__(self, handler: _Handler) -> None:
        self._handler = handler
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._arrived = 0.0
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._arrived = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            assert self._transport is not None
            self._transport.close()

    def on_message_begin(self) -> None:
        self._url, self._headers, self._body = b"", {}, []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        handler = self._handler
        handler.served += 1
        handler.in_flight += 1
        handler.max_in_flight = max(handler.max_in_flight, handler.in_flight)
        method = self._parser.get_method().decode("ascii")
        body = b"".join(self._body)
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        path = self._url.decode("latin-1")
        status, data = handler._answer(RecordedRequest(method, path, self._headers, payload))
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
        )
        answer = head.encode("latin-1") + data
        self._loop.call_at(self._arrived + handler.service_time, self._send, answer)

    def _send(self, answer: bytes) -> None:
        self._handler.in_flight -= 1
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(answer)


def _serve_in_process(conn, api_key: str | None, service_time: float) -> None:
    async def main() -> None:
        handler = _Handler(api_key, service_time, record=False)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _TimedConnection(handler), "127.0.0.1", 0, backlog=1024
        )
        conn.send(server.sockets[0].getsockname()[1])
        # Serve until the parent asks for the counters (or goes away).
        stats = await loop.run_in_executor(None, conn.recv)
        del stats
        conn.send({"served": handler.served, "max_in_flight": handler.max_in_flight})
        server.close()

    # asyncio's own loop (its timers never fire early, unlike uvloop's millisecond
    # ones) over select(), whose timeout has microsecond precision: epoll rounds every
    # wait up to a whole millisecond, which would add ~0.5 ms to the service time.
    with asyncio.Runner(
        loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())
    ) as runner:
        runner.run(main())


class ProviderServerProcess:
    """The fake provider in a child process (for benchmarks): a fixed service time
    counted from each request's arrival, the same request checks and answers, no
    faults, no recording. ``stop()`` returns ``{"served": n, "max_in_flight": m}``."""

    def __init__(self, *, api_key: str | None = None, service_time: float = 0.0) -> None:
        self._args = (api_key, service_time)
        self._conn = None
        self._process: multiprocessing.Process | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ProviderServerProcess:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve_in_process, args=(child, *self._args))
        self._process.daemon = True
        self._process.start()
        if not parent.poll(30):
            self._process.kill()
            raise RuntimeError("fake provider server process did not start within 30 s")
        self.port = parent.recv()
        self._conn = parent
        return self

    def stop(self) -> dict[str, int]:
        """Stop the process (once; later calls return ``{}``) and return its counters."""
        stats: dict[str, int] = {}
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.send("stop")
            if conn.poll(10):
                stats = conn.recv()
            conn.close()
        if self._process is not None:
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
        return stats

    def __enter__(self) -> ProviderServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
