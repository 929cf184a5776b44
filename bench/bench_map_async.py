"""Benchmark: ``map_async`` against plain asyncio.

Two measurements, each the median of ``--repeat`` runs, engine and baseline
interleaved in the same process so both see the same machine load::

    python bench/bench_map_async.py --repeat 5

1. Latency-bound: ``--rows`` rows (2,000) whose callback sleeps 10 ms, 32 in flight,
   run with ``iter_rows`` in this process, against ``asyncio.gather`` over the same
   coroutines bounded by an ``asyncio.Semaphore(32)``. Target: ratio <= 1.1.
2. Per-row overhead: ``--noop-rows`` rows (200,000) through a no-op async callback,
   16 in flight. Reported per row, as wall time and as CPU time of this process (the
   CPU time is what a busy machine does not inflate), for the engine driven two ways:
   ``iter_rows`` (one hand-off between the caller's thread and the worker loop per
   block) and a worker run (the whole shard on the worker loop, as a ``launch_local``
   worker runs it, without process start or sink); each with the source alone and with
   ``map_async``. Baselines: a plain loop that awaits the callback row after row, and
   a plain loop that makes one asyncio task per row, 16 at a time (what any
   bounded-concurrency runner pays). Target: source + ``map_async`` <= 15 us per row.
3. Batches: ``--batch-rows`` rows (20,000) through ``batch_map_async`` with an async
   batch callback sleeping 20 ms, batches of 64, 4 in flight, against the ideal
   ``ceil(rows / 64) / 4 x 20 ms`` (reported as refiner / ideal).

With ``--peer`` (the default when ``bench/peer/.venv`` exists) part 1 also runs the
public ``macrodata-refiner`` library's ``map_async`` on the same rows in every repeat
(target: refiner >= 1.2x faster). ``--json PATH`` writes the results as records.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refiner_core as mdr  # noqa: E402
from bench.peer.runner import Peer, add_peer_option, peer_from  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.execution.stages import ShardedStage  # noqa: E402

SLEEP_S = 0.010
IN_FLIGHT = 32
NOOP_IN_FLIGHT = 16
BATCH_SLEEP_S = 0.020
BATCH_SIZE = 64
BATCH_IN_FLIGHT = 4


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds and CPU seconds of this process (all threads) spent in ``fn``; when
    ``fn`` times itself (returns a float: the peer, in its own process) its own time."""
    started, cpu = time.perf_counter(), time.process_time()
    own = fn()
    wall, used = time.perf_counter() - started, time.process_time() - cpu
    return (own, float("nan")) if isinstance(own, float) else (wall, used)


# 1. latency-bound ---------------------------------------------------------------------


async def sleepy(row):
    await asyncio.sleep(SLEEP_S)
    return {"done": True}


def engine_sleepy(rows: int) -> None:
    pipeline = mdr.from_items(range(rows), items_per_shard=rows)
    out = pipeline.map_async(sleepy, max_in_flight=IN_FLIGHT, preserve_order=True).materialize()
    assert len(out) == rows


def baseline_sleepy(rows: int) -> None:
    async def main() -> list:
        semaphore = asyncio.Semaphore(IN_FLIGHT)

        async def bounded(item: dict) -> dict:
            async with semaphore:
                return {**item, **(await sleepy(item))}

        return await asyncio.gather(*(bounded({"item": i}) for i in range(rows)))

    assert len(asyncio.run(main())) == rows


# 3. batches ---------------------------------------------------------------------------


async def sleepy_batch(rows):
    await asyncio.sleep(BATCH_SLEEP_S)
    return [row.update(done=True) for row in rows]


def engine_batches(rows: int) -> None:
    pipeline = mdr.from_items(range(rows), items_per_shard=rows)
    out = pipeline.batch_map_async(
        sleepy_batch, batch_size=BATCH_SIZE, max_in_flight=BATCH_IN_FLIGHT
    ).materialize()
    assert len(out) == rows


def baseline_batches(rows: int) -> None:
    """The same batches through plain asyncio: a semaphore of ``BATCH_IN_FLIGHT``."""

    async def main() -> list:
        semaphore = asyncio.Semaphore(BATCH_IN_FLIGHT)
        items = [{"item": i} for i in range(rows)]

        async def bounded(batch: list[dict]) -> list[dict]:
            async with semaphore:
                await asyncio.sleep(BATCH_SLEEP_S)
                return [{**item, "done": True} for item in batch]

        chunks = (items[i : i + BATCH_SIZE] for i in range(0, rows, BATCH_SIZE))
        return await asyncio.gather(*(bounded(chunk) for chunk in chunks))

    assert sum(len(batch) for batch in asyncio.run(main())) == rows


# 2. per-row overhead --------------------------------------------------------------------


async def noop(row):
    return row


def engine_noop(rows: int) -> None:
    pipeline = mdr.from_items(range(rows), items_per_shard=rows)
    assert len(pipeline.map_async(noop, max_in_flight=NOOP_IN_FLIGHT).materialize()) == rows


def engine_source_only(rows: int) -> None:
    assert len(mdr.from_items(range(rows), items_per_shard=rows).materialize()) == rows


def in_worker(pipeline: mdr.Pipeline, rows: int) -> None:
    """Run the shard the way a ``launch_local`` worker does: on its worker loop, rows
    discarded at the end of the stream (no process start, no sink)."""
    stage = ShardedStage(pipeline)
    manifests = stage.run_task(stage.plan("bench"), run_id="bench")
    assert sum(m.counters["rows_written"] for m in manifests) == rows


def worker_noop(rows: int) -> None:
    pipeline = mdr.from_items(range(rows), items_per_shard=rows)
    in_worker(pipeline.map_async(noop, max_in_flight=NOOP_IN_FLIGHT), rows)


def worker_source_only(rows: int) -> None:
    in_worker(mdr.from_items(range(rows), items_per_shard=rows), rows)


def plain_loop(rows: int) -> None:
    async def main() -> list:
        return [await noop({"item": i}) for i in range(rows)]

    assert len(asyncio.run(main())) == rows


def plain_tasks(rows: int) -> None:
    async def main() -> list:
        out: list = []
        window: list = []
        for i in range(rows):
            window.append(asyncio.ensure_future(noop({"item": i})))
            if len(window) >= NOOP_IN_FLIGHT:
                out.extend(await asyncio.gather(*window))
                window = []
        out.extend(await asyncio.gather(*window))
        return out

    assert len(asyncio.run(main())) == rows


def median_times(
    cases: dict[str, Callable[[], None]], repeat: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and CPU seconds per case, the cases interleaved in every repeat."""
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            w, c = timed(fn)
            wall[name].append(w)
            cpu[name].append(c)
    return (
        {name: statistics.median(v) for name, v in wall.items()},
        {name: statistics.median(v) for name, v in cpu.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--noop-rows", type=int, default=200_000)
    parser.add_argument("--batch-rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    add_peer_option(parser)
    add_json_option(parser)
    args = parser.parse_args()
    peer = peer_from(args, parser)
    try:
        results = run(args, peer)
    finally:
        if peer is not None:
            peer.close()
    write_results(args.json, results)


def run(args: argparse.Namespace, peer: Peer | None) -> list[Result]:
    rows, noop_rows = args.rows, args.noop_rows
    results: list[Result] = []

    engine_sleepy(100)  # warm up imports and the first worker loop
    cases = {"engine": lambda: engine_sleepy(rows), "baseline": lambda: baseline_sleepy(rows)}
    if peer is not None:
        peer_args = ["--rows", str(rows), "--sleep-ms", str(SLEEP_S * 1000)]
        peer_args += ["--in-flight", str(IN_FLIGHT)]
        cases["peer"] = lambda: peer.run("map_async", *peer_args)
    latency, _ = median_times(cases, args.repeat)
    ideal = rows / IN_FLIGHT * SLEEP_S
    ratio = latency["engine"] / latency["baseline"]
    print(f"1. map_async, {rows} rows sleeping {SLEEP_S * 1000:.0f} ms, {IN_FLIGHT} in flight")
    print(f"   ideal (rows / in-flight x sleep)   {ideal:8.3f} s")
    print(f"   asyncio + Semaphore (baseline)     {latency['baseline']:8.3f} s")
    print(f"   refiner map_async (iter_rows)      {latency['engine']:8.3f} s")
    print(f"   ratio engine / baseline            {ratio:8.3f}   (target <= 1.1)")
    peer_fields: dict = {}
    if peer is not None:
        speedup = latency["peer"] / latency["engine"]
        print(f"   {peer.label + ' map_async':35}{latency['peer']:8.3f} s")
        print(f"   peer / refiner                     {speedup:8.3f}   (target >= 1.2)")
        peer_fields = {
            "peer": peer.label,
            "peer_s": latency["peer"],
            "peer_target": ">= 1.2x faster",
            "peer_met": speedup >= 1.2,
        }
    results.append(
        Result(
            workload="map_async",
            case=f"{rows:,} x {SLEEP_S * 1000:.0f} ms, {IN_FLIGHT} in flight",
            refiner_s=latency["engine"],
            baseline=f"asyncio + Semaphore({IN_FLIGHT})",
            baseline_s=latency["baseline"],
            target="<= 1.1x",
            met=ratio <= 1.1,
            repeats=args.repeat,
            extra={"ideal_s": ideal},
            **peer_fields,
        )
    )

    results += overhead(noop_rows, args.repeat)
    results += batched(args.batch_rows, args.repeat)
    return results


def batched(batch_rows: int, repeat: int) -> list[Result]:
    batches, _ = median_times(
        {
            "engine": lambda: engine_batches(batch_rows),
            "baseline": lambda: baseline_batches(batch_rows),
        },
        repeat,
    )
    ideal = math.ceil(batch_rows / BATCH_SIZE) / BATCH_IN_FLIGHT * BATCH_SLEEP_S
    ratio = batches["engine"] / batches["baseline"]
    print(
        f"3. batch_map_async, {batch_rows} rows, batches of {BATCH_SIZE} sleeping "
        f"{BATCH_SLEEP_S * 1000:.0f} ms, {BATCH_IN_FLIGHT} in flight"
    )
    print(f"   ideal (ceil(rows / batch) / in-flight x sleep) {ideal:8.3f} s")
    print(f"   asyncio + Semaphore (baseline)                 {batches['baseline']:8.3f} s")
    print(f"   refiner batch_map_async (iter_rows)            {batches['engine']:8.3f} s")
    print(f"   ratio engine / baseline                        {ratio:8.3f}   (target <= 1.05)")
    return [
        Result(
            workload="batch_map_async",
            case=f"{batch_rows:,} rows, batch {BATCH_SIZE} x {BATCH_SLEEP_S * 1000:.0f} ms, "
            f"{BATCH_IN_FLIGHT} in flight",
            refiner_s=batches["engine"],
            baseline=f"asyncio + Semaphore({BATCH_IN_FLIGHT})",
            baseline_s=batches["baseline"],
            target="<= 1.05x",
            met=ratio <= 1.05,
            repeats=repeat,
            extra={"ideal_s": ideal},
        )
    ]


def overhead(noop_rows: int, repeat: int) -> list[Result]:
    wall, cpu = median_times(
        {
            "engine": lambda: engine_noop(noop_rows),
            "source": lambda: engine_source_only(noop_rows),
            "worker": lambda: worker_noop(noop_rows),
            "worker_source": lambda: worker_source_only(noop_rows),
            "loop": lambda: plain_loop(noop_rows),
            "tasks": lambda: plain_tasks(noop_rows),
        },
        repeat,
    )
    us = {name: seconds / noop_rows * 1e6 for name, seconds in wall.items()}
    cpu_us = {name: seconds / noop_rows * 1e6 for name, seconds in cpu.items()}
    print(f"2. no-op map_async over {noop_rows} rows, {NOOP_IN_FLIGHT} in flight (us per row)")
    print(f"   {'':34}{'wall':>8}{'cpu':>8}")
    lines = [
        ("plain loop awaiting each row", "loop"),
        ("plain loop, one task per row", "tasks"),
        ("refiner iter_rows: source only", "source"),
        ("refiner iter_rows: + map_async", "engine"),
        ("refiner worker run: source only", "worker_source"),
        ("refiner worker run: + map_async", "worker"),
    ]
    for label, name in lines:
        print(f"   {label:34}{us[name]:8.2f}{cpu_us[name]:8.2f}")
    for label, total, base in [
        ("map_async step alone, iter_rows", "engine", "source"),
        ("map_async step alone, worker run", "worker", "worker_source"),
    ]:
        print(f"   {label:34}{us[total] - us[base]:8.2f}{cpu_us[total] - cpu_us[base]:8.2f}")
    print("   target: refiner source + map_async <= 15 us per row")
    print(f"   {'ratios (wall)':34}{'/ loop':>8}{'/ tasks':>8}")
    for label, name in [("iter_rows + map_async", "engine"), ("worker run + map_async", "worker")]:
        print(f"   {label:34}{us[name] / us['loop']:8.2f}{us[name] / us['tasks']:8.2f}")
    return [
        Result(
            workload="map_async",
            case=f"no-op per row ({label}), {noop_rows:,} rows",
            refiner_s=wall[name],
            baseline="plain loop, one task per row",
            baseline_s=wall["tasks"],
            target="<= 15 us/row",
            met=us[name] <= 15,
            repeats=repeat,
            ratio=us[name],
            ratio_kind="value",
            extra={"unit": "us/row", "cpu_us_per_row": round(cpu_us[name], 2)},
        )
        for label, name in [("iter_rows", "engine"), ("worker run", "worker")]
    ]


if __name__ == "__main__":
    main()
