"""Benchmark: do extra workers help on a machine that other work keeps busy?

Starts ``--burners`` busy-loop processes of its own (2 by default) and keeps them
running for the whole measurement, then packs ``--files`` files of ``--file-kib`` KiB
(16,000 x 64 KiB = 1 GiB by default) with ``BlobAssetConfig`` and
``launch_local(num_workers=...)`` at 1 worker, at 2 workers and at the default count
``refiner_core.cpus.usable_cpus()`` (what the Dagster IO managers use when
``num_workers`` is unset), interleaved, and prints each median and their ratios::

    .venv/bin/python bench/bench_busy_workers.py --repeat 3 [--json results.json]

The default count is decided right before each of its runs, from the one-minute load
average at that moment, which includes the burners only as far as the average has
caught up with them: ``--warm-s`` (30 s by default) lets them run that long before the
first timed run, and every run prints the count it chose and the load it saw. The other
engineers' work on a shared machine adds to the burners'; the load average at the start
and the end is printed. No target: the ratios say whether the rule's choice was the
faster one here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import refiner_core as mdr  # noqa: E402
from bench.bench_assets import KIB, MIB, drop, make_files, paths_table, quiet, sync  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.cpus import available_cpus, usable_cpus  # noqa: E402

BURN = "while True:\n    pass\n"


def start_burners(count: int) -> list[subprocess.Popen]:
    """``count`` processes that each keep one CPU busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]


def stop_burners(burners: list[subprocess.Popen]) -> None:
    for process in burners:
        process.kill()
    for process in burners:
        process.wait(timeout=30)


def pack_seconds(table: str, output: Path, workers: int) -> float:
    """Wall seconds of one pack of every row of ``table`` into ``output`` (then removed)."""
    pipeline = mdr.read_parquet(table, dtypes={"video": mdr.datatype.video_path()})
    write = pipeline.write_parquet(str(output), assets=mdr.BlobAssetConfig())
    started = time.perf_counter()
    quiet(lambda: write.launch_local(num_workers=workers))()  # without the progress lines
    seconds = time.perf_counter() - started
    sync()
    drop(output)
    return seconds


def measure(table: str, work: Path, repeat: int) -> tuple[dict[str, list[float]], list[int]]:
    """Interleaved runs of the three cases; the default's chosen counts alongside."""
    runs: dict[str, list[float]] = {"1 worker": [], "2 workers": [], "default": []}
    chosen: list[int] = []
    output = work / "out"
    pack_seconds(table, output, 1)  # untimed warm-up: page cache, imports
    for run in range(repeat):
        order = list(runs) if run % 2 == 0 else list(reversed(runs))
        for case in order:
            if case == "default":
                load = os.getloadavg()[0]
                workers = usable_cpus()
                chosen.append(workers)
                note = f"(chose {workers} at load {load:.2f})"
            else:
                workers = int(case.split()[0])
                note = ""
            seconds = pack_seconds(table, output, workers)
            runs[case].append(seconds)
            print(f"run {run + 1} {case:10s} {seconds:7.2f} s  {note}", flush=True)
    return runs, chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=16_000, help="files to pack")
    parser.add_argument("--file-kib", type=int, default=64, help="size of each file")
    parser.add_argument("--burners", type=int, default=2, help="busy-loop processes to start")
    parser.add_argument("--warm-s", type=float, default=30.0, help="burn before timing")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; medians")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary data")
    add_json_option(parser)
    args = parser.parse_args(argv)

    print(
        f"{os.cpu_count()} CPUs ({available_cpus()} for this process), load average "
        f"{os.getloadavg()[0]:.2f} before the burners"
    )
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="refiner-busy-") as tmp:
        work = Path(tmp)
        paths = make_files(work / "media", args.files, args.file_kib * KIB)
        table = paths_table(paths, work / "index.parquet")
        burners = start_burners(args.burners)
        try:
            time.sleep(args.warm_s)
            print(
                f"{args.burners} burners running for {args.warm_s:g} s, load average "
                f"{os.getloadavg()[0]:.2f}",
                flush=True,
            )
            runs, chosen = measure(table, work, args.repeat)
        finally:
            stop_burners(burners)
    end_load = os.getloadavg()[0]
    median = {case: statistics.median(times) for case, times in runs.items()}
    nbytes = args.files * args.file_kib * KIB
    print(f"\n{args.files} x {args.file_kib} KiB, {args.burners} burners, median of {args.repeat}")
    for case, seconds in median.items():
        each = ", ".join(f"{t:.2f}" for t in runs[case])
        print(f"  {case:10s} {seconds:7.2f} s  {nbytes / seconds / MIB:7.0f} MiB/s  ({each})")
    one, two, default = median["1 worker"], median["2 workers"], median["default"]
    print(f"  2 workers / 1 worker time  {two / one:5.2f}x")
    print(f"  default / 1 worker time    {default / one:5.2f}x")
    print(f"  default / 2 workers time   {default / two:5.2f}x")
    print(f"  default chose {chosen}; load average at the end {end_load:.2f}")
    extra = {
        "files": args.files,
        "file_kib": args.file_kib,
        "burners": args.burners,
        "default_workers": ",".join(map(str, chosen)),
    }
    write_results(
        args.json,
        [
            Result(
                workload="busy_workers",
                case=f"pack with {args.burners} busy loops, {name}",
                refiner_s=median[case],
                baseline="1 worker",
                baseline_s=one,
                target="reported",
                met=None,
                repeats=args.repeat,
                extra=extra,
            )
            for name, case in (("2 workers", "2 workers"), ("default count", "default"))
        ],
    )


if __name__ == "__main__":
    main()
