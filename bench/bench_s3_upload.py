"""Benchmark: one large s3fs streaming upload, stock s3fs versus refiner's part window.

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
  and costs both sides the same (printed separately as the server's time).

Objects are deleted between runs because moto keeps every byte in memory.
"""

from __future__ import annotations

import argparse
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


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def upload_once(mode: str, endpoint_url: str, path: str, size: int, block_size: int) -> dict:
    """Run in a child process: stream ``size`` bytes to ``path`` and time both phases."""
    import s3fs

    from tests.s3_server import storage_options

    if mode == "ours":
        from refiner_core.io.s3_multipart import install

        install()
    # moto concatenates a GiB-sized object slowly on Complete; wait for it, never retry it.
    options = storage_options(endpoint_url, config_kwargs={"read_timeout": 900})
    fs = s3fs.S3FileSystem(default_block_size=block_size, **options)
    chunk = os.urandom(WRITE_CHUNK)
    fs.ls(path.split("/")[0])  # open the session, its client and a connection before timing
    part_answers: list[float] = []
    fs.s3.meta.events.register(
        "after-call.s3.UploadPart", lambda **_: part_answers.append(time.perf_counter())
    )
    baseline = _rss_bytes()
    started = time.perf_counter()
    with fs.open(path, "wb") as f:
        for offset in range(0, size, WRITE_CHUNK):
            f.write(chunk[: min(WRITE_CHUNK, size - offset)])
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "seconds": seconds,
        "part_phase": max(part_answers) - started,
        "parts_answered": len(part_answers),
        "baseline_rss": baseline,
        "peak_rss": peak,
        "file": type(f).__name__,
    }


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


def _run_child(mode: str, endpoint_url: str, path: str, args: argparse.Namespace) -> dict:
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
        str(args.size_mib),
        "--block-mib",
        str(args.block_mib),
    ]
    env = {**os.environ, **dummy_aws_env()}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} upload failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="bytes uploaded per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; medians reported")
    parser.add_argument("--block-mib", type=int, default=50, help="s3fs block (part) size")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added per request")
    parser.add_argument("--bandwidth-mbps", type=float, default=50.0, help="MB/s per connection")
    add_json_option(parser)
    parser.add_argument("--child", choices=["stock", "ours"], help=argparse.SUPPRESS)
    parser.add_argument("--serve-moto", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve_moto:
        serve_moto()
        return
    if args.child:
        result = upload_once(
            args.child, args.endpoint, args.path, args.size_mib * MIB, args.block_mib * MIB
        )
        print(json.dumps(result))
        return

    os.environ.update(dummy_aws_env())
    moto_process, moto = _start_moto_process()
    bucket = moto.create_bucket("bench")
    proxy = S3Proxy(
        moto.endpoint_url,
        latency_s=args.latency_ms / 1000,
        bandwidth_bps=args.bandwidth_mbps * 1e6,
    ).start()
    results: dict[str, list[dict[str, Any]]] = {"stock": [], "ours": []}
    try:
        for run in range(args.repeat):
            # alternate which side goes first, so a drift in machine load hits both
            for mode in ("stock", "ours") if run % 2 == 0 else ("ours", "stock"):
                proxy.clear()
                out = _run_child(mode, proxy.endpoint_url, f"{bucket}/bench-{run}.bin", args)
                parts = proxy.records("UploadPart")
                out["parts"] = len(parts)
                out["peak_in_flight"] = max_in_flight(parts, "UploadPart")
                out["complete"] = sum(
                    r.end - r.start for r in proxy.records("CompleteMultipartUpload")
                )
                moto.empty_bucket(bucket)
                results[mode].append(out)
                print(
                    f"run {run + 1} {mode:5s} part-upload phase {out['part_phase']:6.2f} s  "
                    f"end to end {out['seconds']:6.2f} s (moto's Complete {out['complete']:5.2f} s)"
                    f"  parts={out['parts']:3d} in flight<={out['peak_in_flight']}  "
                    f"peak RSS {out['peak_rss'] / MIB:5.0f} MiB",
                    flush=True,
                )
    finally:
        proxy.stop()
        moto.delete_bucket(bucket)
        moto_process.communicate(timeout=60)

    def median(mode: str, field: str) -> float:
        return statistics.median(r[field] for r in results[mode])

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
        "              (the server's time, the same work for both)"
    )
    print(
        f"\nours peak RSS {peak / MIB:.0f} MiB (+{growth / MIB:.0f} MiB during the upload; "
        f"4 parts in flight + 1 filling = {5 * args.block_mib} MiB)"
    )
    common = {
        "size_mib": args.size_mib,
        "part_mib": args.block_mib,
        "latency_ms": args.latency_ms,
        "bandwidth_mb_s_per_connection": args.bandwidth_mbps,
    }
    write_results(
        args.json,
        [
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
        ],
    )


if __name__ == "__main__":
    main()
