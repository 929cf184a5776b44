"""The peer side of the benchmarks: workloads 1, 2 and 4 with the public ``macrodata-refiner``.

Runs with ``bench/peer/.venv/bin/python`` (``bash bench/peer/setup.sh`` creates it), one
timed run per invocation, so the refiner scripts can interleave it with their own
runs on the same data. Prints one JSON line: ``{"seconds": ..., "version": ...}``.
Only the library call is timed (not this interpreter's start or ``import refiner``),
as the refiner side times only its own call::

    python workloads.py pack --index paths.parquet --workers 2 --out DIR --rows 16000
    python workloads.py copy --index paths.parquet --workers 2 --out DIR --rows 16000
    python workloads.py map_async --rows 2000 --sleep-ms 10 --in-flight 32

The library tries its vendor's API once per ``launch_local`` when no API key is set:
``bench/peer/runner.py`` starts this script with ``MACRODATA_BASE_URL`` pointing at a
closed loopback port, ``MACRODATA_API_KEY`` unset and an empty ``XDG_CONFIG_HOME``
(no stored key), so nothing leaves the machine. ``--rundir`` keeps its run state out
of ``~/.cache``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import sys
import tempfile
import time

import refiner as peer


def version() -> str:
    return importlib.metadata.version("macrodata-refiner")


@contextlib.contextmanager
def quiet():
    """The library logs every worker's progress on stdout and stderr: send both to
    /dev/null (this script's own JSON line is printed afterwards)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(os.devnull, "w") as null:
        for fd in saved:
            os.dup2(null.fileno(), fd)
        try:
            yield
        finally:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def write_assets(args: argparse.Namespace, config) -> float:
    """Read the index, write Parquet with ``config`` for the media column; seconds.

    ``split_row_groups=True``: in 0.3.9, ``num_shards=2`` over a file of several row
    groups without it writes only part of the rows (8,000 of 16,000 in a plain
    ``write_parquet``), which the row check below refuses."""
    pipeline = peer.read_parquet(
        args.index,
        dtypes={"video": peer.datatype.video_path()},
        num_shards=args.workers,
        split_row_groups=True,
    )
    rundir = tempfile.mkdtemp(prefix="peer-run-", dir=args.rundir)
    started = time.perf_counter()
    with quiet():
        stats = pipeline.write_parquet(args.out, assets=config).launch_local(
            name=f"bench-{args.workload}", num_workers=args.workers, rundir=rundir
        )
    seconds = time.perf_counter() - started
    if stats.failed or stats.output_rows != args.rows:
        raise SystemExit(f"peer run incomplete: {stats}")
    return seconds


def map_async(args: argparse.Namespace) -> float:
    sleep_s = args.sleep_ms / 1000

    async def sleepy(row):
        await asyncio.sleep(sleep_s)
        return row.update(done=True)

    def run(rows: int) -> None:
        pipeline = peer.from_items(list(range(rows)), items_per_shard=rows)
        out = pipeline.map_async(sleepy, max_in_flight=args.in_flight).materialize()
        if len(out) != rows:
            raise SystemExit(f"peer map_async returned {len(out)} rows, not {rows}")

    run(100)  # warm up, as the refiner side does
    started = time.perf_counter()
    run(args.rows)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=["pack", "copy", "map_async"])
    parser.add_argument("--index", help="Parquet file of paths (column 'video')")
    parser.add_argument("--out", help="output folder")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rows", type=int, required=True, help="rows expected / generated")
    parser.add_argument("--rundir", default=None, help="parent of the library's run folder")
    parser.add_argument("--sleep-ms", type=float, default=10.0)
    parser.add_argument("--in-flight", type=int, default=32)
    args = parser.parse_args()
    if os.environ.get("MACRODATA_API_KEY"):
        raise SystemExit("unset MACRODATA_API_KEY: the peer must not talk to its vendor")
    if args.workload == "pack":
        seconds = write_assets(args, peer.BlobAssetConfig())
    elif args.workload == "copy":
        seconds = write_assets(args, peer.FileAssetConfig())
    else:
        seconds = map_async(args)
    print(json.dumps({"seconds": seconds, "version": version()}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
