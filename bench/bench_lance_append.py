"""Benchmark: a new Lance dataset version by sharing its parent's files and appending,
against writing the whole dataset again.

Builds a parent Lance dataset of ``--rows`` rows (16,000 by default: an id, eight float
columns and a ``--payload-bytes`` binary column, 4 KiB by default) with ``write_lance``,
then times, as the median of ``--repeat`` interleaved runs (each repetition starting
with the other side):

1. refiner: ``share_lance_dataset(parent, new)`` (Lance's shallow clone: the new
   dataset references the parent's files) then ``read_parquet(new
   rows).write_lance(new, mode="append")`` of ``--append-percent`` % more rows (1 %:
   160 rows) through ``launch_local``;
2. baseline: ``read_parquet(all rows).write_lance(new)``, the parent's rows and the new
   ones written again as a dataset of their own, the way a version is made without
   sharing.

Both sides read their rows from a Parquet file in the scratch folder. Besides the
times, the script reports the bytes each side wrote (every file under the new
dataset's folder). Targets: time <= 0.25x and bytes written <= 0.05x the rewrite's.

Run from the repository root (prints ``uptime`` first)::

    .venv/bin/python bench/bench_lance_append.py
    .venv/bin/python bench/bench_lance_append.py --rows 16000 --append-percent 1 --repeat 3
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
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import refiner_core as mdr  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.integration import share_lance_dataset  # noqa: E402

TIME_TARGET = 0.25
BYTES_TARGET = 0.05


def make_table(start: int, rows: int, payload_bytes: int) -> pa.Table:
    rng = np.random.default_rng(start)
    columns = {"id": pa.array(np.arange(start, start + rows, dtype=np.int64))}
    for k in range(8):
        columns[f"f{k}"] = pa.array(rng.random(rows))
    blob = rng.integers(0, 256, size=rows * payload_bytes, dtype=np.uint8).tobytes()
    columns["payload"] = pa.array(
        [blob[i * payload_bytes : (i + 1) * payload_bytes] for i in range(rows)], pa.binary()
    )
    return pa.table(columns)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def append_side(parent: str, new_rows: str, out: Path) -> float:
    start = time.perf_counter()
    share_lance_dataset(parent, str(out))
    mdr.read_parquet(new_rows).write_lance(str(out), mode="append").launch_local()
    return time.perf_counter() - start


def rewrite_side(all_rows: str, out: Path) -> float:
    start = time.perf_counter()
    mdr.read_parquet(all_rows).write_lance(str(out)).launch_local()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16_000)
    parser.add_argument("--append-percent", type=float, default=1.0)
    parser.add_argument("--payload-bytes", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    add_json_option(parser)
    args = parser.parse_args()
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())

    scratch = Path(tempfile.mkdtemp(prefix="bench-lance-append-", dir=args.dir))
    try:
        appended = max(1, round(args.rows * args.append_percent / 100))
        parent_table = make_table(0, args.rows, args.payload_bytes)
        new_table = make_table(args.rows, appended, args.payload_bytes)
        pq.write_table(parent_table, scratch / "parent.parquet")
        pq.write_table(new_table, scratch / "new.parquet")
        pq.write_table(pa.concat_tables([parent_table, new_table]), scratch / "all.parquet")
        parent = str(scratch / "parent.lance")
        mdr.read_parquet(str(scratch / "parent.parquet")).write_lance(parent).launch_local()

        times: dict[str, list[float]] = {"append": [], "rewrite": []}
        written: dict[str, list[int]] = {"append": [], "rewrite": []}
        for repeat in range(args.repeat):
            order = ["append", "rewrite"] if repeat % 2 == 0 else ["rewrite", "append"]
            for side in order:
                out = scratch / f"{side}-{repeat}.lance"
                if side == "append":
                    seconds = append_side(parent, str(scratch / "new.parquet"), out)
                else:
                    seconds = rewrite_side(str(scratch / "all.parquet"), out)
                times[side].append(seconds)
                written[side].append(folder_bytes(out))
                shutil.rmtree(out)
        load = os.getloadavg()[0]
        append_s, rewrite_s = (
            statistics.median(times["append"]),
            statistics.median(times["rewrite"]),
        )
        append_b = statistics.median(written["append"])
        rewrite_b = statistics.median(written["rewrite"])
        time_ratio, bytes_ratio = append_s / rewrite_s, append_b / rewrite_b
        case = f"{args.rows:,} rows + {args.append_percent:g} % ({appended:,} rows)"
        print(f"{case}: share + append {append_s:.3f} s, {append_b / 1e6:.2f} MB written")
        print(f"{case}: rewrite         {rewrite_s:.3f} s, {rewrite_b / 1e6:.2f} MB written")
        print(
            f"time {time_ratio:.3f}x (target <= {TIME_TARGET}x), bytes {bytes_ratio:.4f}x "
            f"(target <= {BYTES_TARGET}x), load average {load:.2f}"
        )
        write_results(
            args.json,
            [
                Result(
                    workload="lance_append",
                    case=case,
                    refiner_s=append_s,
                    baseline="write_lance of every row again",
                    baseline_s=rewrite_s,
                    target=f"<= {TIME_TARGET}x time, <= {BYTES_TARGET}x bytes",
                    met=time_ratio <= TIME_TARGET and bytes_ratio <= BYTES_TARGET,
                    repeats=args.repeat,
                    ratio=time_ratio,
                    ratio_kind="fraction",
                    extra={
                        "append_bytes": int(append_b),
                        "rewrite_bytes": int(rewrite_b),
                        "bytes_ratio": bytes_ratio,
                        "load_average": load,
                    },
                )
            ],
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
