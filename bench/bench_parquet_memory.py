"""Benchmark: peak memory of reading a ~1 GB Parquet file through ``map``.

Writes a Parquet file of ``--size-mib`` MiB (default 1024) of incompressible binary
cells (``--cell-kib`` KiB each) into a temporary folder, then runs each case in a fresh
child process while a thread samples the memory (PSS) of that process and all its children
(``launch_local`` workers included) every 10 ms::

    python bench/bench_parquet_memory.py --size-mib 1024 --repeat 3

Cases:

- baseline: ``pyarrow.parquet.ParquetFile.iter_batches(batch_size=1024)``, touching
  every batch;
- consume: ``read_parquet(...).with_max_block_rows(1024).map(...)`` iterated with
  ``iter_rows()`` in the child;
- write: the same pipeline ``.write_parquet(tmp).launch_local()`` (a worker process);
- convert: ``read_parquet(...).write_parquet(tmp).launch_local()`` with the default
  block limits (65,536 rows or 64 MiB per Arrow block), no row step.

``--input lance`` runs the same cases over a Lance dataset of the same rows (one data
file; the baseline is ``lance.dataset(...).to_batches(batch_size=1024)``, the refiner
cases use ``read_lance``). ``--row-group-mib`` sets a Parquet input's row group size
(64 MiB by default) and
``--num-shards`` the refiner cases' ``read_parquet(num_shards=...)`` (``1``: the whole
file in one shard, read a few row groups at a time). With large
row groups (``--row-group-mib 1024``, as media tables often have) the baseline reads
each column chunk whole before decoding it (pyarrow's ``pre_buffer``), while
``read_parquet`` sizes its batches from the row group metadata and streams the chunk.

Reported: the median peak memory above the child's memory before the run, relative to the
file size and to one block (1,024 rows x cell size), and relative to the baseline.
The temporary folder is deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2**20
BLOCK_ROWS = 1024


def generate(path: str, size: int, cell: int, row_group: int = 64 * MIB) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows_per_group = max(1, row_group // cell)
    schema = pa.schema([("id", pa.int64()), ("payload", pa.binary())])
    written = 0
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        while written * cell < size:
            n = min(rows_per_group, -(-(size - written * cell) // cell))
            payload = os.urandom(n * cell)
            cells = [payload[i * cell : (i + 1) * cell] for i in range(n)]
            ids = pa.array(range(written, written + n), pa.int64())
            writer.write_table(pa.table({"id": ids, "payload": cells}, schema=schema))
            written += n
    return written


def tree_memory(proc) -> int:
    """Proportional set size of ``proc`` and its children: a page the child shares with
    the ``launch_local`` worker it forked counts once in the total, not once per process."""
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_full_info().pss
    return total


def generate_lance(path: str, size: int, cell: int) -> int:
    """The same rows as :func:`generate`, as a Lance dataset (one data file)."""
    import lance
    import pyarrow as pa

    schema = pa.schema([("id", pa.int64()), ("payload", pa.binary())])
    total = -(-size // cell)
    step = max(1, (64 * MIB) // cell)

    def batches():
        for start in range(0, total, step):
            n = min(step, total - start)
            payload = os.urandom(n * cell)
            cells = [payload[i * cell : (i + 1) * cell] for i in range(n)]
            yield pa.record_batch([pa.array(range(start, start + n)), cells], schema=schema)

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    lance.write_dataset(reader, path, max_rows_per_file=max(total, 1))
    return total


def case_baseline(path: str, workdir: str, options: dict) -> int:
    rows = 0
    if options["input"] == "lance":
        import lance

        batches = lance.dataset(path).to_batches(batch_size=BLOCK_ROWS)
    else:
        import pyarrow.parquet as pq

        batches = pq.ParquetFile(path).iter_batches(batch_size=BLOCK_ROWS)
    for batch in batches:
        rows += batch.num_rows
        batch.column(1).nbytes  # noqa: B018 (touch the batch)
    return rows


def _read(path: str, options: dict):
    import refiner_core as mdr

    read = mdr.read_lance if options["input"] == "lance" else mdr.read_parquet
    return read(path, num_shards=options["num_shards"])


def _pipeline(path: str, options: dict):
    return (
        _read(path, options)
        .with_max_block_rows(BLOCK_ROWS)
        .map(lambda row: {"payload_size": len(row.payload)})
    )


def case_consume(path: str, workdir: str, options: dict) -> int:
    return sum(1 for _ in _pipeline(path, options).iter_rows())


def _write(pipeline, workdir: str) -> int:
    import io

    out = tempfile.mkdtemp(dir=workdir)
    with contextlib.redirect_stderr(io.StringIO()):
        stats = pipeline.write_parquet(out).launch_local(num_workers=1)
    shutil.rmtree(out, ignore_errors=True)
    return stats.summary.counters["rows_written"]


def case_write(path: str, workdir: str, options: dict) -> int:
    return _write(_pipeline(path, options), workdir)


def case_convert(path: str, workdir: str, options: dict) -> int:
    return _write(_read(path, options), workdir)


CASES = {
    "baseline": case_baseline,
    "consume": case_consume,
    "write": case_write,
    "convert": case_convert,
}


def child(name: str, path: str, workdir: str, options: dict, conn) -> None:
    import psutil

    import refiner_core  # noqa: F401  (import before the baseline memory is taken)

    proc = psutil.Process()
    before = tree_memory(proc)
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_memory(proc))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    rows = CASES[name](path, workdir, options)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    conn.send({"rows": rows, "seconds": seconds, "before": before, "peak": peak[0]})
    conn.close()


def run_case(name: str, path: str, workdir: str, options: dict) -> dict:
    ctx = multiprocessing.get_context("spawn")
    parent, child_end = ctx.Pipe(duplex=False)
    process = ctx.Process(target=child, args=(name, path, workdir, options, child_end))
    process.start()
    result = parent.recv()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--cell-kib", type=int, default=10)
    parser.add_argument(
        "--row-group-mib", type=int, default=64, help="row group size of the input file"
    )
    parser.add_argument(
        "--num-shards",
        type=int,
        default=None,
        help="read_parquet/read_lance num_shards (default: shards of about 128 MiB)",
    )
    parser.add_argument(
        "--input",
        choices=("parquet", "lance"),
        default="parquet",
        help="the input's format (lance: one data file, read with read_lance)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cell = args.cell_kib * 1024
    workdir = tempfile.mkdtemp(prefix="refiner-bench-parquet-")
    try:
        path = os.path.join(workdir, f"input.{args.input}")
        started = time.perf_counter()
        if args.input == "lance":
            rows = generate_lance(path, args.size_mib * MIB, cell)
            layout = "one data file"
            file_size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
        else:
            rows = generate(path, args.size_mib * MIB, cell, args.row_group_mib * MIB)
            layout = f"row groups of {args.row_group_mib} MiB"
            file_size = os.path.getsize(path)
        print(
            f"input: {args.input}, {file_size / MIB:.0f} MiB, {rows} rows of {args.cell_kib} "
            f"KiB, {layout}, written in {time.perf_counter() - started:.1f} s"
        )
        options = {"num_shards": args.num_shards, "input": args.input}
        block = BLOCK_ROWS * cell
        results: dict[str, list[dict]] = {name: [] for name in CASES}
        for _ in range(args.repeat):
            for name in CASES:
                result = run_case(name, path, workdir, options)
                assert result["rows"] == rows, (name, result)
                results[name].append(result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def median(name: str, key: str) -> float:
        if key == "growth":
            return statistics.median(r["peak"] - r["before"] for r in results[name])
        return statistics.median(r[key] for r in results[name])

    base = median("baseline", "growth")
    print(f"block: {BLOCK_ROWS} rows = {block / MIB:.1f} MiB; median of {args.repeat} runs")
    print(
        f"{'case':10}{'seconds':>9}{'peak MiB':>10}{'growth MiB':>12}"
        f"{'/ file':>9}{'/ block':>9}{'/ baseline':>12}"
    )
    for name in CASES:
        growth = median(name, "growth")
        print(
            f"{name:10}{median(name, 'seconds'):9.1f}{median(name, 'peak') / MIB:10.0f}"
            f"{growth / MIB:12.0f}{growth / file_size:9.3f}{growth / block:9.1f}"
            f"{growth / base:12.2f}"
        )


if __name__ == "__main__":
    main()
