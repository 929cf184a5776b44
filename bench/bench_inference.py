"""Benchmark: generate_text throughput against a loopback fake provider.

Two cases, each with ``max_concurrent_requests`` and the rows in flight equal (as
``map_async(max_in_flight=...)`` would keep):

- 2,000 requests, 20 ms service time, 64 in flight: the ideal is 64 / 0.020 s =
  3,200 requests/s (the target applies here);
- realistic: 1,024 requests, 0.5 s provider latency, 256 in flight: the ideal is
  256 / 0.5 s = 512 requests/s.

The script prints each run and the median of ``--runs`` as a fraction of the ideal. The headline drives the
``generate_text`` callback directly on one event loop after freezing the startup heap
out of garbage collection, as a ``launch_local`` worker does; a second line runs the
whole product path (``from_items(...).map_async(generate_text, max_in_flight=64)``
written to JSONL by ``launch_local`` with one worker, fork and finalization included).

For scale it also measures the harness ceiling: the same server driven by a minimal
raw-socket HTTP/1.1 client (no JSON building, no retries, no httpx), which shows how
much of the ideal this machine's event loop and server can deliver at all.

    python bench/bench_inference.py [--requests 2000] [--runs 3] [--stock-httpx]
        [--no-realistic] [--json PATH]

``--stock-httpx`` adds a run of a plain ``httpx.AsyncClient`` with one pool of as many
connections as requests in flight, the configuration the inference transport avoids.
``--json PATH`` writes one record per case and line (workload ``generate_text``,
``ratio_kind`` ``fraction``: requests/s over the ideal).
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
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.inference import OpenAIResponsesProvider, generate_text  # noqa: E402
from tests.core.inference.provider_server import ProviderServerProcess  # noqa: E402

BENCH_KEY = "sk-bench-not-a-real-key"
TARGET = 0.90
REALISTIC = (0.5, 256, 1024)  # service time, in flight, requests


async def annotate(row, generate):
    response = await generate(f"episode {row['episode']}", max_output_tokens=16)
    return {"summary": response.text}


async def _window(call, n: int, concurrency: int) -> float:
    """Run ``call(i)`` for i < n with ``concurrency`` calls in flight; return requests/s."""
    queue = iter(range(n))

    async def lane() -> None:
        for i in queue:
            await call(i)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return n / (time.perf_counter() - started)


async def run_generate_text(base_url: str, n: int, concurrency: int) -> float:
    callback = generate_text(
        fn=annotate,
        provider=OpenAIResponsesProvider(model="gpt-4.1", base_url=base_url),
        max_concurrent_requests=concurrency,
    )
    try:
        rate = await _window(lambda i: callback({"episode": i}), n, concurrency)
    finally:
        await callback.aclose()
    assert callback.usage["requests_ok"] == n, callback.usage
    return rate


def run_launch_local(base_url: str, n: int, concurrency: int) -> float:
    """The product path end to end; requests/s over the whole launch."""
    callback = generate_text(
        fn=annotate,
        provider=OpenAIResponsesProvider(model="gpt-4.1", base_url=base_url),
        max_concurrent_requests=concurrency,
    )
    with tempfile.TemporaryDirectory() as tmp:
        pipeline = mdr.from_items([{"episode": i} for i in range(n)], items_per_shard=n).map_async(
            callback, max_in_flight=concurrency
        )
        started = time.perf_counter()
        stats = pipeline.write_jsonl(tmp).launch_local(num_workers=1)
        elapsed = time.perf_counter() - started
    assert stats.summary.counters["rows_written"] == n, stats.summary
    return n / elapsed


async def run_raw_client(port: int, n: int, concurrency: int) -> float:
    """A minimal keep-alive HTTP/1.1 client: the harness ceiling."""
    pool: asyncio.Queue = asyncio.Queue()
    for _ in range(concurrency):
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
        return await _window(call, n, concurrency)
    finally:
        while not pool.empty():
            pool.get_nowait()[1].close()


async def run_stock_httpx(base_url: str, n: int, concurrency: int) -> float:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"authorization": f"Bearer {BENCH_KEY}"}
    async with httpx.AsyncClient(limits=limits, headers=headers) as client:

        async def call(i: int) -> None:
            response = await client.post(
                f"{base_url}/responses", json={"model": "gpt-4.1", "input": f"episode {i}"}
            )
            response.raise_for_status()
            response.json()

        return await _window(call, n, concurrency)


def timed(coro_fn, n: int) -> tuple[float, float]:
    """Run one benchmark in a fresh event loop: (requests/s, client CPU us per request)."""
    cpu = time.process_time()
    rate = asyncio.run(coro_fn())
    return rate, (time.process_time() - cpu) / n * 1e6


def report(name: str, results: list[tuple[float, float]], ideal: float) -> float:
    rates = [rate for rate, _ in results]
    median = statistics.median(rates)
    cpu = statistics.median(c for _, c in results)
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    cpu_text = "" if math.isnan(cpu) else f"; client CPU {cpu:5.0f} us/request"
    print(
        f"{name:<36} median {median:6,.0f} req/s = {median / ideal:6.1%} of ideal"
        f"{cpu_text} (runs: {runs})"
    )
    return median


def run_case(
    service_time: float, concurrency: int, n: int, runs: int, stock_httpx: bool
) -> list[Result]:
    ideal = concurrency / service_time
    label = f"{n:,} x {service_time * 1000:.0f} ms, {concurrency} in flight"
    print(f"\n{label}; ideal {ideal:,.0f} req/s")
    ours, ceiling, launched = [], [], []
    with ProviderServerProcess(api_key=BENCH_KEY, service_time=service_time) as server:
        url = server.base_url
        for _ in range(runs):  # interleaved, so drifting load hits every variant
            ours.append(timed(lambda: run_generate_text(url, n, concurrency), n))
            ceiling.append(timed(lambda: run_raw_client(server.port, n, concurrency), n))
            launched.append((run_launch_local(url, n, concurrency), float("nan")))
        stock = []
        if stock_httpx:
            stock = [timed(lambda: run_stock_httpx(url, n, concurrency), n)]
    median = report("generate_text (refiner transport)", ours, ideal)
    top = report("harness ceiling (raw socket client)", ceiling, ideal)
    end_to_end = report("launch_local end to end, 1 worker", launched, ideal)
    if stock:
        report("stock httpx.AsyncClient, one pool", stock, ideal)
    print(f"generate_text reaches {median / top:.1%} of the harness ceiling")
    cpu = statistics.median(c for _, c in ours)
    common = {"repeats": runs, "ratio_kind": "fraction"}
    return [
        Result(
            workload="generate_text",
            case=f"generate_text, {label}",
            refiner_s=n / median,
            baseline=f"ideal {concurrency} / {service_time:g} s",
            baseline_s=n / ideal,
            target=f">= {TARGET:.0%} of ideal",
            met=median / ideal >= TARGET,
            ratio=median / ideal,
            extra={
                "requests_per_s": round(median, 1),
                "client_cpu_us_per_request": round(cpu, 1),
                "fraction_of_harness_ceiling": round(median / top, 4),
            },
            **common,
        ),
        Result(
            workload="generate_text",
            case=f"launch_local end to end, {label}",
            refiner_s=n / end_to_end,
            baseline=f"ideal {concurrency} / {service_time:g} s",
            baseline_s=n / ideal,
            target="context",
            met=None,
            ratio=end_to_end / ideal,
            extra={"requests_per_s": round(end_to_end, 1)},
            **common,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stock-httpx", action="store_true")
    parser.add_argument(
        "--no-realistic", action="store_true", help="skip the 0.5 s / 256 in flight case"
    )
    add_json_option(parser)
    args = parser.parse_args()
    os.environ["OPENAI_API_KEY"] = BENCH_KEY
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")

    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    gc.freeze()  # as launch_local's workers do with the heap they inherit
    results = run_case(0.020, 64, args.requests, args.runs, args.stock_httpx)
    if not args.no_realistic:
        service_time, concurrency, n = REALISTIC
        results += run_case(service_time, concurrency, n, args.runs, args.stock_httpx)
    print(f"\nload average while running: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for result in results[::2]:
        print(f"{result.case}: {result.ratio:.1%} of ideal")
    print(f"RESULT throughput_fraction_of_ideal={results[0].ratio:.3f} target={TARGET:.2f}")
    write_results(args.json, results)


if __name__ == "__main__":
    main()
