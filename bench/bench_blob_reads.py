"""Benchmark: ``mdr.read_blobs`` against a loop of ``mdr.read_blob`` on S3 with latency.

Uploads ``--blocks`` blocks to a local moto S3 holding ``--references`` references of
``--ref-kib`` KiB in total (1,000 x 64 KiB in 4 blocks by default), shuffles the
references, and reads them through the recording proxy of ``tests/s3_server.py``
adding ``--latency-ms`` to every request (20 ms by default). Times the median of
``--repeat`` interleaved runs of:

1. a loop of ``mdr.read_blob`` (the baseline: one request per reference);
2. ``mdr.read_blobs`` (target >= 10x faster than the loop);
3. ``mdr.iter_blobs`` with a 16 MiB buffer (reported).

Each run's bytes are compared with the loop's, and the number of GET requests is
printed. Run from the repository root::

    .venv/bin/python bench/bench_blob_reads.py
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import s3fs  # noqa: E402

import refiner_core as mdr  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from tests.s3_server import S3Proxy, dummy_aws_env, start_moto  # noqa: E402

KIB = 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--references", type=int, default=1000)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--ref-kib", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    os.environ.update(dummy_aws_env())
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work skews timings)"
    )
    moto = start_moto()
    bucket = moto.create_bucket("refiner-bench")
    try:
        with S3Proxy(moto.endpoint_url, latency_s=args.latency_ms / 1000) as proxy:
            write_results(args.json, run(args, bucket, proxy))
    finally:
        moto.delete_bucket(bucket)
        moto.stop()


def run(args, bucket: str, proxy: S3Proxy) -> list[Result]:
    options = proxy.storage_options()
    fs = s3fs.S3FileSystem(**options)
    size = args.ref_kib * KIB
    per_block = args.references // args.blocks
    refs = []
    for b in range(args.blocks):
        url = f"s3://{bucket}/blocks/block-{b:05d}.bin"
        fs.pipe_file(url, os.urandom(per_block * size))
        refs += [{"path": url, "offset": i * size, "size": size} for i in range(per_block)]
    random.Random(0).shuffle(refs)
    total = len(refs) * size
    print(
        f"{len(refs):,} references of {args.ref_kib} KiB in {args.blocks} blocks "
        f"({total / 2**20:.0f} MiB), {args.latency_ms:g} ms added per request"
    )

    expected: list[bytes] = []

    def loop() -> list[bytes]:
        return [mdr.read_blob(r, storage_options=options) for r in refs]

    cases = {
        "loop of read_blob": loop,
        "read_blobs": lambda: mdr.read_blobs(refs, storage_options=options),
        "iter_blobs (16 MiB buffer)": lambda: list(
            mdr.iter_blobs(refs, storage_options=options, max_buffer_bytes=16 * 2**20)
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    gets: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, case in cases.items():
            proxy.clear()
            started = time.perf_counter()
            result = case()
            times[name].append(time.perf_counter() - started)
            gets[name] = len(proxy.records("GetObject"))
            if not expected:
                expected = result
            assert result == expected, f"{name} returned other bytes than the loop"
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in medians.items():
        runs = ", ".join(f"{t:.2f}" for t in times[name])
        print(
            f"  {name:<28} {seconds:8.3f} s  {total / seconds / 2**20:7.1f} MiB/s  "
            f"{gets[name]:5d} GETs   (runs: {runs})"
        )
    speedup = medians["loop of read_blob"] / medians["read_blobs"]
    print(f"  {'read_blobs speed-up over the loop':<34} {speedup:7.1f}x   target >= 10")
    stream = medians["loop of read_blob"] / medians["iter_blobs (16 MiB buffer)"]
    print(f"  {'iter_blobs speed-up over the loop':<34} {stream:7.1f}x   (reported)")
    case = (
        f"{len(refs):,} x {args.ref_kib} KiB shuffled refs in {args.blocks} blocks, "
        f"{args.latency_ms:g} ms/request"
    )
    loop_s = medians["loop of read_blob"]
    return [
        Result(
            workload="coalesced_reads",
            case=f"read_blobs, {case}",
            refiner_s=medians["read_blobs"],
            baseline="loop of read_blob",
            baseline_s=loop_s,
            target=">= 10x faster",
            met=speedup >= 10,
            repeats=args.repeat,
            ratio_kind="speedup",
            extra={"gets": gets["read_blobs"], "baseline_gets": gets["loop of read_blob"]},
        ),
        Result(
            workload="coalesced_reads",
            case=f"iter_blobs (16 MiB buffer), {case}",
            refiner_s=medians["iter_blobs (16 MiB buffer)"],
            baseline="loop of read_blob",
            baseline_s=loop_s,
            target="reported",
            met=None,
            repeats=args.repeat,
            ratio_kind="speedup",
            extra={"gets": gets["iter_blobs (16 MiB buffer)"]},
        ),
    ]


if __name__ == "__main__":
    main()
