"""File-mode asset uploads to S3 (moto server): refiner vs one-at-a-time uploads.

Writes N small local files (default 2,000 × 64 KiB) as assets with
``FileAssetConfig(max_in_flight=16)`` to ``s3://bucket/out`` and compares with
uploading the same files one after another with stock s3fs ``put_file``, in the same
run, through a loopback proxy that adds per-request latency (a model of a real S3
round trip; ``--latency-ms 0`` talks to moto directly). Prints the median of
``--repeat`` runs and the ratio (target ≥ 4× faster).

    .venv/bin/python bench/bench_s3_assets.py [--files 2000] [--kib 64] [--latency-ms 20] [--repeat 3]
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
    args = parser.parse_args()
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
        s3fs.S3FileSystem.clear_instance_cache()
        fs = s3fs.S3FileSystem(**options)
        started = time.perf_counter()
        for i, path in enumerate(paths):
            fs.put_file(path, f"{bucket}/baseline/{i:05d}.bin")
        return time.perf_counter() - started

    def ours() -> float:
        started = time.perf_counter()
        pipeline.write_parquet(
            f"s3://{bucket}/ours",
            assets=mdr.FileAssetConfig(max_in_flight=16),
            storage_options=options,
        ).launch_local(num_workers=1)
        return time.perf_counter() - started

    base_times, our_times = [], []
    try:
        for _ in range(args.repeat):
            base_times.append(baseline())
            empty_bucket()
            our_times.append(ours())
            empty_bucket()
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
    base, mine = statistics.median(base_times), statistics.median(our_times)
    total_mib = args.files * args.kib / 1024
    print(
        f"{args.files} files x {args.kib} KiB ({total_mib:.0f} MiB), latency {args.latency_ms} ms, median of {args.repeat}"
    )
    print(f"one-at-a-time s3fs put_file: {base:.2f} s")
    print(f"refiner FileAssetConfig(max_in_flight=16): {mine:.2f} s")
    print(f"ours vs one-at-a-time: {base / mine:.2f}x faster (target >= 4x)")


if __name__ == "__main__":
    main()
