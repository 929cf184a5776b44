"""Benchmark: planning ``read_parquet`` over a folder of many small files.

Writes ``--files`` one-row-group Parquet files (20,000 by default, ``--large`` for
100,000) into a temporary folder, then times, interleaved, the median of ``--repeat``
runs of:

- the baseline: reading every footer with ``pyarrow.parquet.read_metadata`` on a
  16-thread pool (what any Parquet plan must read);
- ``mdr.read_parquet(folder).plan()``: listing, footers, grouping the small files into
  shards of ``target_shard_bytes``.

Target: the plan takes at most 5x the baseline::

    python bench/bench_plan_files.py --repeat 3
    python bench/bench_plan_files.py --large
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refiner_core as mdr  # noqa: E402

TARGET_RATIO = 5.0


def write_files(root: Path, count: int) -> list[str]:
    paths = []
    for i in range(count):
        folder = root / f"part{i // 1000:03d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"f{i:06d}.parquet"
        pq.write_table(pa.table({"i": [i, i + 1], "name": [f"a{i}", f"b{i}"]}), path)
        paths.append(str(path))
    return paths


def footers(paths: list[str]) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        metas = list(pool.map(pq.read_metadata, paths))
    assert len(metas) == len(paths)
    return time.perf_counter() - started


def plan(root: Path) -> tuple[float, int]:
    started = time.perf_counter()
    shards = mdr.read_parquet(str(root)).plan()
    return time.perf_counter() - started, len(shards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--large", action="store_true", help="100,000 files")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    count = 100_000 if args.large else args.files
    root = Path(tempfile.mkdtemp(prefix="bench-plan-files-"))
    try:
        paths = write_files(root, count)
        base, ours, shards = [], [], 0
        for _ in range(args.repeat):
            base.append(footers(paths))
            took, shards = plan(root)
            ours.append(took)
        b, o = statistics.median(base), statistics.median(ours)
        print(f"files: {count:,}  shards: {shards:,}")
        print(
            f"footers on 16 threads: {b:.2f} s   plan: {o:.2f} s   ratio: {o / b:.2f} "
            f"(target <= {TARGET_RATIO})  {'met' if o / b <= TARGET_RATIO else 'NOT met'}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
