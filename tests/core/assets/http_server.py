"""A small HTTP file server on 127.0.0.1 that records what clients ask of it.

It serves files from a folder with ``HEAD``, ``GET`` and single ``Range`` requests,
can hold every ``GET`` for ``delay`` seconds, counts how many ``GET``\\s run at
once, and can cut the body of chosen files short (``truncated``) to play a source that
fails half way. The tests read asset URLs through fsspec's HTTP filesystem against it.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# Imported here so forked workers inherit it instead of importing aiohttp each time.
import fsspec.implementations.http  # noqa: F401

_RANGE = re.compile(r"bytes=(\d+)-(\d*)\Z")


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    status: int
    bytes_sent: int


@dataclass
class ServerState:
    root: Path
    delay: float = 0.0
    truncated: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gets(self, path: str | None = None) -> list[Request]:
        with self.lock:
            return [
                r for r in self.requests if r.method == "GET" and (path is None or r.path == path)
            ]

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.max_in_flight = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server: _Server

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def _file(self) -> Path | None:
        relative = self.path.split("?", 1)[0].lstrip("/")
        path = (self.server.state.root / relative).resolve()
        if self.server.state.root.resolve() not in path.parents or not path.is_file():
            return None
        return path

    def _record(self, status: int, sent: int) -> None:
        state = self.server.state
        with state.lock:
            state.requests.append(
                Request(self.command, self.path, self.headers.get("Range"), status, sent)
            )

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        if self.command != "HEAD" and self.path.lstrip("/") in self.server.state.truncated:
            sent = body[: len(body) // 2]
            self.close_connection = True
        else:
            sent = body
        # Recorded before the answer leaves, so a client that has its answer always
        # finds its request in the record.
        self._record(status, 0 if self.command == "HEAD" else len(sent))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(sent)

    def do_HEAD(self):
        path = self._file()
        if path is None:
            self._record(404, 0)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._record(200, 0)
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self):
        state = self.server.state
        with state.lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if state.delay:
                time.sleep(state.delay)
            path = self._file()
            if path is None:
                self._reply(404, b"not found", {})
                return
            data = path.read_bytes()
            requested = self.headers.get("Range")
            if requested is None:
                self._reply(200, data, {"Accept-Ranges": "bytes"})
                return
            match = _RANGE.match(requested.strip())
            if match is None:
                self._reply(400, b"unsupported range", {})
                return
            start = int(match[1])
            end = int(match[2]) if match[2] else len(data) - 1
            if start >= len(data):
                self._reply(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
            end = min(end, len(data) - 1)
            self._reply(
                206,
                data[start : end + 1],
                {"Content-Range": f"bytes {start}-{end}/{len(data)}", "Accept-Ranges": "bytes"},
            )
        finally:
            with state.lock:
                state.in_flight -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: ServerState

    def handle_error(self, request, client_address):
        """Clients closing idle keep-alive connections are not errors."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FileServer:
    """``with FileServer(folder) as server: server.url("a.bin")`` → ``http://127.0.0.1:port/a.bin``."""

    def __init__(self, root: Path, *, delay: float = 0.0) -> None:
        self.state = ServerState(Path(root), delay)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self.state
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, relative: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/{relative}"

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
