"""Benchmark: HTTP clients for provider calls, at provider-like latencies.

A loopback fake provider speaking the OpenAI Responses wire format answers every
request a fixed latency after it arrived. Each client sends ``4 x in_flight``
requests (at least 1 s of ideal work) with ``in_flight`` callers each awaiting one
request at a time, builds the JSON body, reads the answer and decodes it; a client
too slow to finish within ``--budget`` seconds sends no new request after that, and
its rate counts the requests it sent. Clients:

- ``refiner Transport``: the inference transport ``generate_text`` uses
  (``refiner_core.inference.transport.Transport.post``: bound, retries, usage, scrubbing);
- ``http1.py exchange``: the hand-written HTTP/1.1 client, called as the transport
  called it (only while ``refiner_core/inference/http1.py`` exists);
- ``httpx HTTP/1.1``: ``httpx.AsyncClient`` with ``max_connections`` = in flight;
- ``httpx HTTP/2``: ``httpx.AsyncClient(http1=False, http2=True)``, HTTP/2 with prior
  knowledge over cleartext (h2c), against hypercorn; the row ``httpx HTTP/1.1
  (hypercorn)`` runs HTTP/1.1 against that same server, so the two rows differ by
  the protocol only;
- ``aiohttp``: ``aiohttp.ClientSession`` with a ``TCPConnector(limit=in_flight)``;
- ``httpx2 HTTP/1.1``: the same client as httpx HTTP/1.1 from ``httpx2``, Pydantic's
  fork of httpx and httpcore (whose connection pool no longer rescans every connection
  per request), when it is installed.

The HTTP/1.1 clients talk to ``ProviderServerProcess`` (the tests' provider server, in
its own process, answering from arrival); HTTP/2 needs an h2 server, so those rows
talk to hypercorn (the same answers from ``_Handler``, also in its own process).
hypercorn allows 100 concurrent streams per connection (its default), so httpx opens
several connections at 256 and 512 in flight. Rows whose package is missing are
skipped (``aiohttp``, ``h2``, ``hypercorn`` and ``httpx2`` are benchmark-only; install
them into the virtual environment).

Per case it prints requests/s, the fraction of the ideal (in_flight / latency), the
client process's CPU per request, and each row's rate divided by httpx HTTP/1.1's,
as medians over ``--repeats`` runs; runs interleave the clients, rotating the order.
On a shared machine the CPU column is the steadier one: a client needing more CPU
than it gets falls behind the ideal in proportion.

    python bench/bench_http_clients.py [--latencies 0.5 2] [--in-flight 64 256 512]
        [--repeats 3] [--rounds 4] [--budget 40] [--no-reference] [--json PATH]

The 20 ms / 64 in flight case of ``bench_inference.py`` runs first for reference
(``--no-reference`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import multiprocessing
import os
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.inference import OpenAIResponsesProvider, RetryPolicy, UsageCounter  # noqa: E402
from refiner_core.inference.transport import Transport  # noqa: E402
from tests.core.inference.provider_server import (  # noqa: E402
    ProviderServerProcess,
    RecordedRequest,
    _Handler,
)

BENCH_KEY = "sk-bench-not-a-real-key"
MODEL = "gpt-4.1"
MIN_IDEAL_SECONDS = 1.0
HTTPX_H1 = "httpx HTTP/1.1"
HTTP1_MODULE = "refiner_core.inference.http1"
HAVE_HTTP1 = importlib.util.find_spec(HTTP1_MODULE) is not None
HAVE_H2 = all(importlib.util.find_spec(m) is not None for m in ("h2", "hypercorn"))
HAVE_AIOHTTP = importlib.util.find_spec("aiohttp") is not None
HAVE_HTTPX2 = importlib.util.find_spec("httpx2") is not None
OURS = "http1.py exchange" if HAVE_HTTP1 else "refiner Transport"


def body_for(i: int) -> dict:
    return {"model": MODEL, "input": f"episode {i}", "max_output_tokens": 16}


def check(status: int, data: object) -> None:
    if status != 200 or not isinstance(data, dict) or "output" not in data:
        raise RuntimeError(f"unexpected answer: HTTP {status} {data!r:.200}")


# Clients: each is ``async (url, in_flight) -> (call, close)`` where ``call(i)`` sends
# request i and checks its answer.

Call = Callable[[int], Awaitable[None]]


async def refiner_transport(url: str, in_flight: int) -> tuple[Call, Callable]:
    provider = OpenAIResponsesProvider(model=MODEL, base_url=url)
    transport = Transport(
        provider,
        max_concurrent_requests=in_flight,
        timeout=60.0,
        retry=RetryPolicy(max_attempts=1),
        usage=UsageCounter(),
    )

    async def call(i: int) -> None:
        check(200, await transport.post(body_for(i)))

    return call, transport.aclose


async def http1_exchange(url: str, in_flight: int) -> tuple[Call, Callable]:
    from refiner_core.inference.http1 import Http1Transport

    http = Http1Transport(max_idle_per_origin=in_flight)
    target = httpx.URL(f"{url}/responses")
    headers = [
        (b"host", target.netloc),
        (b"accept", b"application/json"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {BENCH_KEY}".encode()),
    ]
    timeouts = {"connect": 10.0, "read": 60.0, "write": 60.0, "pool": 60.0}

    async def call(i: int) -> None:
        content = json.dumps(body_for(i)).encode()
        answer = await http.exchange(
            "POST",
            target,
            [*headers, (b"content-length", b"%d" % len(content))],
            content,
            timeouts,
        )
        check(answer.status, json.loads(answer.content))

    return call, http.aclose


def _httpx_client(http2: bool, module: str = "httpx"):
    async def make(url: str, in_flight: int) -> tuple[Call, Callable]:
        lib = importlib.import_module(module)
        limits = lib.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
        client = lib.AsyncClient(
            http1=not http2,
            http2=http2,
            limits=limits,
            timeout=lib.Timeout(60.0, connect=10.0),
            headers={"authorization": f"Bearer {BENCH_KEY}"},
        )
        target = f"{url}/responses"

        async def call(i: int) -> None:
            response = await client.post(target, json=body_for(i))
            check(response.status_code, response.json())

        return call, client.aclose

    return make


async def aiohttp_session(url: str, in_flight: int) -> tuple[Call, Callable]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=in_flight, limit_per_host=in_flight),
        headers={"authorization": f"Bearer {BENCH_KEY}"},
        timeout=aiohttp.ClientTimeout(total=60.0, connect=10.0),
    )
    target = f"{url}/responses"

    async def call(i: int) -> None:
        async with session.post(target, json=body_for(i)) as response:
            check(response.status, await response.json())

    return call, session.close


@dataclass(frozen=True)
class Client:
    name: str
    make: Callable[[str, int], Awaitable[tuple[Call, Callable]]]
    server: str  # "h1" (ProviderServerProcess) or "h2" (hypercorn)


def clients() -> list[Client]:
    found = [Client("refiner Transport", refiner_transport, "h1")]
    if HAVE_HTTP1:
        found.append(Client(OURS, http1_exchange, "h1"))
    found.append(Client(HTTPX_H1, _httpx_client(http2=False), "h1"))
    if HAVE_H2:
        found.append(Client("httpx HTTP/1.1 (hypercorn)", _httpx_client(http2=False), "h2"))
        found.append(Client("httpx HTTP/2 (h2c, hypercorn)", _httpx_client(http2=True), "h2"))
    if HAVE_AIOHTTP:
        found.append(Client("aiohttp", aiohttp_session, "h1"))
    if HAVE_HTTPX2:
        found.append(Client("httpx2 HTTP/1.1", _httpx_client(False, "httpx2"), "h1"))
    return found


# The HTTP/2 server: hypercorn in a spawned process, answering like the test server.


def _asgi_app(latency: float):
    handler = _Handler(BENCH_KEY, latency, record=False)

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        loop = asyncio.get_running_loop()
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        arrived = loop.time()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        request = RecordedRequest(
            scope["method"], scope["path"], headers, json.loads(b"".join(chunks))
        )
        status, data = handler._answer(request)
        await asyncio.sleep(max(0.0, arrived + latency - loop.time()))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(data)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})

    return app


def _serve_hypercorn(conn, latency: float) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.backlog = 1024
    config.keep_alive_max_requests = 10**9  # 1,000 by default: an HTTP/2 GOAWAY mid-run
    config.accesslog = None
    config.errorlog = None
    conn.send(sock.getsockname()[1])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_reader(conn.fileno(), stop.set)  # the parent said stop, or went away
        await serve(_asgi_app(latency), config, shutdown_trigger=stop.wait)

    asyncio.run(main())


class HypercornProcess:
    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> HypercornProcess:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve_hypercorn, args=(child, self.latency))
        self._process.daemon = True
        self._process.start()
        if not self._conn.poll(30):
            self._process.kill()
            raise RuntimeError("hypercorn did not start within 30 s")
        self.port = self._conn.recv()
        deadline = time.monotonic() + 10
        while True:  # the port is bound before hypercorn listens on it
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


# Measuring.


@dataclass
class Run:
    rate: float
    cpu_us: float
    sent: int
    errors: dict[str, int]


async def _drive(client: Client, url: str, in_flight: int, n: int, budget: float) -> tuple:
    """Send ``n`` requests, ``in_flight`` at a time, taking no new one after ``budget``
    seconds: (requests/s, requests sent, failures by type). A failed request is counted
    and not sent again (none of these clients retry)."""
    call, close = await client.make(url, in_flight)
    queue = iter(range(n))
    errors: dict[str, int] = {}
    sent = 0
    deadline = time.perf_counter() + budget

    async def lane() -> None:
        nonlocal sent
        for i in queue:
            sent += 1
            try:
                await call(i)
            except Exception as exc:
                name = type(exc).__name__
                errors[name] = errors.get(name, 0) + 1
            if time.perf_counter() > deadline:
                return

    try:
        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(in_flight)))
        return sent / (time.perf_counter() - started), sent, errors
    finally:
        await close()


def measure(client: Client, url: str, in_flight: int, n: int, budget: float) -> Run:
    cpu = time.process_time()
    rate, sent, errors = asyncio.run(_drive(client, url, in_flight, n, budget))
    return Run(rate, (time.process_time() - cpu) / sent * 1e6, sent, errors)


def request_count(latency: float, in_flight: int, rounds: int) -> int:
    return in_flight * max(rounds, math.ceil(MIN_IDEAL_SECONDS / latency))


def run_case(
    latency: float, in_flight: int, args: argparse.Namespace, urls: dict[str, str]
) -> dict[str, list[Run]]:
    n, repeats = request_count(latency, in_flight, args.rounds), args.repeats
    chosen = clients()
    runs: dict[str, list[Run]] = {c.name: [] for c in chosen}
    for repeat in range(repeats):
        shift = repeat % len(chosen)
        for client in chosen[shift:] + chosen[:shift]:
            run = measure(client, urls[client.server], in_flight, n, args.budget)
            runs[client.name].append(run)
    return runs


def _failures(runs: list[Run]) -> str:
    total: dict[str, int] = {}
    for run in runs:
        for name, count in run.errors.items():
            total[name] = total.get(name, 0) + count
    return ", ".join(f"{count} {name}" for name, count in sorted(total.items()))


def print_case(latency: float, in_flight: int, n: int, runs: dict[str, list[Run]]) -> dict:
    ideal = in_flight / latency
    print(
        f"\n{latency * 1000:.0f} ms latency, {in_flight} in flight, {n} requests: "
        f"ideal {ideal:,.0f} req/s"
    )
    print(
        f"{'client':<32} {'req/s':>8} {'of ideal':>9} {'CPU us/req':>11} {'/ httpx h1':>11}  runs"
    )
    medians = {name: statistics.median(r.rate for r in rs) for name, rs in runs.items()}
    base = medians.get(HTTPX_H1)
    for name, rs in runs.items():
        rate = medians[name]
        cpu = statistics.median(r.cpu_us for r in rs)
        vs = f"{rate / base:10.2f}x" if base else "        n/a"
        every = ", ".join(f"{r.rate:,.0f}" for r in rs)
        failed = _failures(rs)
        failed = f"  FAILED: {failed}" if failed else ""
        short = min(r.sent for r in rs)
        failed += f"  cut short: {short} of {n} sent" if short < n else ""
        print(f"{name:<32} {rate:8,.0f} {rate / ideal:9.1%} {cpu:11.0f} {vs}  ({every}){failed}")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latencies", type=float, nargs="*", default=[0.5, 2.0])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[64, 256, 512])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4, help="requests per case / in flight")
    parser.add_argument(
        "--budget",
        type=float,
        default=40.0,
        help="seconds after which a run sends no new request (slow clients are cut short)",
    )
    parser.add_argument("--no-reference", action="store_true", help="skip 20 ms / 64 in flight")
    add_json_option(parser)
    args = parser.parse_args()
    os.environ["OPENAI_API_KEY"] = BENCH_KEY
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")

    cases = [] if args.no_reference else [(0.020, 64)]
    cases += [(latency, k) for latency in args.latencies for k in args.in_flight]
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
        f"clients: {', '.join(c.name for c in clients())}"
    )
    optional = (("h2/hypercorn", HAVE_H2), ("aiohttp", HAVE_AIOHTTP), ("httpx2", HAVE_HTTPX2))
    missing = [name for name, ok in optional if not ok]
    if missing:
        print(f"skipped (not installed): {', '.join(missing)}")
    if not HAVE_HTTP1:
        print(f"{HTTP1_MODULE} is gone: the refiner Transport row is the transport in use")

    results: list[Result] = []
    verdicts: list[tuple[float, int, float, float]] = []
    for latency, in_flight in cases:
        n = request_count(latency, in_flight, args.rounds)
        with ProviderServerProcess(api_key=BENCH_KEY, service_time=latency) as h1:
            urls = {"h1": h1.base_url}
            if HAVE_H2:
                with HypercornProcess(latency) as h2:
                    urls["h2"] = h2.base_url
                    runs = run_case(latency, in_flight, args, urls)
            else:
                runs = run_case(latency, in_flight, args, urls)
        medians = print_case(latency, in_flight, n, runs)
        ideal = in_flight / latency
        base = medians.get(HTTPX_H1)
        best_httpx = max(rate for name, rate in medians.items() if name.startswith("httpx "))
        ours = medians[OURS]
        if latency >= 0.5:
            verdicts.append((latency, in_flight, ours / base, ours / best_httpx))
        for name, rate in medians.items():
            cpu = statistics.median(r.cpu_us for r in runs[name])
            results.append(
                Result(
                    workload="inference_transport",
                    case=f"{name}, {latency * 1000:.0f} ms, {in_flight} in flight",
                    refiner_s=n / rate,
                    baseline=HTTPX_H1,
                    baseline_s=n / base if base else None,
                    target="delete http1.py unless > 1.5x httpx at 0.5 s and 2 s",
                    met=rate / best_httpx > 1.5 if name == OURS and latency >= 0.5 else None,
                    repeats=args.repeats,
                    ratio=rate / base if base else None,
                    ratio_kind="speedup",
                    extra={
                        "requests": n,
                        "requests_per_s": round(rate, 1),
                        "fraction_of_ideal": round(rate / ideal, 4),
                        "client_cpu_us_per_request": round(cpu, 1),
                        "failed_requests": sum(sum(r.errors.values()) for r in runs[name]),
                        "vs_best_httpx": round(rate / best_httpx, 3),
                    },
                )
            )
    if verdicts:
        print(f"\n{OURS} against httpx (rule: keep http1.py only while > 1.5x at 0.5 s and 2 s):")
        for latency, in_flight, vs_h1, vs_best in verdicts:
            print(
                f"  {latency:g} s, {in_flight:3d} in flight: {vs_h1:6.2f}x httpx HTTP/1.1, "
                f"{vs_best:6.2f}x the faster httpx row{'' if vs_best > 1.5 else '  (not > 1.5x)'}"
            )
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    write_results(args.json, results)


if __name__ == "__main__":
    main()
