"""Benchmark: ``write_lance`` through ``launch_local`` against ``lance.write_dataset``.

Builds one Arrow table of ``--rows`` rows (1,000,000 by default) and 10 columns
(integers, floats, strings, a boolean, a timestamp) and times, as the median of
``--repeat`` interleaved runs:

1. ``lance.write_dataset(table, uri)``: the baseline;
2. ``write_lance(uri)`` of the same in-memory table, through ``launch_local`` with
   ``--workers`` worker processes and as many shards (write stage, fragment commit
   and finalization included). The pipeline has no row steps, so Arrow blocks go
   straight from the source to Lance's fragment writer. Target: <= 1.3x.
3. with ``--parquet``, both sides starting from a Parquet file instead:
   ``pq.read_table`` + ``lance.write_dataset`` against ``read_parquet(...).write_lance``.

Lance is not fork-safe and ``launch_local`` forks its workers, so the baseline runs in
a forked child (timed inside the child) and this process never starts Lance itself.

Run from the repository root::

    .venv/bin/python bench/bench_lance.py
    .venv/bin/python bench/bench_lance.py --rows 1000000 --workers 2 --repeat 3 --parquet
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import refiner_core as mdr  # noqa: E402
from refiner_core.sinks.lance.isolation import call_isolated  # noqa: E402
from refiner_core.sources.base import Shard, make_shards  # noqa: E402


def make_table(rows: int) -> pa.Table:
    """A 10-column table of ``rows`` rows: numbers, short strings, a flag and a time."""
    import pyarrow.compute as pc

    ids = pa.array(range(rows), type=pa.int64())
    return pa.table(
        {
            "id": ids,
            "episode": pc.cast(pc.divide(ids, 1000), pa.int32()),
            "frame": pc.remainder(ids, 1000),
            "x": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            "y": pc.sin(pc.cast(ids, pa.float64())),
            "z": pc.cos(pc.cast(ids, pa.float64())),
            "score": pc.cast(pc.divide(pc.cast(ids, pa.float64()), rows), pa.float32()),
            "label": pc.binary_join_element_wise(
                "label-", pc.cast(pc.remainder(ids, 97), pa.string()), ""
            ),
            "ok": pc.equal(pc.remainder(ids, 3), 0),
            "ts": pc.cast(pc.multiply(ids, 1_000_000), pa.timestamp("us")),
        }
    )


class TableSource:
    """The bench's in-memory source: ``shards`` equal slices of one Arrow table."""

    name = "bench_table"
    fields: dict = {}

    def __init__(self, table: pa.Table, shards: int) -> None:
        self.table = table
        self.shards = shards

    def plan(self) -> list[Shard]:
        step = -(-self.table.num_rows // self.shards)
        return make_shards([(i * step, step) for i in range(self.shards)], source="bench_table")

    def schema_hint(self) -> pa.Schema:
        return self.table.schema

    def read(self, shard: Shard, *, batch_rows: int) -> Iterator[pa.Table]:
        start, length = shard.payload
        piece = self.table.slice(start, length)
        for offset in range(0, piece.num_rows, batch_rows):
            yield piece.slice(offset, batch_rows)


def _baseline(table: pa.Table | None, parquet: str | None, uri: str) -> float:
    import lance

    started = time.perf_counter()
    if parquet is not None:
        table = pq.read_table(parquet)
    lance.write_dataset(table, uri)
    return time.perf_counter() - started


def baseline(table: pa.Table | None, parquet: str | None, uri: str) -> float:
    return call_isolated(_baseline, table, parquet, uri)


def refiner(pipeline: mdr.Pipeline, uri: str, workers: int) -> float:
    started = time.perf_counter()
    stats = pipeline.write_lance(uri).launch_local(num_workers=workers)
    elapsed = time.perf_counter() - started
    assert stats.summary["commit"]["version"] == 1
    return elapsed


def _count(uri: str) -> int:
    import lance

    return lance.dataset(uri).count_rows()


def compare(label: str, repeat: int, base, ours, scratch: Path, rows: int) -> float:
    base_times, our_times = [], []
    for i in range(repeat):
        for times, run in ((base_times, base), (our_times, ours)):
            uri = str(scratch / f"{label}-{len(times)}-{i}.lance")
            times.append(run(uri))
            assert call_isolated(_count, uri) == rows
            shutil.rmtree(uri)
    b, o = statistics.median(base_times), statistics.median(our_times)
    print(
        f"{label}: lance.write_dataset {b:.3f}s  write_lance {o:.3f}s  ratio {o / b:.2f}x "
        f"(best runs {min(base_times):.3f}s vs {min(our_times):.3f}s: "
        f"{min(our_times) / min(base_times):.2f}x)"
    )
    return o / b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parquet", action="store_true", help="also compare from a Parquet file")
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    args = parser.parse_args()

    table = make_table(args.rows)
    scratch = Path(tempfile.mkdtemp(prefix="bench-lance-", dir=args.dir))
    print(
        f"{args.rows:,} rows x {table.num_columns} columns, {table.nbytes / 2**20:.0f} MiB in "
        f"Arrow; write_lance with {args.workers} worker(s) and {args.workers} shard(s); "
        f"median of {args.repeat}"
    )
    try:
        ratios = []
        memory = mdr.Pipeline(TableSource(table, args.workers))
        ratios.append(
            compare(
                "arrow table",
                args.repeat,
                lambda uri: baseline(table, None, uri),
                lambda uri: refiner(memory, uri, args.workers),
                scratch,
                args.rows,
            )
        )
        if args.parquet:
            parquet = str(scratch / "input.parquet")
            pq.write_table(table, parquet, row_group_size=args.rows // (4 * args.workers) or 1)
            from_file = mdr.read_parquet(parquet, num_shards=args.workers)
            ratios.append(
                compare(
                    "from parquet",
                    args.repeat,
                    lambda uri: baseline(None, parquet, uri),
                    lambda uri: refiner(from_file, uri, args.workers),
                    scratch,
                    args.rows,
                )
            )
        verdict = "met" if ratios[0] <= 1.3 else "MISSED"
        print(f"target <= 1.3x on the Arrow table: {verdict} ({ratios[0]:.2f}x)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
