"""Benchmark: ``write_lance`` through ``launch_local`` against ``lance.write_dataset``.

Builds one Arrow table of ``--rows`` rows (1,000,000 by default) and 10 columns
(integers, floats, strings, a boolean, a timestamp) and times, as the median of
``--repeat`` interleaved runs (each repetition starting with another side):

1. ``lance.write_dataset(table, uri)`` in a fresh process: the baseline, as a script
   that writes one dataset runs it (each run in a child forked for it, timed inside
   the child);
2. the same call in a warm process: one helper process that has already written the
   earlier repetitions' datasets, so its allocator and Lance's runtime are warmed up
   (for context: no launch_local worker is ever in that state);
3. ``write_lance(uri)`` of the same in-memory table, through ``launch_local`` with
   each of the ``--workers`` counts (1 and 2 by default) and as many shards (write
   stage, fragment commit and finalization included). The pipeline has no row steps,
   so Arrow blocks go straight from the source to Lance's fragment writer. Target:
   <= 1.3x the fresh-process baseline (both sides start from processes that have not
   used Lance).
4. with ``--parquet``, both sides starting from a Parquet file instead:
   ``pq.read_table`` + ``lance.write_dataset`` against ``read_parquet(...).write_lance``.

Before every run, :func:`prime_memory` faults in and frees four times the table's size
of memory, so every side starts with the same kind of free pages (``--no-prime`` skips
it; see the function for why this matters on a virtual machine).

Lance is not fork-safe and ``launch_local`` forks its workers, so this process never
calls Lance itself: the baselines run in forked children.

Run from the repository root::

    .venv/bin/python bench/bench_lance.py
    .venv/bin/python bench/bench_lance.py --rows 1000000 --workers 1 2 --repeat 7 --parquet
"""

from __future__ import annotations

import argparse
import mmap
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
from refiner_core.lance.isolation import call_forked, call_isolated  # noqa: E402
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

    def read(self, shard: Shard, *, batch_rows: int, batch_bytes=None) -> Iterator[pa.Table]:
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


def warm_baseline(table: pa.Table | None, parquet: str | None, uri: str) -> float:
    return call_isolated(_baseline, table, parquet, uri)


def fresh_baseline(table: pa.Table | None, parquet: str | None, uri: str) -> float:
    return call_forked(_baseline, table, parquet, uri)


def refiner(
    pipeline: mdr.Pipeline, uri: str, workers: int, start_method: str | None = None
) -> float:
    started = time.perf_counter()
    stats = pipeline.write_lance(uri).launch_local(num_workers=workers, start_method=start_method)
    elapsed = time.perf_counter() - started
    assert stats.summary.commit["version"] == 1
    return elapsed


def _count(uri: str) -> int:
    import lance

    return lance.dataset(uri).count_rows()


_MADV_POPULATE_WRITE = 23


def prime_memory(nbytes: int) -> None:
    """Fault in ``nbytes`` of fresh memory and free it again, so the run that follows
    finds recently used pages in the kernel's free lists, whatever ran before it.

    On a virtual machine the host may take back guest pages that stayed free for a
    while; the next process to touch them then pays a much slower first fault. Without
    this, a side that runs right after a process exited (freeing its pages) gets
    cheaper memory than one that runs after an idle moment.
    """
    if nbytes <= 0:
        return
    region = mmap.mmap(-1, nbytes)
    try:
        region.madvise(_MADV_POPULATE_WRITE)
    except (OSError, ValueError):  # kernels before 5.14: touch every page
        view = memoryview(region)
        for offset in range(0, nbytes, mmap.PAGESIZE):
            view[offset] = 1
        view.release()
    region.close()


def compare(
    label: str, repeat: int, fresh, warm, ours, scratch: Path, rows: int, prime_bytes: int
) -> tuple[float, float]:
    """Interleaved runs of the three, in rotating order; prints medians and returns
    ours / fresh and ours / warm."""
    series: dict[str, list[float]] = {"fresh": [], "warm": [], "ours": []}
    runs = {"fresh": fresh, "warm": warm, "ours": ours}
    names = list(runs)
    for i in range(repeat):
        # each repetition starts with another side, so none always runs after the same one
        for name in names[i % 3 :] + names[: i % 3]:
            uri = str(scratch / f"{label}-{name}-{i}.lance")
            prime_memory(prime_bytes)
            series[name].append(runs[name](uri))
            assert call_isolated(_count, uri) == rows
            shutil.rmtree(uri)
    f, w, o = (statistics.median(series[name]) for name in ("fresh", "warm", "ours"))
    print(
        f"{label}: lance.write_dataset fresh process {f:.3f}s, warm process {w:.3f}s; "
        f"write_lance {o:.3f}s"
    )
    print(f"  ratio to the fresh-process baseline {o / f:.2f}x (target <= 1.3x)")
    print(f"  ratio to the warm-process baseline  {o / w:.2f}x")
    return o / f, o / w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="worker counts to compare"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parquet", action="store_true", help="also compare from a Parquet file")
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    parser.add_argument(
        "--no-prime", action="store_true", help="do not prime memory before each run"
    )
    parser.add_argument(
        "--start-method",
        default=None,
        choices=("fork", "forkserver", "spawn"),
        help="how launch_local starts its workers (default: its own default, fork)",
    )
    args = parser.parse_args()

    table = make_table(args.rows)
    scratch = Path(tempfile.mkdtemp(prefix="bench-lance-", dir=args.dir))
    print(
        f"{args.rows:,} rows x {table.num_columns} columns, {table.nbytes / 2**20:.0f} MiB in "
        f"Arrow; median of {args.repeat}"
    )
    results: list[tuple[str, int, float, float]] = []
    prime_bytes = 0 if args.no_prime else 4 * table.nbytes
    try:
        for workers in args.workers:
            print(f"-- write_lance with {workers} worker(s) and {workers} shard(s)")
            memory = mdr.Pipeline(TableSource(table, workers))
            ratios = compare(
                f"arrow table, {workers} worker(s)",
                args.repeat,
                lambda uri: fresh_baseline(table, None, uri),
                lambda uri: warm_baseline(table, None, uri),
                lambda uri, memory=memory, workers=workers: refiner(
                    memory, uri, workers, args.start_method
                ),
                scratch,
                args.rows,
                prime_bytes,
            )
            results.append(("arrow table", workers, *ratios))
            if args.parquet:
                parquet = str(scratch / f"input-{workers}.parquet")
                pq.write_table(table, parquet, row_group_size=args.rows // (4 * workers) or 1)
                from_file = mdr.read_parquet(parquet, num_shards=workers)
                ratios = compare(
                    f"from parquet, {workers} worker(s)",
                    args.repeat,
                    lambda uri, parquet=parquet: fresh_baseline(None, parquet, uri),
                    lambda uri, parquet=parquet: warm_baseline(None, parquet, uri),
                    lambda uri, p=from_file, workers=workers: refiner(p, uri, workers),
                    scratch,
                    args.rows,
                    prime_bytes,
                )
                results.append(("from parquet", workers, *ratios))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("\nwrite_lance / lance.write_dataset (target <= 1.3x the fresh-process baseline)")
    print(f"  {'input':<14}{'workers':>8}{'fresh process':>15}{'warm process':>14}")
    for label, workers, fresh, warm in results:
        print(f"  {label:<14}{workers:>8}{fresh:>14.2f}x{warm:>13.2f}x")
    arrow = [fresh for label, _, fresh, _ in results if label == "arrow table"]
    verdict = "met" if max(arrow) <= 1.3 else "MISSED"
    print(
        f"target <= 1.3x the fresh-process baseline on the Arrow table, every worker count: "
        f"{verdict} (worst {max(arrow):.2f}x)"
    )


if __name__ == "__main__":
    main()
