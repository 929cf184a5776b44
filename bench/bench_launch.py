"""Benchmark: the fixed cost of ``launch_local`` for a one-shard job.

Runs the same tiny pipeline (one shard of 100 rows, one ``map``) three ways, each the
median of ``--repeat`` runs, interleaved::

    python bench/bench_launch.py --repeat 7
    python bench/bench_launch.py --repeat 7 --start-method fork forkserver spawn

- baseline: ``materialize()`` in this process (no workers, no sink);
- ``launch_local()`` of the pipeline (one stage: a worker process runs the shard);
- ``write_parquet(...).launch_local()`` (two stages: the write and its finalization).

The two launches run once per ``--start-method`` (``fork`` by default; several are
interleaved in one run). Workers started by ``forkserver`` or ``spawn`` are fresh
interpreters that import refiner and receive the stage pickled with cloudpickle.

Reported: wall time from the call to the returned stats, and each stage's own time as
the launcher measured it (the write stage starts workers; finalization runs in process).
Target: <= 0.5 s per stage.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refiner_core as mdr  # noqa: E402

ROWS = 100


def pipeline() -> mdr.Pipeline:
    items = [{"episode": i, "num_frames": 10 * i} for i in range(ROWS)]
    source = mdr.from_items(items, items_per_shard=ROWS)
    return source.map(lambda row: {"long": row.num_frames > 300})


def run_materialize() -> list[float]:
    assert len(pipeline().materialize()) == ROWS
    return []


def run_launch(start_method: str) -> list[float]:
    stats = pipeline().launch_local(start_method=start_method)
    return [stage.elapsed_s for stage in stats.stages]


def run_write(folder: str, start_method: str) -> list[float]:
    out = tempfile.mkdtemp(dir=folder)
    stats = pipeline().write_parquet(out).launch_local(start_method=start_method)
    assert stats.summary.counters["rows_written"] == ROWS
    return [stage.elapsed_s for stage in stats.stages]


def measure(fn) -> tuple[float, list[float]]:
    """Wall time of ``fn()`` and the launcher's own time for each stage it ran."""
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # progress lines
        stages = fn()
    return time.perf_counter() - started, stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--start-method", nargs="+", default=["fork"], choices=["fork", "forkserver", "spawn"]
    )
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="refiner-bench-launch-")
    try:
        cases: dict[str, Callable[[], list[float]]] = {"materialize (baseline)": run_materialize}
        for method in args.start_method:
            cases[f"{method}: launch_local, 1 stage"] = functools.partial(run_launch, method)
            cases[f"{method}: write_parquet + finalize"] = functools.partial(
                run_write, folder, method
            )
        for fn in cases.values():  # warm up imports
            measure(fn)
        totals: dict[str, list[float]] = {name: [] for name in cases}
        per_stage: dict[str, list[list[float]]] = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, fn in cases.items():
                seconds, stages = measure(fn)
                totals[name].append(seconds)
                per_stage[name].append(stages)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    base = statistics.median(totals["materialize (baseline)"])
    print(f"one shard of {ROWS} rows, median of {args.repeat} runs")
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work skews timings)"
    )
    print(f"{'':38}{'total s':>10}{'x baseline':>12}   each stage s (launcher's own timing)")
    worst = 0.0
    for name, values in totals.items():
        total = statistics.median(values)
        stages = [
            statistics.median(run[i] for run in per_stage[name])
            for i in range(len(per_stage[name][0]))
        ]
        worst = max([worst, *stages])
        shown = ", ".join(f"{t:.4f}" for t in stages) or "-"
        print(f"{name:38}{total:10.4f}{total / base:12.1f}   {shown}")
    print(f"slowest stage {worst:.4f} s; target: <= 0.5 s per stage")


if __name__ == "__main__":
    main()
