"""``dagster dev`` for the UI tests ends up on a port of its own when the free port it was
given is taken first: by a socket that is not a webserver, or by another session's
webserver serving another instance."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.dagster.test_demo_cli import dagster_env, new_dagster_home
from tests.dagster.test_webserver_ui import free_port, graphql, start_dagster_dev, stop_group


class _OtherSessionsWebserver(BaseHTTPRequestHandler):
    """Answers like dagster dev does, for an instance in another folder."""

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._send({"dagster_webserver_version": "1.13.27"})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        info = "local_artifact_storage:\n  config:\n    base_dir: /elsewhere/storage\n"
        self._send({"data": {"instance": {"info": info}}})

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def taken_ports() -> Iterator[list[int]]:
    """Two ports already in use: a bare listening socket, then another 'webserver'."""
    bare = socket.socket()
    bare.bind(("127.0.0.1", 0))
    bare.listen()
    other = ThreadingHTTPServer(("127.0.0.1", 0), _OtherSessionsWebserver)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        yield [bare.getsockname()[1], other.server_address[1]]
    finally:
        other.shutdown()
        other.server_close()
        bare.close()


def test_dagster_dev_moves_off_ports_that_another_process_holds(tmp_path: Path, taken_ports):
    home = new_dagster_home(tmp_path)
    offered = [*taken_ports, free_port()]
    given = iter(offered)

    process, base = start_dagster_dev(home, dagster_env(home), tmp_path / "dev.log", given.__next__)
    try:
        assert base == f"http://127.0.0.1:{offered[2]}"
        assert str(home) in graphql(base, "{ instance { info } }")["instance"]["info"]
    finally:
        stop_group(process)
