"""File-mode asset uploads to S3 (moto server): refiner vs one-at-a-time uploads.

Writes N small local files (default 2,000 × 64 KiB) as assets with
``FileAssetConfig(max_in_flight=16)`` to ``s3://bucket/out`` and compares with
uploading the same files one after another with stock s3fs ``put_file``, in the same
run, through a loopback proxy that adds per-request latency (a model of a real S3
round trip; ``--latency-ms 0`` talks to moto directly). Prints the median of
``--repeat`` runs and the ratio (target ≥ 4× faster). A third side, s3fs's own
concurrent ``put`` of the whole list (``batch_size=16``), shows how fast this server
takes the files from a client that does no work per file of its own.

Then packs the same files into ``--block-mib`` blocks on S3 and re-packs the fully
referenced dataset twice: with complete-blob coalescing (each block copied once,
server-side) and through the per-range path (``missing_policy="set_null"`` disables
coalescing: one ranged GET per reference), target ≥ 10× faster.

    .venv/bin/python bench/bench_s3_assets.py [--files 2000] [--kib 64] [--latency-ms 20] [--repeat 3]
    # the issue's data set (16,000 x 64 KiB = 1 GiB), re-pack part only (about 10 minutes)
    .venv/bin/python bench/bench_s3_assets.py --files 16000 --repeat 1 --no-file-mode
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import subprocess  # noqa: E402

import boto3  # noqa: E402
import s3fs  # noqa: E402

import refiner_core as mdr  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from tests.s3_server import dummy_aws_env  # noqa: E402

SERVER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.s3_server import S3Proxy, start_moto
moto = start_moto()
proxy = S3Proxy(moto.endpoint_url, latency_s={latency!r}).start()
print(moto.endpoint_url, proxy.endpoint_url, flush=True)
sys.stdin.read()
"""


def start_servers(latency_s: float) -> tuple[subprocess.Popen, str, str]:
    """moto and the latency proxy in their own process, so they share no GIL with the client."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(root=root, latency=latency_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    moto_url, proxy_url = proc.stdout.readline().split()
    return proc, moto_url, proxy_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--kib", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--block-mib", type=int, default=16, help="block size of the re-pack part")
    parser.add_argument(
        "--no-repack", dest="repack", action="store_false", help="skip the re-pack part"
    )
    parser.add_argument(
        "--no-file-mode",
        dest="file_mode",
        action="store_false",
        help="skip the file-mode upload part",
    )
    add_json_option(parser)
    args = parser.parse_args()
    results: list[Result] = []
    os.environ.update(dummy_aws_env())
    os.environ["DAGSTER_DISABLE_TELEMETRY"] = "1"

    workdir = tempfile.mkdtemp(prefix="bench-s3-assets-")
    paths = []
    for i in range(args.files):
        path = os.path.join(workdir, f"asset_{i:05d}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(args.kib * 1024))
        paths.append(path)

    server, moto_url, proxy_url = start_servers(args.latency_ms / 1000)
    endpoint = proxy_url if args.latency_ms > 0 else moto_url
    options = {
        "key": "testing",
        "secret": "testing",
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
    }
    client = boto3.client(
        "s3",
        endpoint_url=moto_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    bucket = "bench"
    client.create_bucket(Bucket=bucket)

    def empty_bucket() -> None:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])

    pipeline = mdr.from_items(
        [{"i": i, "asset": p} for i, p in enumerate(paths)],
        items_per_shard=args.files,
        dtypes={"asset": mdr.datatype.file_path()},
    )

    def baseline() -> float:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        started = time.perf_counter()
        for i, path in enumerate(paths):
            fs.put_file(path, f"{bucket}/baseline/{i:05d}.bin")
        return time.perf_counter() - started

    def batched() -> float:
        """s3fs's own concurrent upload of the list, as many at once as ours: how fast
        this server takes the files from a client with no per-file work of its own."""
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        targets = [f"{bucket}/batched/{i:05d}.bin" for i in range(len(paths))]
        started = time.perf_counter()
        fs.put(paths, targets, batch_size=16)
        return time.perf_counter() - started

    def ours() -> float:
        started = time.perf_counter()
        pipeline.write_parquet(
            f"s3://{bucket}/ours",
            assets=mdr.FileAssetConfig(max_in_flight=16),
            storage_options=options,
        ).launch_local(num_workers=1)
        return time.perf_counter() - started

    def repack(policy: str, target: str) -> float:
        started = time.perf_counter()
        summary = (
            mdr.read_parquet(f"s3://{bucket}/packed", storage_options=options)
            .write_parquet(
                f"s3://{bucket}/{target}",
                assets=mdr.BlobAssetConfig(
                    target_bytes=args.block_mib << 20, missing_policy=policy
                ),
                storage_options=options,
            )
            .launch_local(num_workers=1)
            .summary
        )
        elapsed = time.perf_counter() - started
        # each side took its own path for every reference, or the ratio compares nothing
        if policy == "error":
            assert summary.counters["blobs_coalesced"] == packed.counters["blocks_written"], summary
            assert summary.counters["ranges_copied"] == 0, summary
        else:
            assert summary.counters["blobs_coalesced"] == 0, summary
            assert summary.counters["ranges_copied"] == args.files, summary
        return elapsed

    base_times, our_times, batched_times, whole_times, range_times = [], [], [], [], []
    try:
        for _ in range(args.repeat if args.file_mode else 0):
            base_times.append(baseline())
            empty_bucket()
            our_times.append(ours())
            empty_bucket()
            batched_times.append(batched())
            empty_bucket()
        if args.repack:
            packed = (
                pipeline.write_parquet(
                    f"s3://{bucket}/packed",
                    assets=mdr.BlobAssetConfig(target_bytes=args.block_mib << 20),
                    storage_options=options,
                )
                .launch_local(num_workers=1)
                .summary
            )
            for i in range(args.repeat):
                whole_times.append(repack("error", f"whole-{i}"))
                range_times.append(repack("set_null", f"ranges-{i}"))
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
    total_mib = args.files * args.kib / 1024
    print(
        f"{args.files} files x {args.kib} KiB ({total_mib:.0f} MiB), latency {args.latency_ms} ms, median of {args.repeat}"
    )
    if base_times:
        base, mine = statistics.median(base_times), statistics.median(our_times)
        print(f"one-at-a-time s3fs put_file: {base:.2f} s")
        print(f"refiner FileAssetConfig(max_in_flight=16): {mine:.2f} s")
        batch = statistics.median(batched_times)
        print(f"s3fs put of the whole list, batch_size=16: {batch:.2f} s")
        print(f"ours vs one-at-a-time: {base / mine:.2f}x faster (target >= 4x)")
        print(f"s3fs batched vs one-at-a-time: {base / batch:.2f}x faster (this server's ceiling)")
        results.append(
            Result(
                workload="s3_assets",
                case=f"{args.files:,} x {args.kib} KiB file mode to moto, "
                f"{args.latency_ms:g} ms/request",
                refiner_s=mine,
                baseline="one-at-a-time s3fs put_file",
                baseline_s=base,
                target=">= 4x faster",
                met=base / mine >= 4,
                repeats=len(our_times),
                ratio_kind="speedup",
            )
        )
        results.append(
            Result(
                workload="s3_assets",
                case=f"{args.files:,} x {args.kib} KiB file mode vs s3fs put of the list "
                "(batch_size=16)",
                refiner_s=mine,
                baseline="s3fs put, batch_size=16",
                baseline_s=batch,
                target="reported",
                met=None,
                repeats=len(our_times),
            )
        )
    if whole_times:
        whole, ranges = statistics.median(whole_times), statistics.median(range_times)
        print(
            f"re-pack of fully referenced {args.block_mib} MiB blocks, coalesced (server-side copies): {whole:.2f} s"
        )
        print(
            f"re-pack of the same references, per-range path (missing_policy='set_null'): {ranges:.2f} s"
        )
        print(f"coalesced vs per-range: {ranges / whole:.2f}x faster (target >= 10x)")
        results.append(
            Result(
                workload="repack",
                case=f"{args.files:,} x {args.kib} KiB on moto S3, coalesced vs per range, "
                f"{args.latency_ms:g} ms/request",
                refiner_s=whole,
                baseline="per-range re-pack (set_null)",
                baseline_s=ranges,
                target=">= 10x faster",
                met=ranges / whole >= 10,
                repeats=len(whole_times),
                ratio_kind="speedup",
            )
        )
    write_results(args.json, results)


if __name__ == "__main__":
    main()
