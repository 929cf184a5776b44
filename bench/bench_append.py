"""Benchmark: appending 1 % to a packed dataset against writing it again whole.

A dataset of ``--files`` media files of ``--file-kib`` KiB (16,000 x 16 KiB) is packed
once by the ``RefinerBlobIOManager`` and published (untimed). Then, in each of
``--repeat`` rounds, the two sides alternate on one Dagster instance, each one
``dg.materialize`` of the dataset asset and its finalization asset (write, audit,
publish), so both pay the same Dagster steps:

- **append**: ``refiner/mode: append`` with ``--append-percent`` (1 %) new files; before
  each round the pointer is rolled back to the packed dataset, so every append has the
  same 16,000-row parent;
- **rewrite**: the same 16,160 rows written whole into a second dataset.

Reported: the median time of each side and the ratio (target: the append >= 20x
faster), and the bytes each wrote (every file created or changed under the dataset
folder during the run; target: >= 50x fewer). Where data lands: a temporary folder,
deleted at the end::

    .venv/bin/python bench/bench_append.py --repeat 3
    .venv/bin/python bench/bench_append.py --repeat 3 --s3   # moto S3 behind 20 ms
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["DAGSTER_DISABLE_TELEMETRY"] = "1"

import boto3  # noqa: E402
import dagster as dg  # noqa: E402

import refiner_core as mdr  # noqa: E402
import refiner_dagster as rd  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from tests.s3_server import dummy_aws_env  # noqa: E402

SERVER = """
import sys
sys.path.insert(0, {root!r})
from tests.s3_server import S3Proxy, start_moto
moto = start_moto()
proxy = S3Proxy(moto.endpoint_url, latency_s={latency!r}).start()
print(proxy.endpoint_url, flush=True)
sys.stdin.read()
"""


def start_s3(latency_s: float) -> tuple[subprocess.Popen, dict]:
    """moto behind the latency proxy, in their own process; the storage options to reach it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(root=str(ROOT), latency=latency_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    endpoint = proc.stdout.readline().strip()
    options = {
        "key": "testing",
        "secret": "testing",
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
    }
    os.environ.update(dummy_aws_env())
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket="bench")
    return proc, options


def make_media(folder: Path, count: int, size: int) -> list[str]:
    folder.mkdir(parents=True)
    paths = []
    for i in range(count):
        path = folder / f"frame_{i:06d}.bin"
        path.write_bytes(os.urandom(size))
        paths.append(str(path))
    return paths


def dataset_asset(name: str, rows: list[dict], mode: str):
    metadata = {"refiner/mode": mode} if mode == "append" else {}

    @dg.asset(name=name, io_manager_key="refiner", metadata=metadata)
    def dataset() -> mdr.Pipeline:
        return mdr.from_items(
            rows, items_per_shard=1000, dtypes={"image": mdr.datatype.image_path()}
        )

    return [dataset, rd.build_finalization_asset(dataset)]


def empty_assets():
    """Two assets doing nothing, as the dataset and its finalization: Dagster's own cost."""

    @dg.asset(name="nothing")
    def nothing() -> None:
        return None

    @dg.asset(name="nothing_finalized", deps=[nothing])
    def nothing_finalized() -> None:
        return None

    return [nothing, nothing_finalized]


def snapshot(folder: mdr.DataFolder) -> dict[str, tuple[str, int]]:
    """Every file under ``folder``: its modification time and size."""
    found = {}
    try:
        listed = folder.fs.find(folder.path, detail=True)
    except FileNotFoundError:
        return {}
    for path, info in listed.items():
        stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag")
        found[path] = (str(stamp), int(info.get("size") or 0))
    return found


def bytes_written(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]) -> int:
    return sum(size for path, (mtime, size) in after.items() if before.get(path) != (mtime, size))


def timed(instance, assets, resources, folder: mdr.DataFolder) -> tuple[float, int]:
    before = snapshot(folder)
    start = time.perf_counter()
    result = dg.materialize(assets, instance=instance, resources=resources)
    seconds = time.perf_counter() - start
    assert result.success
    return seconds, bytes_written(before, snapshot(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=16_000)
    parser.add_argument("--file-kib", type=int, default=16)
    parser.add_argument("--append-percent", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--s3", action="store_true", help="write to moto S3 behind --latency-ms")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    add_json_option(parser)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="refiner-bench-append-"))
    server: subprocess.Popen | None = None
    try:
        new = max(1, round(args.files * args.append_percent / 100))
        paths = make_media(work / "media", args.files + new, args.file_kib * 1024)
        rows = [{"i": i, "image": p} for i, p in enumerate(paths)]
        options: dict = {}
        base_url = str(work / "out")
        if args.s3:
            server, options = start_s3(args.latency_ms / 1000)
            base_url = "s3://bench/out"
        resources = {
            "refiner": rd.RefinerBlobIOManager(
                base_url=base_url, storage_options=options, num_workers=args.workers
            )
        }
        storage = rd.DatasetStorage(base_url, options)
        load = os.getloadavg()[0]
        (work / "home").mkdir()
        with dg.instance_for_test(temp_dir=str(work / "home")) as instance:
            base = rows[: args.files]
            dg.materialize(
                dataset_asset("grown", base, "overwrite"), instance=instance, resources=resources
            )
            grown = storage.partition_folder(["grown"], None)
            rewritten = storage.partition_folder(["rewritten"], None)
            parent = storage.current(["grown"], None).name
            appended = dataset_asset("grown", rows[args.files :], "append")
            whole = dataset_asset("rewritten", rows, "overwrite")
            times: dict[str, list[float]] = {"append": [], "rewrite": [], "floor": []}
            written: dict[str, list[int]] = {"append": [], "rewrite": []}
            for _ in range(args.repeat):
                if storage.current(["grown"], None).name != parent:
                    mdr.io.rollback(grown, to=parent, reason="bench")
                seconds, size = timed(instance, appended, resources, grown)
                times["append"].append(seconds)
                written["append"].append(size)
                seconds, size = timed(instance, whole, resources, rewritten)
                times["rewrite"].append(seconds)
                written["rewrite"].append(size)
                start = time.perf_counter()
                assert dg.materialize(empty_assets(), instance=instance).success
                times["floor"].append(time.perf_counter() - start)
            rows_read = len(list(mdr.read_parquet(grown.url, storage_options=options).iter_rows()))
            assert rows_read == args.files + new, rows_read
        load_end = os.getloadavg()[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None:
            server.kill()

    append_s = statistics.median(times["append"])
    rewrite_s = statistics.median(times["rewrite"])
    append_b = statistics.median(written["append"])
    rewrite_b = statistics.median(written["rewrite"])
    floor_s = statistics.median(times["floor"])
    speedup = rewrite_s / append_s
    beyond = (rewrite_s - floor_s) / max(1e-9, append_s - floor_s)
    fewer = rewrite_b / max(1, append_b)
    where = f"moto S3, {args.latency_ms:g} ms" if args.s3 else "local disk"
    case = f"append {new:,} to {args.files:,} x {args.file_kib} KiB packed, {where}"
    print(
        f"{case}, {args.workers} workers, median of {args.repeat}, load {load:.1f} -> {load_end:.1f}"
    )
    print(
        f"  append   {append_s:7.2f} s  {append_b / 2**20:9.2f} MiB written  runs {times['append']}"
    )
    print(
        f"  rewrite  {rewrite_s:7.2f} s  {rewrite_b / 2**20:9.2f} MiB written  runs {times['rewrite']}"
    )
    print(f"  Dagster's own cost of the two steps (empty assets): {floor_s:.2f} s")
    print(
        f"  time:  append is {speedup:.1f}x faster (target >= 20x); "
        f"{beyond:.1f}x beyond Dagster's own cost"
    )
    print(f"  bytes: append writes {fewer:.1f}x fewer (target >= 50x)")
    write_results(
        args.json,
        [
            Result(
                workload="append",
                case=f"{case}: time",
                refiner_s=append_s,
                baseline="the same rows written whole (IO manager + finalization)",
                baseline_s=rewrite_s,
                target=">= 20x faster",
                met=speedup >= 20,
                repeats=args.repeat,
                ratio=speedup,
                ratio_kind="speedup",
                extra={
                    "load_start": load,
                    "load_end": load_end,
                    "dagster_floor_s": floor_s,
                    "speedup_beyond_floor": round(beyond, 2),
                },
            ),
            Result(
                workload="append",
                case=f"{case}: bytes written",
                refiner_s=None if append_b is None else float(append_b),
                baseline="bytes written by the rewrite",
                baseline_s=float(rewrite_b),
                target=">= 50x fewer",
                met=fewer >= 50,
                repeats=args.repeat,
                ratio=fewer,
                ratio_kind="value",
                extra={"unit": "bytes"},
            ),
        ],
    )


if __name__ == "__main__":
    main()
