"""Benchmark: the reference audit, on S3 with latency and at write time.

1. **Parallel verify.** Writes ``--shards`` one-row shards (each row two image blob
   references, so one Parquet file and one block per shard) to a local moto S3, then
   runs ``refiner verify``'s check (:func:`refiner_core.cli.verify.verify_output`)
   through the recording proxy of ``tests/s3_server.py``, which adds ``--latency-ms``
   to every request: with ``threads=1`` (the serial read: one request at a time) and
   with ``--threads``, interleaved ``--repeat`` times in the same run. Both must find
   the same rows, references and no failure; target >= 5x faster. ``--servers``
   places moto and the proxy: each in a process of its own (``processes``, the
   default: a real S3 is another machine) or in threads of this process
   (``in-process``, where they share the client's GIL); the results name it.
2. **Parallel full audit.** Materializes ``--audit-shards`` shards as a Dagster dataset
   asset on moto and runs the ``reference_integrity`` scan
   (:func:`refiner_dagster.checks.scan_references`, every reference checked) through the
   same proxy with ``threads=1`` and ``--threads``; both must report the same.
3. **Write-time audit cost.** Writes ``--local-rows`` rows to local disk and times what
   each attempt's audit does on close (record the references of its data file, list
   its asset folder, check, read back a checksum sample), against the whole write.

Run from the repository root::

    .venv/bin/python bench/bench_audit.py                 # 1,000 shards, 20 ms/request
    .venv/bin/python bench/bench_audit.py --shards 200 --audit-shards 100 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

import refiner_core as mdr  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.cli.storage import open_output  # noqa: E402
from refiner_core.cli.verify import verify_output  # noqa: E402
from refiner_core.io import DataFolder  # noqa: E402
from refiner_core.manifests import read_manifests  # noqa: E402
from refiner_core.sinks.reference_audit import ReferenceRecorder  # noqa: E402
from tests.s3_server import (  # noqa: E402
    SERVER_LAYOUTS,
    LocalS3,
    dummy_aws_env,
    start_local_s3,
)

TARGET_SPEEDUP = 5.0
dt = mdr.datatype


def _media(folder: Path, count: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"{i:05d}.png"
        path.write_bytes(os.urandom(512 + i % 97))
        paths.append(str(path))
    return paths


def _pipeline(paths: list[str], per_shard: int) -> mdr.Pipeline:
    rows = [{"i": i, "image": p, "depth": paths[-1 - i]} for i, p in enumerate(paths)]
    return mdr.from_items(
        rows, items_per_shard=per_shard, dtypes={"image": dt.image_path(), "depth": dt.image_path()}
    )


def _requests(s3: LocalS3) -> str:
    """How many requests the proxy saw since it was last cleared, when it is in process."""
    records = getattr(s3.proxy, "records", None)
    return f"{len(records()):,} requests" if records is not None else ""


def parallel_verify(args, work: Path) -> Result:
    os.environ.update(dummy_aws_env())
    s3 = start_local_s3(args.latency_ms / 1000, layout=args.servers)
    moto = s3.moto
    bucket = moto.create_bucket("refiner-bench-audit")
    try:
        url = f"s3://{bucket}/out"
        started = time.perf_counter()
        _pipeline(_media(work / "s3-media", args.shards), 1).write_parquet(
            url,
            assets=mdr.BlobAssetConfig(checksum="crc32c"),
            storage_options=moto.storage_options(),
        ).launch_local(num_workers=2)
        print(f"wrote {args.shards:,} shards to moto in {time.perf_counter() - started:.1f} s")
        output = open_output(url, s3.storage_options())
        times: dict[int, list[float]] = {1: [], args.threads: []}
        found = set()
        for _ in range(args.repeat):
            for threads in times:
                if hasattr(s3.proxy, "clear"):
                    s3.proxy.clear()
                t0 = time.perf_counter()
                report = verify_output(output, threads=threads)
                times[threads].append(time.perf_counter() - t0)
                assert report.ok, report.failures[:3]
                found.add((report.rows, report.blobs, report.checksums))
                print(f"  threads={threads:<3} {times[threads][-1]:7.2f} s  {_requests(s3)}")
        assert len(found) == 1, found
    finally:
        moto.delete_bucket(bucket)
        s3.stop()
    serial, parallel = statistics.median(times[1]), statistics.median(times[args.threads])
    speedup = serial / parallel
    rows, blobs, checksums = found.pop()
    print(
        f"verify of {rows:,} rows, {blobs:,} blob references, {checksums:,} checksums: serial "
        f"{serial:.2f} s, {args.threads} threads {parallel:.2f} s -> {speedup:.1f}x "
        f"(target >= {TARGET_SPEEDUP:g}x: {'met' if speedup >= TARGET_SPEEDUP else 'NOT met'})"
    )
    return Result(
        workload="audit",
        case=f"verify {args.shards:,} shards on S3, {args.latency_ms:g} ms/request",
        refiner_s=parallel,
        baseline="the same verify, one request at a time",
        baseline_s=serial,
        target=f">= {TARGET_SPEEDUP:g}x faster",
        met=speedup >= TARGET_SPEEDUP,
        repeats=args.repeat,
        ratio=speedup,
        ratio_kind="speedup",
        extra={
            "rows": rows,
            "blob_references": blobs,
            "threads": args.threads,
            "servers": SERVER_LAYOUTS[args.servers],
        },
    )


def parallel_full_audit(args, work: Path) -> Result:
    import dagster as dg
    from dagster_aws.s3 import S3Resource

    import refiner_dagster as rd
    from refiner_dagster.checks import scan_references
    from tests.s3_server import DUMMY_KEY, DUMMY_SECRET, REGION

    os.environ.update(dummy_aws_env())
    os.environ["DAGSTER_DISABLE_TELEMETRY"] = "1"
    s3_servers = start_local_s3(args.latency_ms / 1000, layout=args.servers)
    moto = s3_servers.moto
    bucket = moto.create_bucket("refiner-bench-full-audit")
    base = f"s3://{bucket}/data"
    pipeline = _pipeline(_media(work / "audit-media", args.audit_shards), 1)

    @dg.asset(name="episodes", io_manager_key="refiner")
    def episodes() -> mdr.Pipeline:
        return pipeline

    s3 = S3Resource(
        endpoint_url=moto.endpoint_url,
        aws_access_key_id=DUMMY_KEY,
        aws_secret_access_key=DUMMY_SECRET,
        region_name=REGION,
    )
    refiner = rd.RefinerBlobIOManager(base_url=base, num_workers=2, s3=s3)
    try:
        started = time.perf_counter()
        with dg.instance_for_test() as instance:
            assets = [episodes, rd.build_finalization_asset(episodes)]
            done = dg.materialize(assets, instance=instance, resources={"refiner": refiner})
            assert done.success
        print(
            f"materialized {args.audit_shards:,} shards on moto in "
            f"{time.perf_counter() - started:.1f} s"
        )
        storage = rd.DatasetStorage(base, s3_servers.storage_options())
        version = storage.current(["episodes"], None)
        assert version is not None
        times: dict[int, list[float]] = {1: [], args.threads: []}
        reports = {}
        for _ in range(args.repeat):
            for threads in times:
                t0 = time.perf_counter()
                reports[threads] = scan_references(version, sample_threshold=10**9, threads=threads)
                times[threads].append(time.perf_counter() - t0)
                print(f"  full audit threads={threads:<3} {times[threads][-1]:7.2f} s")
        assert reports[1] == reports[args.threads] and reports[1].failure_count == 0
    finally:
        moto.delete_bucket(bucket)
        s3_servers.stop()
    serial, parallel = statistics.median(times[1]), statistics.median(times[args.threads])
    speedup = serial / parallel
    print(
        f"full audit of {reports[1].checked:,} references in {reports[1].blocks:,} blocks: serial "
        f"{serial:.2f} s, {args.threads} threads {parallel:.2f} s -> {speedup:.1f}x "
        f"(target >= {TARGET_SPEEDUP:g}x: {'met' if speedup >= TARGET_SPEEDUP else 'NOT met'})"
    )
    return Result(
        workload="audit",
        case=f"full reference_integrity audit, {args.audit_shards:,} shards on S3, "
        f"{args.latency_ms:g} ms/request",
        refiner_s=parallel,
        baseline="the same scan, one request at a time",
        baseline_s=serial,
        target=f">= {TARGET_SPEEDUP:g}x faster",
        met=speedup >= TARGET_SPEEDUP,
        repeats=args.repeat,
        ratio=speedup,
        ratio_kind="speedup",
        extra={
            "references": reports[1].checked,
            "threads": args.threads,
            "servers": SERVER_LAYOUTS[args.servers],
        },
    )


def write_audit_cost(args, work: Path) -> Result:
    """The write's time against the time its attempts' audits take, redone alone."""
    out = work / "local-out"
    paths = _media(work / "local-media", args.local_rows)
    started = time.perf_counter()
    _pipeline(paths, args.local_rows // 10).write_parquet(
        str(out), assets=mdr.BlobAssetConfig(checksum="crc32c", target_bytes=256 * 1024)
    ).launch_local(num_workers=1)
    write_s = time.perf_counter() - started
    folder = DataFolder(str(out))
    audit_s = 0.0
    checked = 0
    for manifest in read_manifests(folder):
        table = pq.read_table(folder.join(manifest.files[0]))
        t0 = time.perf_counter()
        recorder = ReferenceRecorder(manifest.shard_id, manifest.attempt_id)
        recorder.note(table, 0)
        audit = recorder.verify(folder, listed=manifest.asset_dirs)
        audit_s += time.perf_counter() - t0
        assert audit.ok and audit == manifest.reference_audit, (audit, manifest.reference_audit)
        checked += audit.checked
    share = audit_s / write_s
    print(
        f"write of {args.local_rows:,} rows ({checked:,} references) to local disk: "
        f"{write_s:.2f} s; its attempts' audits take {audit_s * 1000:.0f} ms of it "
        f"({share:.1%})"
    )
    return Result(
        workload="audit",
        case=f"write-time audit of {checked:,} references, local disk",
        refiner_s=audit_s,
        baseline="the whole write",
        baseline_s=write_s,
        target="<= 10% of the write",
        met=share <= 0.10,
        repeats=1,
        ratio=share,
        ratio_kind="fraction",
        extra={"references": checked},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--local-rows", type=int, default=20_000)
    parser.add_argument("--audit-shards", type=int, default=300)
    parser.add_argument(
        "--servers",
        choices=sorted(SERVER_LAYOUTS),
        default="processes",
        help="where moto and the latency proxy run (default: each in a process of its own)",
    )
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to skip: write, verify, full-audit"
    )
    add_json_option(parser)
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        f"servers: {SERVER_LAYOUTS[args.servers]}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as work:
        parts = {
            "write": write_audit_cost,
            "verify": parallel_verify,
            "full-audit": parallel_full_audit,
        }
        skipped = set(filter(None, args.skip.split(",")))
        results = [run(args, Path(work)) for name, run in parts.items() if name not in skipped]
    write_results(args.json, results)


if __name__ == "__main__":
    main()
