"""Benchmark: the Parquet files ``write_parquet`` makes after a ``map`` step.

A ``map`` step hands the sink 1,024-row blocks. The sink gathers them into row groups
of ``row_group_size`` rows (or ``row_group_bytes``); this compares, on ``--rows`` rows
of a 10-column table read from Parquet and passed through one ``map``:

1. ``write_parquet(out)``: the default row groups;
2. ``write_parquet(out, row_group_size=1024)``: one row group per block;
3. baseline: ``pq.write_table`` of the same output table (pyarrow's own row groups).

For each it prints the row groups, the size on disk, and the median time of
``--repeat`` reads of the whole output with ``pq.read_table``; ratios are to the
baseline. Target: reads within 1.3x of the baseline.

Run from the repository root::

    .venv/bin/python bench/bench_parquet_row_groups.py --repeat 5
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_lance import make_table  # noqa: E402

import refiner_core as mdr  # noqa: E402


def describe(files: list[str], repeat: int) -> tuple[int, int, float]:
    """Row groups, bytes on disk and the median read time of ``files``."""
    groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in files)
    size = sum(os.path.getsize(f) for f in files)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        pq.read_table(files)
        times.append(time.perf_counter() - started)
    return groups, size, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="bench-row-groups-"))
    try:
        source = str(scratch / "input.parquet")
        pq.write_table(make_table(args.rows), source)
        pipeline = mdr.read_parquet(source).map(lambda row: {"x2": row.x * 2})
        results = {}
        for label, options in [
            ("default row groups", {}),
            ("one per block", {"row_group_size": 1024}),
        ]:
            out = scratch / label.replace(" ", "-")
            pipeline.write_parquet(str(out), **options).launch_local()
            results[label] = describe(sorted(glob.glob(f"{out}/*.parquet")), args.repeat)
        baseline_file = str(scratch / "baseline.parquet")
        pq.write_table(
            pq.read_table(glob.glob(f"{scratch}/default-row-groups/*.parquet")), baseline_file
        )
        base = describe([baseline_file], args.repeat)
        print(f"{args.rows:,} rows after one map step, read back {args.repeat} times (median)")
        print(f"  {'output':<28}{'row groups':>11}{'MiB':>8}{'read s':>9}{'read / baseline':>17}")
        for label, (groups, size, read) in [*results.items(), ("pq.write_table (baseline)", base)]:
            print(
                f"  {label:<28}{groups:>11}{size / 2**20:>8.1f}{read:>9.3f}{read / base[2]:>16.2f}x"
            )
        ratio = results["default row groups"][2] / base[2]
        verdict = "met" if ratio <= 1.3 else "MISSED"
        print(f"default row groups: reads within 1.3x of the baseline: {verdict} ({ratio:.2f}x)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
