"""Benchmark: generate_text throughput against a loopback fake provider.

2,000 requests, 20 ms service time per request, 64 requests in flight
(``max_concurrent_requests=64`` and 64 rows in flight, as ``map_async(max_in_flight=64)``
would keep). The ideal is 64 / 0.020 s = 3,200 requests/s; the script prints each
run and the median of 3 as a fraction of that ideal. The headline drives the
``generate_text`` callback directly on one event loop after freezing the startup heap
out of garbage collection, as a ``launch_local`` worker does; a second line runs the
whole product path (``from_items(...).map_async(generate_text, max_in_flight=64)``
written to JSONL by ``launch_local`` with one worker, fork and finalization included).

For scale it also measures the harness ceiling: the same server driven by a minimal
raw-socket HTTP/1.1 client (no JSON building, no retries, no httpx), which shows how
much of the ideal this machine's event loop and server can deliver at all.

    python bench/bench_inference.py [--requests 2000] [--runs 3] [--stock-httpx]

``--stock-httpx`` adds a run of a plain ``httpx.AsyncClient`` with one 64-connection
pool, the configuration the inference transport avoids.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

import refiner_core as mdr  # noqa: E402
from refiner_core.inference import OpenAIResponsesProvider, generate_text  # noqa: E402
from tests.core.inference.provider_server import ProviderServerProcess  # noqa: E402

SERVICE_TIME = 0.020
CONCURRENCY = 64
IDEAL = CONCURRENCY / SERVICE_TIME
BENCH_KEY = "sk-bench-not-a-real-key"


async def annotate(row, generate):
    response = await generate(f"episode {row['episode']}", max_output_tokens=16)
    return {"summary": response.text}


async def _window(call, n: int) -> float:
    """Run ``call(i)`` for i < n with CONCURRENCY calls in flight; return requests/s."""
    queue = iter(range(n))

    async def lane() -> None:
        for i in queue:
            await call(i)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(CONCURRENCY)))
    return n / (time.perf_counter() - started)


async def run_generate_text(base_url: str, n: int) -> float:
    callback = generate_text(
        fn=annotate,
        provider=OpenAIResponsesProvider(model="gpt-4.1", base_url=base_url),
        max_concurrent_requests=CONCURRENCY,
    )
    try:
        rate = await _window(lambda i: callback({"episode": i}), n)
    finally:
        await callback.aclose()
    assert callback.usage["requests_ok"] == n, callback.usage
    return rate


def run_launch_local(base_url: str, n: int) -> float:
    """The product path end to end; requests/s over the whole launch."""
    callback = generate_text(
        fn=annotate,
        provider=OpenAIResponsesProvider(model="gpt-4.1", base_url=base_url),
        max_concurrent_requests=CONCURRENCY,
    )
    with tempfile.TemporaryDirectory() as tmp:
        pipeline = mdr.from_items([{"episode": i} for i in range(n)], items_per_shard=n).map_async(
            callback, max_in_flight=CONCURRENCY
        )
        started = time.perf_counter()
        stats = pipeline.write_jsonl(tmp).launch_local(num_workers=1)
        elapsed = time.perf_counter() - started
    assert stats.summary["rows_written"] == n, stats.summary
    return n / elapsed


async def run_raw_client(port: int, n: int) -> float:
    """A minimal keep-alive HTTP/1.1 client: the harness ceiling."""
    pool: asyncio.Queue = asyncio.Queue()
    for _ in range(CONCURRENCY):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    head = (
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"authorization: Bearer {BENCH_KEY}\r\ncontent-type: application/json\r\n"
    )

    async def call(i: int) -> None:
        reader, writer = await pool.get()
        body = json.dumps({"model": "gpt-4.1", "input": f"episode {i}"}).encode()
        writer.write(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
        headers = await reader.readuntil(b"\r\n\r\n")
        length = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        json.loads(await reader.readexactly(length))
        pool.put_nowait((reader, writer))

    try:
        return await _window(call, n)
    finally:
        while not pool.empty():
            pool.get_nowait()[1].close()


async def run_stock_httpx(base_url: str, n: int) -> float:
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    headers = {"authorization": f"Bearer {BENCH_KEY}"}
    async with httpx.AsyncClient(limits=limits, headers=headers) as client:

        async def call(i: int) -> None:
            response = await client.post(
                f"{base_url}/responses", json={"model": "gpt-4.1", "input": f"episode {i}"}
            )
            response.raise_for_status()
            response.json()

        return await _window(call, n)


def timed(coro_fn, n: int) -> tuple[float, float]:
    """Run one benchmark in a fresh event loop: (requests/s, client CPU us per request)."""
    cpu = time.process_time()
    rate = asyncio.run(coro_fn())
    return rate, (time.process_time() - cpu) / n * 1e6


def report(name: str, results: list[tuple[float, float]]) -> float:
    rates = [rate for rate, _ in results]
    median = statistics.median(rates)
    cpu = statistics.median(c for _, c in results)
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    cpu_text = "" if math.isnan(cpu) else f"; client CPU {cpu:5.0f} us/request"
    print(
        f"{name:<36} median {median:6,.0f} req/s = {median / IDEAL:6.1%} of ideal"
        f"{cpu_text} (runs: {runs})"
    )
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stock-httpx", action="store_true")
    args = parser.parse_args()
    os.environ["OPENAI_API_KEY"] = BENCH_KEY
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")

    print(
        f"{args.requests} requests, {SERVICE_TIME * 1000:.0f} ms service time, "
        f"{CONCURRENCY} in flight; ideal {IDEAL:,.0f} req/s; {os.cpu_count()} CPUs"
    )
    gc.freeze()  # as launch_local's workers do with the heap they inherit
    ours, ceiling, launched = [], [], []
    with ProviderServerProcess(api_key=BENCH_KEY, service_time=SERVICE_TIME) as server:
        n, url = args.requests, server.base_url
        for _ in range(args.runs):  # interleaved, so drifting load hits every variant
            ours.append(timed(lambda: run_generate_text(url, n), n))
            ceiling.append(timed(lambda: run_raw_client(server.port, n), n))
            launched.append((run_launch_local(url, n), float("nan")))
        stock = [timed(lambda: run_stock_httpx(url, n), n)] if args.stock_httpx else []
    median = report("generate_text (refiner transport)", ours)
    top = report("harness ceiling (raw socket client)", ceiling)
    report("launch_local end to end, 1 worker", launched)
    if stock:
        report("stock httpx.AsyncClient, one pool", stock)
    print(f"generate_text reaches {median / top:.1%} of the harness ceiling")
    print(f"load average while running: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"RESULT throughput_fraction_of_ideal={median / IDEAL:.3f} target=0.90")


if __name__ == "__main__":
    main()
