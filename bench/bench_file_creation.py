"""Benchmark: what creating many files costs on this disk, and what the copy case does about it.

Generates ``--files`` files of ``--file-kib`` KiB (16,000 x 64 KiB by default) and times,
as medians of ``--repeat`` runs:

1. refiner's local copy (``copy_file`` on ``local_threads()`` threads, batches of
   ``LOCAL_RUN``) into one folder against the same copies laid out and ordered as
   ``FileAssetConfig`` does (a folder per 1,000 rows, batches in turn from different
   folders), alternating; each run writes into a fresh folder, the previous one emptied
   (its files truncated) and moved aside, so that no file is deleted;
2. ``cp -r`` of the folder after the previous copy was emptied that way against ``cp -r``
   right after an ``rm -rf`` of the previous copy. On ext4 without a journal, inodes
   freed in the last 60 s are skipped one by one on every new file, so the second case
   measures that scan. The emptying runs come first and the deleting runs after them,
   not alternating, because a delete slows every file creation for a minute after it;
   for the same reason case 1 runs before any delete;
3. case 1 again, each run right after an ``rm -rf`` of the previous copy (a rerun after
   deleting its output): the folder's lock is held while the new inode is searched for,
   so the layout decides how many of those searches run at once.

Run from the repository root::

    .venv/bin/python bench/bench_file_creation.py [--json results.json]

Everything it writes goes under ``--dir`` (default: the system temp folder) and is
deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_assets import KIB, Retired, make_files, sync  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.io.kernel_copy import copy_file  # noqa: E402
from refiner_core.sinks.assets.file_writer import (  # noqa: E402
    LOCAL_RUN,
    asset_path,
    local_runs,
    local_threads,
    row_folder,
)


def timed(fn: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def copy_with_threads(paths: list[str], out: Path, relatives: list[str], runs: list[list[int]]):
    """Copy ``paths[k]`` to ``out/relatives[k]``, one batch of ``runs`` per thread task."""
    for folder in {os.path.dirname(r) for r in relatives}:
        (out / folder).mkdir(parents=True, exist_ok=True)

    def batch(run: list[int]) -> None:
        for k in run:
            copy_file(paths[k], str(out / relatives[k]))

    with ThreadPoolExecutor(local_threads()) as pool:
        list(pool.map(batch, runs))


def bench_cleanup(src: Path, out: Path, retired: Retired, repeat: int) -> dict[str, list[float]]:
    def cp() -> None:
        subprocess.run(["cp", "-r", str(src), str(out)], check=True)

    runs: dict[str, list[float]] = {"after emptying": [], "after rm -rf": []}
    cp()  # untimed: the first emptied folder
    for name in runs:
        for _ in range(repeat):
            sync()
            if name == "after rm -rf":
                shutil.rmtree(out)
            else:
                retired.retire(out)
            sync()
            runs[name].append(timed(cp))
    sync()
    retired.retire(out)
    return runs


def bench_folders(paths: list[str], out: Path, retired: Retired, repeat: int, *, delete: bool):
    """Both layouts, alternating; between runs the copy is emptied and moved aside, or
    with ``delete`` removed (``rm -rf``) right before the next run."""
    rows = list(range(len(paths)))
    names = [asset_path(row, None, path, "path") for row, path in zip(rows, paths, strict=True)]
    flat = [name.split("/", 1)[1] for name in names]
    layouts = {
        "one folder": (flat, [rows[i : i + LOCAL_RUN] for i in range(0, len(rows), LOCAL_RUN)]),
        "a folder per 1,000 rows": (names, local_runs(rows, [row_folder(row) for row in rows])),
    }
    runs: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(repeat):
        for name, (relatives, batches) in layouts.items():
            runs[name].append(timed(copy_with_threads, paths, out, relatives, batches))
            sync()
            if delete:
                shutil.rmtree(out)
                sync()
            else:
                retired.retire(out)
    return runs


def report(title: str, runs: dict[str, list[float]]) -> dict[str, float]:
    print(f"\n{title}")
    medians = {name: statistics.median(times) for name, times in runs.items()}
    for name, median in medians.items():
        each = ", ".join(f"{t:.2f}" for t in runs[name])
        print(f"  {name:<26} {median:7.3f} s   (runs: {each})")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=16_000)
    parser.add_argument("--file-kib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the temporary data goes")
    add_json_option(parser)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="refiner-bench-files-", dir=args.dir))
    try:
        src = work / "src"
        paths = make_files(src, args.files, args.file_kib * KIB)
        out = work / "out"
        retired = Retired(work / "retired")
        data = f"{args.files:,} x {args.file_kib} KiB"
        title = f"copy_file on {local_threads()} threads, {data}"
        folders = report(title, bench_folders(paths, out, retired, args.repeat, delete=False))
        cleanup = report(f"cp -r of {data}", bench_cleanup(src, out, retired, args.repeat))
        deleted = report(
            f"{title}, each right after an rm -rf of the previous copy",
            bench_folders(paths, out, retired, args.repeat, delete=True),
        )
        slow = cleanup["after rm -rf"] / cleanup["after emptying"]
        gain = folders["one folder"] / folders["a folder per 1,000 rows"]
        gain_deleted = deleted["one folder"] / deleted["a folder per 1,000 rows"]
        print(f"\n  cp -r after rm -rf / after emptying    {slow:5.2f}x")
        print(f"  one folder / a folder per 1,000 rows   {gain:5.2f}x")
        print(f"  the same, right after rm -rf           {gain_deleted:5.2f}x")
        write_results(
            args.json,
            [
                Result(
                    workload="file_creation",
                    case=f"cp -r of {data} right after rm -rf of the previous copy",
                    refiner_s=cleanup["after rm -rf"],
                    baseline="cp -r after emptying the previous copy",
                    baseline_s=cleanup["after emptying"],
                    ratio=slow,
                    ratio_kind="slowdown",
                    target="reported",
                    met=None,
                    repeats=args.repeat,
                ),
                Result(
                    workload="file_creation",
                    case=f"{data} copied into a folder per 1,000 rows",
                    refiner_s=folders["a folder per 1,000 rows"],
                    baseline="the same copies into one folder",
                    baseline_s=folders["one folder"],
                    ratio=gain,
                    ratio_kind="speedup",
                    target="reported",
                    met=None,
                    repeats=args.repeat,
                ),
                Result(
                    workload="file_creation",
                    case=f"{data} into a folder per 1,000 rows, right after rm -rf",
                    refiner_s=deleted["a folder per 1,000 rows"],
                    baseline="the same copies into one folder",
                    baseline_s=deleted["one folder"],
                    ratio=gain_deleted,
                    ratio_kind="speedup",
                    target="reported",
                    met=None,
                    repeats=args.repeat,
                ),
            ],
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
