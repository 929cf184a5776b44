"""Local S3 for tests and benchmarks: a moto server and a recording, fault-injecting proxy.

Nothing here depends on pytest, so benchmarks and scripts can use it too::

    moto = start_moto()
    bucket = moto.create_bucket()
    with S3Proxy(moto.endpoint_url, latency_s=0.02) as proxy:
        fs = s3fs.S3FileSystem(**proxy.storage_options())
        fs.pipe(f"{bucket}/key", b"hello")
        print([r.kind for r in proxy.records()])  # ['PutObject']
    moto.delete_bucket(bucket)
    moto.stop()

Benchmarks run moto and the proxy each in a child process of its own, so neither
shares a GIL with the client it serves (the proxy's records stay in its process)::

    s3 = start_local_s3(latency_s=0.02)  # layout "processes"
    bucket = s3.moto.create_bucket()
    fs = s3fs.S3FileSystem(**s3.storage_options())  # through the proxy
    s3.stop()  # ends both children

Everything listens on 127.0.0.1 only and every socket has a timeout. A child exits
when its standard input closes or its parent dies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import itertools
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

DUMMY_KEY = "testing"
DUMMY_SECRET = "testing"
REGION = "us-east-1"
SOCKET_TIMEOUT_S = 60.0
_CHUNK = 256 * 1024
RECORDED_BODY_MAX = 64 * 1024
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}
_bucket_ids = itertools.count()


def dummy_aws_env() -> dict[str, str]:
    """Environment that keeps boto from finding real credentials or regions."""
    return {
        "AWS_ACCESS_KEY_ID": DUMMY_KEY,
        "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
        "AWS_SECURITY_TOKEN": DUMMY_KEY,
        "AWS_SESSION_TOKEN": DUMMY_KEY,
        "AWS_DEFAULT_REGION": REGION,
    }


def storage_options(endpoint_url: str, **extra: Any) -> dict[str, Any]:
    """s3fs keyword arguments for an S3 endpoint with the dummy credentials."""
    options: dict[str, Any] = {
        "key": DUMMY_KEY,
        "secret": DUMMY_SECRET,
        "endpoint_url": endpoint_url,
        "client_kwargs": {"region_name": REGION},
    }
    options.update(extra)
    return options


@dataclass
class MotoS3:
    """A running moto server: its endpoint, a boto3 client and bucket helpers."""

    server: ThreadedMotoServer | ServerProcess
    endpoint_url: str

    def client(self, endpoint_url: str | None = None) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            aws_access_key_id=DUMMY_KEY,
            aws_secret_access_key=DUMMY_SECRET,
            region_name=REGION,
        )

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return storage_options(self.endpoint_url, **extra)

    def create_bucket(self, prefix: str = "refiner-test") -> str:
        name = f"{prefix}-{os.getpid()}-{next(_bucket_ids)}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    def open_uploads(self, bucket: str) -> list[dict[str, Any]]:
        return self.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])

    def empty_bucket(self, bucket: str) -> None:
        """Delete every object and abort every open upload, freeing moto's memory."""
        client = self.client()
        for key in self.keys(bucket):
            client.delete_object(Bucket=bucket, Key=key)
        for upload in self.open_uploads(bucket):
            client.abort_multipart_upload(
                Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
            )

    def delete_bucket(self, bucket: str) -> None:
        self.empty_bucket(bucket)
        self.client().delete_bucket(Bucket=bucket)

    def stop(self) -> None:
        self.server.stop()


def start_moto() -> MotoS3:
    """Start moto's S3 on a free loopback port and return its endpoint."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return MotoS3(server=server, endpoint_url=f"http://{host}:{port}")


@dataclass(frozen=True)
class RequestRecord:
    """One request seen by :class:`S3Proxy`; times are ``time.monotonic()`` seconds."""

    method: str
    path: str
    query: dict[str, str]
    start: float
    end: float
    status: int
    request_bytes: int
    copy_source: bool = False
    body: bytes | None = None
    """The request body when it is at most ``RECORDED_BODY_MAX`` bytes (e.g. Complete's XML)."""
    response_bytes: int = 0
    """The length of the response body (e.g. the bytes a ranged GetObject returned)."""

    @property
    def part_number(self) -> int | None:
        return int(self.query["partNumber"]) if "partNumber" in self.query else None

    @property
    def kind(self) -> str:
        """The S3 operation name, e.g. ``UploadPart`` or ``CompleteMultipartUpload``."""
        q, m = self.query, self.method
        if m == "PUT" and "partNumber" in q and "uploadId" in q:
            return "UploadPartCopy" if self.copy_source else "UploadPart"
        if m == "POST":
            if "uploads" in q:
                return "CreateMultipartUpload"
            if "uploadId" in q:
                return "CompleteMultipartUpload"
            return "DeleteObjects" if "delete" in q else "Post"
        if m == "DELETE":
            return "AbortMultipartUpload" if "uploadId" in q else "DeleteObject"
        if m == "GET" and "uploadId" in q:
            return "ListParts"
        if m == "GET" and "uploads" in q:
            return "ListMultipartUploads"
        is_bucket = self.path.strip("/").count("/") == 0
        if m == "PUT":
            if is_bucket:
                return "CreateBucket"
            return "CopyObject" if self.copy_source else "PutObject"
        if m == "GET":
            return "ListObjects" if is_bucket else "GetObject"
        return "HeadBucket" if m == "HEAD" and is_bucket else "HeadObject"


def max_in_flight(records: list[RequestRecord], kind: str) -> int:
    """Largest number of ``kind`` requests whose [start, end] intervals overlap."""
    events = sorted(
        [(r.start, 1) for r in records if r.kind == kind]
        + [(r.end, -1) for r in records if r.kind == kind],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


_ERROR_XML = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>Injected failure by the test proxy</Message>"
    b"<RequestId>test-proxy</RequestId></Error>"
)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # The status line and headers, then the body, go out as separate writes; with
        # Nagle's algorithm the body would wait for the client's delayed ACK (40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _relay(self) -> None:
        proxy = self.server.proxy
        start = time.monotonic()
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        probe = RequestRecord(
            self.command,
            url.path,
            query,
            start,
            start,
            0,
            0,
            copy_source="x-amz-copy-source" in self.headers,
        )
        if proxy.latency_s:
            time.sleep(proxy.latency_s)
        if delay := proxy.delay_for(probe):
            time.sleep(delay)
        # Each request is recorded before its answer goes out, so a client that has
        # its response can already see the record.
        if proxy.should_drop(probe):
            size = sum(len(c) for c in self._body_chunks(proxy.bandwidth_bps))
            proxy.record(probe, end=time.monotonic(), status=0, size=size, body=None, sent=0)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if proxy.should_fail(probe):
            size = sum(len(c) for c in self._keep_small(self._body_chunks(proxy.bandwidth_bps)))
            status, headers, payload = 500, [("Content-Type", "application/xml")], _ERROR_XML
        else:
            status, headers, payload, size = self._forward(proxy)
        body = b"".join(self._kept) if size <= RECORDED_BODY_MAX else None
        sent = len(payload) if self.command != "HEAD" else 0
        proxy.record(probe, end=time.monotonic(), status=status, size=size, body=body, sent=sent)
        self._answer(status, headers, payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

    def _body_chunks(self, rate: float | None):
        """Yield the request body, throttled to ``rate`` bytes/s for this connection."""
        began, sent = time.monotonic(), 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            pieces = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                pieces.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            stream = [b"".join(pieces)]
        else:
            remaining = int(self.headers.get("Content-Length") or 0)
            stream = _read_exactly(self.rfile, remaining)
        for chunk in stream:
            sent += len(chunk)
            if rate:
                time.sleep(max(0.0, began + sent / rate - time.monotonic()))
            yield chunk

    def _forward(self, proxy: S3Proxy) -> tuple[int, list[tuple[str, str]], bytes, int]:
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        body = b"".join(self._body_chunks(proxy.bandwidth_bps)) if chunked else None
        conn = http.client.HTTPConnection(proxy.upstream_host, timeout=SOCKET_TIMEOUT_S)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP | {"expect", "content-length"}:
                    conn.putheader(name, value)
            length = len(body) if body is not None else int(self.headers.get("Content-Length") or 0)
            conn.putheader("Content-Length", str(length))
            conn.endheaders()
            size = 0
            chunks = [body] if body is not None else self._body_chunks(proxy.bandwidth_bps)
            for chunk in self._keep_small(chunks):
                conn.send(chunk)
                size += len(chunk)
            response = conn.getresponse()
            payload = response.read()
            headers = [
                (k, v)
                for k, v in response.getheaders()
                if k.lower() not in _HOP_BY_HOP | {"server", "date"}
                and (self.command == "HEAD" or k.lower() != "content-length")
            ]
            return response.status, headers, payload, size
        finally:
            conn.close()

    def _keep_small(self, chunks: Any):
        """Pass chunks through, remembering them while the body stays small."""
        self._kept: list[bytes] = []
        kept = 0
        for chunk in chunks:
            kept += len(chunk)
            if kept <= RECORDED_BODY_MAX:
                self._kept.append(chunk)
            yield chunk

    def _answer(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()


def _read_exactly(stream: Any, remaining: int):
    while remaining > 0:
        chunk = stream.read(min(_CHUNK, remaining))
        if not chunk:
            raise ConnectionError(f"client closed the connection with {remaining} bytes unsent")
        remaining -= len(chunk)
        yield chunk


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: S3Proxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # clients hanging up mid-request are expected in fault tests
        super().handle_error(request, client_address)


@dataclass
class Fault:
    """One injected fault (see :meth:`S3Proxy.inject`); ``hits`` counts the requests it hit."""

    kind: str
    fault: str
    times: int | None = None
    part_number: int | None = None
    delay_s: float = 0.0
    after: int = 0
    hits: int = 0
    passed: int = 0

    def matches(self, request: RequestRecord, fault: str) -> bool:
        """Whether this fault hits ``request`` (counting the requests it lets through)."""
        if not (
            self.fault == fault
            and self.kind == request.kind
            and (self.part_number is None or request.part_number == self.part_number)
        ):
            return False
        if self.passed < self.after:
            self.passed += 1
            return False
        return self.times is None or self.hits < self.times


class S3Proxy:
    """HTTP proxy in front of an S3 endpoint that records requests and injects faults.

    Faults persist for their request kind, so botocore's and s3fs's retries fail too:
    ``fail_upload_part = 2`` answers 500 to every UploadPart of part number 2, and
    ``fail_complete = True`` to every CompleteMultipartUpload. Failed requests never
    reach the upstream. ``drop_upload_part_once = 3`` reads the first UploadPart of
    part 3 and hangs up without answering, a transient fault a retry recovers from.
    :meth:`inject` adds failures, dropped connections and delays for any request kind,
    for a bounded number of requests or until :meth:`clear_faults`. ``latency_s``
    delays every request; ``bandwidth_bps`` caps the request-body rate of each
    connection.
    """

    def __init__(
        self,
        upstream_url: str,
        *,
        latency_s: float = 0.0,
        bandwidth_bps: float | None = None,
        max_records: int = 100_000,
    ) -> None:
        self.upstream_host = urllib.parse.urlsplit(upstream_url).netloc
        self.latency_s = latency_s
        self.bandwidth_bps = bandwidth_bps
        self.fail_upload_part: int | None = None
        self.fail_complete = False
        self.drop_upload_part_once: int | None = None
        self._faults: list[Fault] = []
        self._records: deque[RequestRecord] = deque(maxlen=max_records)
        self._lock = threading.Lock()
        self._server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.proxy = self
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return storage_options(self.endpoint_url, **extra)

    def inject(
        self,
        kind: str,
        fault: str = "fail",
        *,
        times: int | None = None,
        part_number: int | None = None,
        delay_s: float = 0.0,
        after: int = 0,
    ) -> Fault:
        """Add a fault for requests of ``kind`` (e.g. ``"UploadPart"``, ``"PutObject"``):
        ``"fail"`` answers 500 InternalError without reaching upstream, ``"drop"`` reads
        the request and hangs up without answering, ``"delay"`` holds the request
        ``delay_s`` before forwarding it. ``times`` bounds how many requests it hits
        (``None``: every one, until :meth:`clear_faults`) once ``after`` matching
        requests went through untouched; ``part_number`` narrows UploadPart faults to
        one part."""
        if fault not in ("fail", "drop", "delay"):
            raise ValueError(f"fault must be 'fail', 'drop' or 'delay', got {fault!r}")
        rule = Fault(kind, fault, times, part_number, delay_s, after)
        with self._lock:
            self._faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        """Remove every fault added with :meth:`inject` and the attribute faults."""
        with self._lock:
            self._faults.clear()
        self.fail_upload_part = None
        self.fail_complete = False
        self.drop_upload_part_once = None

    def _take(self, request: RequestRecord, fault: str) -> Fault | None:
        with self._lock:
            for rule in self._faults:
                if rule.matches(request, fault):
                    rule.hits += 1
                    return rule
        return None

    def delay_for(self, request: RequestRecord) -> float:
        rule = self._take(request, "delay")
        return rule.delay_s if rule is not None else 0.0

    def should_drop(self, request: RequestRecord) -> bool:
        with self._lock:
            drop = (
                request.kind == "UploadPart" and request.part_number == self.drop_upload_part_once
            )
            if drop:
                self.drop_upload_part_once = None
                return True
        return self._take(request, "drop") is not None

    def should_fail(self, request: RequestRecord) -> bool:
        if request.kind == "UploadPart" and request.part_number == self.fail_upload_part:
            return True
        if request.kind == "CompleteMultipartUpload" and self.fail_complete:
            return True
        return self._take(request, "fail") is not None

    def record(
        self,
        probe: RequestRecord,
        *,
        end: float,
        status: int,
        size: int,
        body: bytes | None,
        sent: int,
    ) -> None:
        done = dataclasses.replace(
            probe, end=end, status=status, request_bytes=size, body=body, response_bytes=sent
        )
        with self._lock:
            self._records.append(done)

    def records(self, kind: str | None = None) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self._records if kind is None or r.kind == kind]

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def start(self) -> S3Proxy:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=SOCKET_TIMEOUT_S)

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_PARENT_POLL_S = 0.5
_PROXY_PROCESS_RECORDS = 1_000
SERVER_LAYOUTS = {
    "processes": "moto and the proxy each in a process of its own",
    "in-process": "moto and the proxy in threads of the client's process",
}
"""The ways :func:`start_local_s3` lays the servers out, with a line to record in results."""

_CHILD = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from tests.s3_server import _serve_child; _serve_child(sys.argv[1:])"
)


class ServerProcess:
    """A server in a child process of this one and its endpoint; :meth:`stop` ends it.

    The child exits when its standard input closes (:meth:`stop` closes it, and so does
    this process's death) or when it finds itself orphaned, so no server outlives the
    process that started it::

        moto = start_moto_process()
        with start_proxy_process(moto.endpoint_url, latency_s=0.02) as proxy:
            fs = s3fs.S3FileSystem(**proxy.storage_options())
        moto.stop()
    """

    def __init__(self, process: subprocess.Popen[str], endpoint_url: str) -> None:
        self.process = process
        self.endpoint_url = endpoint_url

    @property
    def pid(self) -> int:
        return self.process.pid

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return storage_options(self.endpoint_url, **extra)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Close the child's standard input and wait for it; kill it if it lingers."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout_s)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn(args: list[str], timeout_s: float) -> ServerProcess:
    """Start ``_serve_child(args)`` in a fresh interpreter and wait at most ``timeout_s``
    for the endpoint it prints."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    process = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(root=root), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout_s)
    line = process.stdout.readline().strip() if ready else ""
    if not line.startswith("http://127.0.0.1:"):
        ServerProcess(process, "").stop(timeout_s=1.0)
        why = "did not answer in time" if not ready else f"exited with {process.returncode}"
        raise RuntimeError(f"the {args[0]} server process {why} (printed {line!r})")
    return ServerProcess(process, line)


def start_moto_process(*, timeout_s: float = STARTUP_TIMEOUT_S) -> MotoS3:
    """Start moto's S3 in a child process on a free loopback port; ``stop()`` ends it."""
    server = _spawn(["moto"], timeout_s)
    return MotoS3(server=server, endpoint_url=server.endpoint_url)


def start_proxy_process(
    upstream_url: str,
    *,
    latency_s: float = 0.0,
    bandwidth_bps: float | None = None,
    timeout_s: float = STARTUP_TIMEOUT_S,
) -> ServerProcess:
    """An :class:`S3Proxy` forwarding to ``upstream_url`` in a child process, with the
    same ``latency_s`` and ``bandwidth_bps``; it keeps its records (and faults) to itself."""
    args = ["proxy", upstream_url, repr(float(latency_s)), repr(float(bandwidth_bps or 0))]
    return _spawn(args, timeout_s)


def _serve_child(argv: list[str]) -> None:
    """A child's life: start the server, print its endpoint, serve until standard input
    closes or the parent is gone, stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    parent = os.getppid()
    server: MotoS3 | S3Proxy
    if argv[0] == "moto":
        server = start_moto()
    else:
        upstream, latency, bandwidth = argv[1], float(argv[2]), float(argv[3])
        server = S3Proxy(
            upstream,
            latency_s=latency,
            bandwidth_bps=bandwidth or None,
            max_records=_PROXY_PROCESS_RECORDS,
        ).start()
    print(server.endpoint_url, flush=True)
    closed = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not closed.wait(_PARENT_POLL_S) and os.getppid() == parent:
        pass
    server.stop()


@dataclass
class LocalS3:
    """moto behind a latency proxy, laid out as :data:`SERVER_LAYOUTS` names: clients
    reach moto through :meth:`storage_options` (the proxy), or directly through
    ``moto``'s."""

    moto: MotoS3
    proxy: S3Proxy | ServerProcess
    layout: str

    @property
    def endpoint_url(self) -> str:
        return self.proxy.endpoint_url

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return storage_options(self.endpoint_url, **extra)

    def stop(self) -> None:
        self.proxy.stop()
        self.moto.stop()

    def __enter__(self) -> LocalS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_local_s3(
    latency_s: float = 0.0, *, layout: str = "processes", bandwidth_bps: float | None = None
) -> LocalS3:
    """moto and a proxy adding ``latency_s`` per request: each in a child process
    (``"processes"``) or in threads of this process (``"in-process"``)."""
    if layout not in SERVER_LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(SERVER_LAYOUTS)}, got {layout!r}")
    if layout == "in-process":
        moto = start_moto()
        proxy: S3Proxy | ServerProcess = S3Proxy(
            moto.endpoint_url, latency_s=latency_s, bandwidth_bps=bandwidth_bps
        ).start()
    else:
        moto = start_moto_process()
        try:
            proxy = start_proxy_process(
                moto.endpoint_url, latency_s=latency_s, bandwidth_bps=bandwidth_bps
            )
        except BaseException:
            moto.stop()
            raise
    return LocalS3(moto=moto, proxy=proxy, layout=layout)
