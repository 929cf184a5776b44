"""Benchmark: one large streaming upload: refiner's part window, stock s3fs and s3transfer.

Starts a local moto S3 behind a proxy that adds latency and caps each connection's
upload bandwidth, then uploads the same bytes with stock s3fs and with
``refiner_core.io.s3_multipart.install()`` active, each in a fresh process, the two
sides alternating, and prints the medians of two phases for both, their ratio and the
peak memory of ours::

    python bench/bench_s3_upload.py --size-mib 1024 --repeat 3 [--json results.json]

- **part-upload phase**: from the first ``write`` to the moment the last UploadPart
  returns, before CompleteMultipartUpload. Both sides are timed the same way: a
  botocore ``after-call.s3.UploadPart`` hook on the s3fs client, in the writing
  process, stamps each part's answer, and the last stamp ends the phase.
- **end to end**: from the first ``write`` until the file's ``close`` returns. It
  includes moto's CompleteMultipartUpload, which assembles the object in the server
  (printed separately as the server's time). It is not the same work for both: stock
  s3fs creates its uploads without a checksum algorithm, so moto copies the whole
  object once more to checksum it; refiner declares the CRC32 its parts carry, so
  moto combines the parts' checksums.

The same run then compares refiner with boto3's ``s3transfer`` (``upload_fileobj`` with
a ``TransferConfig``, the tool most users would pick), each side streaming the same
bytes from a non-seekable reader, through the same proxy, end to end:

- **defaults**: refiner at s3fs's 50 MiB block with its 4 parts in flight; s3transfer
  at its own defaults (8 MiB parts, 10 threads);
- **same parts and connections**: both at 8 MiB parts and 4 connections
  (``default_block_size=8 * 2**20`` on s3fs; ``TransferConfig(multipart_chunksize=8 MiB,
  max_concurrency=4)``). Target: refiner at least as fast (>= 1.0x).

End to end includes moto's CompleteMultipartUpload. Both sides create their uploads
with ``ChecksumAlgorithm=CRC32`` and name each part's CRC32 on Complete (s3transfer does
so whenever botocore's ``request_checksum_calculation`` is ``when_supported``, its
default; refiner likewise), so moto combines the parts' checksums for both. The table
also gives each side's Complete and the ratio without it (the client's share).

``--compare-mib`` sets that object's size (128 MiB); ``--big`` adds 1 GiB. moto keeps
objects in memory (a 200 MiB upload peaked at 1.4 GB), so 1 GiB needs several GB free.

Objects are deleted between runs because moto keeps every byte in memory.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.io.s3_multipart import WINDOW_PARTS  # noqa: E402  (installs nothing)
from tests.s3_server import (  # noqa: E402
    MotoS3,
    S3Proxy,
    dummy_aws_env,
    max_in_flight,
    start_moto,
)

MIB = 2**20
WRITE_CHUNK = 8 * MIB
PART_PHASE_TARGET = 3.3
SAME_SETUP_TARGET = 1.0
# (case, refiner's block MiB, s3transfer's part MiB and threads; None: its defaults)
COMPARISONS = (
    ("defaults", 50, None, None),
    ("same parts and connections", 8, 8, WINDOW_PARTS),  # refiner's parts in flight
)


class _Stream(io.RawIOBase):
    """``size`` bytes from a repeated chunk, readable once and not seekable."""

    def __init__(self, chunk: bytes, size: int) -> None:
        self._chunk, self._left = memoryview(chunk), size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        take = min(len(buffer), len(self._chunk), self._left)
        buffer[:take] = self._chunk[:take]
        self._left -= take
        return take


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def upload_once(
    mode: str, endpoint_url: str, path: str, size: int, block_size: int, threads: int | None
) -> dict:
    """Run in a child process: stream ``size`` bytes to ``path`` and time both phases."""
    chunk = os.urandom(WRITE_CHUNK)
    if mode == "s3transfer":
        client, send = _s3transfer_sender(endpoint_url, path, size, block_size, threads, chunk)
    else:
        client, send = _s3fs_sender(mode, endpoint_url, path, size, block_size, chunk)
    part_answers: list[float] = []
    client.meta.events.register(
        "after-call.s3.UploadPart", lambda **_: part_answers.append(time.perf_counter())
    )
    baseline = _rss_bytes()
    cpu = time.process_time()
    started = time.perf_counter()
    kind = send()
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "seconds": seconds,
        "part_phase": max(part_answers, default=started + seconds) - started,
        "parts_answered": len(part_answers),
        "cpu_s": cpu,
        "baseline_rss": baseline,
        "peak_rss": peak,
        "file": kind,
    }


def _s3fs_sender(
    mode: str, endpoint_url: str, path: str, size: int, block_size: int, chunk: bytes
) -> tuple[Any, Any]:
    import s3fs

    from tests.s3_server import storage_options

    if mode == "ours":
        from refiner_core.io.s3_multipart import install

        install()
    # moto concatenates a GiB-sized object slowly on Complete; wait for it, never retry it.
    options = storage_options(endpoint_url, config_kwargs={"read_timeout": 900})
    fs = s3fs.S3FileSystem(default_block_size=block_size, **options)
    fs.ls(path.split("/")[0])  # open the session, its client and a connection before timing

    def send() -> str:
        with fs.open(path, "wb") as f:
            for offset in range(0, size, WRITE_CHUNK):
                f.write(chunk[: min(WRITE_CHUNK, size - offset)])
        return type(f).__name__

    return fs.s3, send


def _s3transfer_sender(
    endpoint_url: str, path: str, size: int, part: int, threads: int | None, chunk: bytes
) -> tuple[Any, Any]:
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    from tests.s3_server import DUMMY_KEY, DUMMY_SECRET, REGION

    config = (
        TransferConfig()
        if threads is None
        else (TransferConfig(multipart_chunksize=part, max_concurrency=threads))
    )
    client = boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=DUMMY_KEY,
        aws_secret_access_key=DUMMY_SECRET,
        region_name=REGION,
        config=Config(read_timeout=900, max_pool_connections=max(10, config.max_concurrency)),
    )
    bucket, _, key = path.partition("/")
    client.list_objects_v2(Bucket=bucket, MaxKeys=1)  # a connection open before timing

    def send() -> str:
        client.upload_fileobj(_Stream(chunk, size), bucket, key, Config=config)
        mib = config.multipart_chunksize / MIB
        return f"s3transfer {mib:g} MiB x {config.max_concurrency} threads"

    return client, send


def serve_moto() -> None:
    """Run in a child process: serve moto until stdin closes (own GIL, own CPU)."""
    moto = start_moto()
    print(moto.endpoint_url, flush=True)
    sys.stdin.read()
    moto.stop()


def _start_moto_process() -> tuple[subprocess.Popen, MotoS3]:
    # Keep objects in RAM rather than spilling each one to a temporary file.
    env = {**os.environ, **dummy_aws_env(), "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(2**40)}
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-moto"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    endpoint_url = process.stdout.readline().strip()
    if not endpoint_url.startswith("http://"):
        process.kill()
        raise RuntimeError("moto server process did not start")
    return process, MotoS3(server=None, endpoint_url=endpoint_url)  # type: ignore[arg-type]


def _run_child(
    mode: str,
    endpoint_url: str,
    path: str,
    size_mib: int,
    block_mib: int,
    threads: int | None = None,
) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--endpoint",
        endpoint_url,
        "--path",
        path,
        "--size-mib",
        str(size_mib),
        "--block-mib",
        str(block_mib),
        *(["--threads", str(threads)] if threads else []),
    ]
    env = {**os.environ, **dummy_aws_env()}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} upload failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure(
    mode: str,
    moto: MotoS3,
    bucket: str,
    proxy: S3Proxy,
    size_mib: int,
    block_mib: int,
    threads: int | None = None,
) -> dict[str, Any]:
    """One upload in a fresh process, with what the proxy saw of it; the bucket is emptied."""
    proxy.clear()
    out = _run_child(mode, proxy.endpoint_url, f"{bucket}/bench.bin", size_mib, block_mib, threads)
    parts = proxy.records("UploadPart")
    out["parts"] = len(parts)
    out["peak_in_flight"] = max_in_flight(parts, "UploadPart")
    out["complete"] = sum(r.end - r.start for r in proxy.records("CompleteMultipartUpload"))
    # as the proxy saw them: how long a part took, and how soon the first one came
    out["part_median"] = statistics.median([r.end - r.start for r in parts] or [0.0])
    creates = proxy.records("CreateMultipartUpload")
    out["first_part_after_create"] = (
        min(r.start for r in parts) - creates[0].end if parts and creates else 0.0
    )
    out["client"] = out["seconds"] - out["complete"]
    moto.empty_bucket(bucket)
    return out


def _median(runs: list[dict[str, Any]], field: str) -> float:
    return statistics.median(r[field] for r in runs)


def _stock_against_ours(
    moto: MotoS3, bucket: str, proxy: S3Proxy, args: argparse.Namespace
) -> list[Result]:
    results: dict[str, list[dict[str, Any]]] = {"stock": [], "ours": []}
    for run in range(args.repeat):
        # alternate which side goes first, so a drift in machine load hits both
        for mode in ("stock", "ours") if run % 2 == 0 else ("ours", "stock"):
            out = _measure(mode, moto, bucket, proxy, args.size_mib, args.block_mib)
            results[mode].append(out)
            print(
                f"run {run + 1} {mode:5s} part-upload phase {out['part_phase']:6.2f} s  "
                f"end to end {out['seconds']:6.2f} s (moto's Complete {out['complete']:5.2f} s)"
                f"  parts={out['parts']:3d} in flight<={out['peak_in_flight']}  "
                f"peak RSS {out['peak_rss'] / MIB:5.0f} MiB",
                flush=True,
            )

    def median(mode: str, field: str) -> float:
        return _median(results[mode], field)

    stock_parts, ours_parts = median("stock", "part_phase"), median("ours", "part_phase")
    stock_total, ours_total = median("stock", "seconds"), median("ours", "seconds")
    peak = max(r["peak_rss"] for r in results["ours"])
    growth = max(r["peak_rss"] - r["baseline_rss"] for r in results["ours"])
    part_ratio, total_ratio = stock_parts / ours_parts, stock_total / ours_total
    print(
        f"\n{args.size_mib} MiB, part {args.block_mib} MiB, +{args.latency_ms:g} ms/request, "
        f"{args.bandwidth_mbps:g} MB/s per connection, median of {args.repeat}, "
        "each run a fresh process\n"
    )
    print(f"{'phase':30s} {'stock s3fs':>11s} {'ours':>8s} {'stock/ours':>11s}  target")
    met = part_ratio >= PART_PHASE_TARGET
    print(
        f"{'part-upload phase':30s} {stock_parts:9.2f} s {ours_parts:6.2f} s {part_ratio:10.2f}x"
        f"  >= {PART_PHASE_TARGET}x ({'met' if met else 'NOT met'})"
    )
    print(
        f"{'end to end':30s} {stock_total:9.2f} s {ours_total:6.2f} s {total_ratio:10.2f}x"
        "  (reported)"
    )
    stock_complete, ours_complete = median("stock", "complete"), median("ours", "complete")
    print(
        f"{'  of which moto Complete':30s} {stock_complete:9.2f} s {ours_complete:6.2f} s"
        "              (the server's time; stock s3fs's includes a whole-object checksum)"
    )
    print(
        f"\nours peak RSS {peak / MIB:.0f} MiB (+{growth / MIB:.0f} MiB during the upload; "
        f"4 parts in flight + 1 filling = {5 * args.block_mib} MiB)"
    )
    common = {**_conditions(args), "size_mib": args.size_mib, "part_mib": args.block_mib}
    return [
        Result(
            workload="s3_upload",
            case="part-upload phase",
            refiner_s=ours_parts,
            baseline="stock s3fs",
            baseline_s=stock_parts,
            target=f">= {PART_PHASE_TARGET}x",
            met=met,
            repeats=args.repeat,
            ratio_kind="speedup",
            extra={**common, "peak_rss_mib": round(peak / MIB)},
        ),
        Result(
            workload="s3_upload",
            case="end to end",
            refiner_s=ours_total,
            baseline="stock s3fs",
            baseline_s=stock_total,
            target="reported",
            met=None,
            repeats=args.repeat,
            ratio_kind="speedup",
            extra={
                **common,
                "moto_complete_stock_s": round(stock_complete, 3),
                "moto_complete_ours_s": round(ours_complete, 3),
            },
        ),
    ]


def _conditions(args: argparse.Namespace) -> dict[str, float]:
    return {
        "latency_ms": args.latency_ms,
        "bandwidth_mb_s_per_connection": args.bandwidth_mbps,
    }


def _ours_against_s3transfer(
    moto: MotoS3, bucket: str, proxy: S3Proxy, args: argparse.Namespace, size_mib: int
) -> list[Result]:
    """Both comparison cases for one object size, the sides alternating in every repeat."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in range(args.repeat):
        for case, block_mib, part_mib, threads in COMPARISONS:
            sides = [
                ("refiner", "ours", block_mib, None),
                ("s3transfer", "s3transfer", part_mib or 8, threads),
            ]
            for side, mode, mib, count in sides if run % 2 == 0 else sides[::-1]:
                out = _measure(mode, moto, bucket, proxy, size_mib, mib, count)
                runs.setdefault((case, side), []).append(out)
                print(
                    f"{size_mib} MiB, {case:26s} run {run + 1} {side:10s} "
                    f"end to end {out['seconds']:6.2f} s  part phase {out['part_phase']:6.2f} s"
                    f"  client CPU {out['cpu_s']:5.2f} s"
                    f"  (moto's Complete {out['complete']:4.2f} s)  parts={out['parts']:3d}"
                    f" in flight<={out['peak_in_flight']:2d}, each {out['part_median']:4.2f} s,"
                    f" first {out['first_part_after_create'] * 1000:3.0f} ms after Create"
                    f"  ({out['file']})",
                    flush=True,
                )
    print(
        f"\n{size_mib} MiB against s3transfer, median of {args.repeat}; ratio = s3transfer's "
        "time / refiner's (>= 1: refiner as fast or faster). End to end runs from the first "
        "byte to Complete's answer; moto's Complete is the server's share of it, and the "
        "client's share is the rest\n"
    )
    print(
        f"{'case':28s} {'refiner':>9s} {'s3transfer':>11s} {'ratio':>7s}  target"
        f"{'':13s}{'moto Complete':>17s} {'without it':>11s}  in flight"
    )
    results = []
    for case, block_mib, _part_mib, threads in COMPARISONS:
        ours, theirs = runs[(case, "refiner")], runs[(case, "s3transfer")]
        ours_s, theirs_s = _median(ours, "seconds"), _median(theirs, "seconds")
        ratio = theirs_s / ours_s
        same = threads is not None
        met = ratio >= SAME_SETUP_TARGET if same else None
        target = f">= {SAME_SETUP_TARGET}x" if same else "reported"
        verdict = "" if met is None else (" (met)" if met else " (NOT met)")
        flight = (
            f"{max(r['peak_in_flight'] for r in ours)} / {max(r['peak_in_flight'] for r in theirs)}"
        )
        ours_complete, theirs_complete = _median(ours, "complete"), _median(theirs, "complete")
        client_ratio = _median(theirs, "client") / _median(ours, "client")
        print(
            f"{case:28s} {ours_s:7.2f} s {theirs_s:9.2f} s {ratio:6.2f}x  "
            f"{target + verdict:18s} {ours_complete:5.2f} / {theirs_complete:4.2f} s "
            f"{client_ratio:10.2f}x  {flight}"
        )
        results.append(
            Result(
                workload="s3_upload",
                case=f"{size_mib} MiB vs s3transfer, {case}",
                refiner_s=ours_s,
                baseline=theirs[0]["file"],
                baseline_s=theirs_s,
                target=target,
                met=met,
                repeats=args.repeat,
                ratio_kind="speedup",
                extra={
                    **_conditions(args),
                    "size_mib": size_mib,
                    "refiner_part_mib": block_mib,
                    "refiner_part_phase_s": round(_median(ours, "part_phase"), 3),
                    "s3transfer_part_phase_s": round(_median(theirs, "part_phase"), 3),
                    "refiner_client_cpu_s": round(_median(ours, "cpu_s"), 3),
                    "s3transfer_client_cpu_s": round(_median(theirs, "cpu_s"), 3),
                    "moto_complete_refiner_s": round(ours_complete, 3),
                    "moto_complete_s3transfer_s": round(theirs_complete, 3),
                    "ratio_without_moto_complete": round(client_ratio, 3),
                    "refiner_part_median_s": round(_median(ours, "part_median"), 3),
                    "s3transfer_part_median_s": round(_median(theirs, "part_median"), 3),
                },
            )
        )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="bytes uploaded per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; medians reported")
    parser.add_argument("--block-mib", type=int, default=50, help="s3fs block (part) size")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added per request")
    parser.add_argument("--bandwidth-mbps", type=float, default=50.0, help="MB/s per connection")
    parser.add_argument(
        "--compare-mib", type=int, default=128, help="object size against s3transfer (0: skip)"
    )
    parser.add_argument(
        "--big", action="store_true", help="also compare at 1 GiB (moto holds it in memory)"
    )
    parser.add_argument("--no-stock", action="store_true", help="skip the stock s3fs comparison")
    add_json_option(parser)
    parser.add_argument("--child", choices=["stock", "ours", "s3transfer"], help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-moto", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve_moto:
        serve_moto()
        return
    if args.child:
        result = upload_once(
            args.child,
            args.endpoint,
            args.path,
            args.size_mib * MIB,
            args.block_mib * MIB,
            args.threads,
        )
        print(json.dumps(result))
        return

    os.environ.update(dummy_aws_env())
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work skews timings)"
    )
    moto_process, moto = _start_moto_process()
    bucket = moto.create_bucket("bench")
    proxy = S3Proxy(
        moto.endpoint_url,
        latency_s=args.latency_ms / 1000,
        bandwidth_bps=args.bandwidth_mbps * 1e6,
    ).start()
    results: list[Result] = []
    try:
        if not args.no_stock:
            results += _stock_against_ours(moto, bucket, proxy, args)
        sizes = [args.compare_mib] if args.compare_mib else []
        for size_mib in sizes + ([1024] if args.big else []):
            print()
            results += _ours_against_s3transfer(moto, bucket, proxy, args, size_mib)
    finally:
        proxy.stop()
        moto.delete_bucket(bucket)
        moto_process.communicate(timeout=60)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    write_results(args.json, results)


if __name__ == "__main__":
    main()
