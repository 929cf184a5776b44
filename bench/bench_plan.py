"""Benchmark: planning 10,000 shards, for every source.

Each case plans exactly ``--shards`` shards (10,000, the limit) and is timed as the
median of ``--repeat`` runs, interleaved with its baseline::

    python bench/bench_plan.py --repeat 5

- ``read_parquet`` of a one-row-group index of 1,000,000 rows, ``num_shards=10_000``
  (the row group is cut into row ranges), and of 100 files of 100 row groups each;
- the same index with an asset column and no ``num_shards``, planned for 2,500 workers
  (four shards per worker);
- ``read_jsonl`` of 1,000,000 lines, ``num_shards=10_000`` (a small read at each cut);
- ``read_lance`` of one fragment of 1,000,000 rows, ``num_shards=10_000``;
- ``from_items`` of 10,000 items, one per shard.

Baselines: reading the Parquet footers with ``pyarrow.parquet.read_metadata`` (what
any Parquet plan must read), and for JSONL, finding the 9,999 line starts by reading
the whole file. Target: every plan < 2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refiner_core as mdr  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.lance.isolation import call_isolated  # noqa: E402

ROWS = 1_000_000
TARGET_S = 2.0


def index_table(rows: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "i": pa.array(range(start, start + rows), pa.int64()),
            "clip": [f"/media/clips/{i:07d}.mp4" for i in range(start, start + rows)],
        }
    )


def write_lance(table: pa.Table, uri: str) -> None:
    import lance

    lance.write_dataset(table, uri, max_rows_per_file=len(table))


def make_inputs(folder: Path) -> dict[str, str]:
    index = folder / "index.parquet"
    table = index_table(ROWS)
    pq.write_table(table, index, row_group_size=ROWS)
    many = folder / "many"
    many.mkdir()
    for k in range(100):
        pq.write_table(
            index_table(10_000, 10_000 * k), many / f"part-{k:03d}.parquet", row_group_size=100
        )
    lines = folder / "index.jsonl"
    with open(lines, "w") as f:
        for i in range(ROWS):
            f.write(f'{{"i": {i}, "clip": "/media/clips/{i:07d}.mp4"}}\n')
    lance_uri = str(folder / "index.lance")
    call_isolated(write_lance, table, lance_uri)  # Lance stays out of this process
    return {"index": str(index), "many": str(many), "jsonl": str(lines), "lance": lance_uri}


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        result = fn()
    return time.perf_counter() - started, result


def line_starts(path: str, count: int) -> int:
    """The baseline for JSONL: every line start found by reading the file whole."""
    with open(path, "rb") as f:
        data = f.read()
    starts = 0
    step = len(data) // count
    for k in range(1, count):
        starts += data.index(b"\n", k * step) + 1 > 0
    return starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shards", type=int, default=mdr.MAX_SHARDS)
    add_json_option(parser)
    args = parser.parse_args()
    n = args.shards
    folder = Path(tempfile.mkdtemp(prefix="refiner-bench-plan-"))
    try:
        print(f"writing inputs of {ROWS:,} rows in {folder}")
        paths = make_inputs(folder)
        media = {"clip": mdr.datatype.video_path()}
        many_files = sorted(str(p) for p in Path(paths["many"]).glob("*.parquet"))
        cases: dict[str, Callable[[], object]] = {
            "footer of the index (baseline)": lambda: pq.read_metadata(paths["index"]),
            "read_parquet, 1 row group": lambda: mdr.read_parquet(
                paths["index"], num_shards=n
            ).plan(),
            "read_parquet, media, 2,500 workers": lambda: mdr.read_parquet(
                paths["index"], dtypes=media
            ).plan(workers=n // 4),
            "footers of 100 files (baseline)": lambda: [pq.read_metadata(p) for p in many_files],
            "read_parquet, 100 files x 100 groups": lambda: mdr.read_parquet(
                paths["many"], num_shards=n
            ).plan(),
            "line starts, whole file (baseline)": lambda: line_starts(paths["jsonl"], n),
            "read_jsonl": lambda: mdr.read_jsonl(paths["jsonl"], num_shards=n).plan(),
            "read_lance, 1 fragment": lambda: mdr.read_lance(paths["lance"], num_shards=n).plan(),
            "from_items, 1 per shard": lambda: mdr.from_items(range(n), items_per_shard=1).plan(),
        }
        for name, fn in cases.items():  # warm up (imports, the Lance helper process)
            _, shards = timed(fn)
            if "baseline" not in name:
                assert len(shards) == n, (name, len(shards))
        runs: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, fn in cases.items():
                runs[name].append(timed(fn)[0])
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print(f"planning {n:,} shards, median of {args.repeat} interleaved runs")
    worst = 0.0
    for name, times in runs.items():
        median = statistics.median(times)
        if "baseline" not in name:
            worst = max(worst, median)
        each = ", ".join(f"{t:.3f}" for t in times)
        print(f"  {name:<40} {median:7.3f} s   (runs: {each})")
    ratios = [
        (
            "100 files / their footers",
            "read_parquet, 100 files x 100 groups",
            "footers of 100 files (baseline)",
        ),
        ("read_jsonl / whole-file scan", "read_jsonl", "line starts, whole file (baseline)"),
    ]
    for label, case, base in ratios:
        ratio = statistics.median(runs[case]) / statistics.median(runs[base])
        print(f"  {label:<40} {ratio:7.1f}x")
    verdict = "met" if worst < TARGET_S else "NOT met"
    print(f"slowest plan {worst:.3f} s; target: < {TARGET_S:.0f} s ({verdict})")
    baselines = {
        "read_parquet, 1 row group": "footer of the index (baseline)",
        "read_parquet, media, 2,500 workers": "footer of the index (baseline)",
        "read_parquet, 100 files x 100 groups": "footers of 100 files (baseline)",
        "read_jsonl": "line starts, whole file (baseline)",
    }
    results = []
    for name, times in runs.items():
        if "baseline" in name:
            continue
        median = statistics.median(times)
        base = baselines.get(name)
        results.append(
            Result(
                workload="planning",
                case=f"plan {n:,} shards: {name}",
                refiner_s=median,
                baseline=base.removesuffix(" (baseline)") if base else "target",
                baseline_s=statistics.median(runs[base]) if base else None,
                target=f"< {TARGET_S:.0f} s",
                met=median < TARGET_S,
                repeats=args.repeat,
                ratio_kind="value",  # the target is absolute; the baseline is context
            )
        )
    write_results(args.json, results)


if __name__ == "__main__":
    main()
