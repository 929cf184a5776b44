"""Benchmark: one source-sensor tick after 100 new files land among many existing ones.

For each size (existing files) and store (local folder, moto S3 behind the recording
proxy), a first tick takes in the existing files, 100 new files land (names after the
existing ones), and the second tick is measured: its time, peak Python memory
(tracemalloc), cursor bytes and LIST requests (S3). Both sensors run: the baseline
lists the whole folder every tick (``names_ordered=False``), the other resumes after
the last name seen (``names_ordered=True``)::

    python bench/bench_sensor.py                      # 10,000 and 100,000 files
    python bench/bench_sensor.py --sizes 10000 --stores local
    python bench/bench_sensor.py --million            # adds 1,000,000 (each store)
    python bench/bench_sensor.py --sizes 0 --million --stores s3 --sensors ordered
    python bench/bench_sensor.py --sizes 0 --million --sensors ordered  # 1,000,000 only

Existing S3 objects are put straight into the in-process moto store (100,000 PUTs over
HTTP would take about 20 minutes on moto); every listing goes over HTTP. Target: the
ordered tick reads one LIST page and takes under 1 s at every size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402
import s3fs  # noqa: E402

from refiner_dagster.sensors import build_source_sensor  # noqa: E402
from tests.s3_server import S3Proxy, dummy_aws_env, start_moto  # noqa: E402

NEW = 100
SEEDED_FIRST_TICK = 1_000_000


@dg.asset
def refreshed() -> None:
    """The asset the sensor's runs target."""


def _name(i: int) -> str:
    return f"day{i // 1000:04d}/f{i:07d}.parquet"


def _tick(sensor: dg.SensorDefinition, cursor: str | None) -> tuple[str, int, float, int]:
    tracemalloc.start()
    started = time.perf_counter()
    result = sensor(dg.build_sensor_context(cursor=cursor))
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result.cursor, len(result.run_requests or []), elapsed, peak


def _measure(
    url: str, options: dict, ordered: bool, existing: int, add_new, proxy, after_first_tick=None
) -> dict:
    sensor = build_source_sensor(
        name="bench",
        url=url,
        target=[refreshed],
        storage_options=options,
        max_files_per_tick=existing + NEW,
        names_ordered=ordered,
    )
    cursor, first, _, _ = _tick(sensor, None)
    assert first == existing, (first, existing)
    if after_first_tick is not None:
        after_first_tick()
    add_new()
    if proxy is not None:
        proxy.clear()
    cursor, found, elapsed, peak = _tick(sensor, cursor)
    assert found == NEW, found
    return {
        "tick_s": round(elapsed, 3),
        "peak_mib": round(peak / 2**20, 1),
        "cursor_bytes": len(cursor.encode()),
        "list_requests": len(proxy.records("ListObjects")) if proxy is not None else None,
    }


def bench_local(existing: int, ordered: bool, new_from: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench-sensor-"))
    try:
        for i in range(existing):
            path = root / _name(i)
            if i % 1000 == 0:
                path.parent.mkdir()
            path.write_bytes(b"x")

        def add_new() -> None:
            for i in range(new_from, new_from + NEW):
                (root / _name(i)).parent.mkdir(exist_ok=True)
                (root / _name(i)).write_bytes(b"x")

        return _measure(str(root), {}, ordered, existing, add_new, None)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_s3(moto, existing: int, ordered: bool, new_from: int) -> dict:
    """One tick on moto S3. From ``SEEDED_FIRST_TICK`` existing objects up, the ordered
    sensor's first tick runs while only the last existing name is in the bucket and the
    others are put in after it (they sort before it, so the cursor is the one a first tick
    over all of them leaves): moto answers each LIST page in time proportional to the whole
    bucket, so a real first tick over 1,000,000 objects would take 1,000 such pages."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    bucket = moto.create_bucket("bench-sensor")
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    seeded = ordered and existing >= SEEDED_FIRST_TICK
    last = existing - 1

    def put_existing(indices) -> None:
        for i in indices:
            backend.put_object(bucket, "drops/" + _name(i), b"x")

    put_existing([last] if seeded else range(existing))
    try:
        with S3Proxy(moto.endpoint_url) as proxy:
            s3fs.S3FileSystem.clear_instance_cache()
            options = proxy.storage_options()
            fs = s3fs.S3FileSystem(**moto.storage_options(), skip_instance_cache=True)

            def after_first_tick() -> None:
                if seeded:
                    put_existing(range(last))

            def add_new() -> None:
                fs.pipe(
                    {f"{bucket}/drops/{_name(i)}": b"x" for i in range(new_from, new_from + NEW)}
                )

            record = _measure(
                f"s3://{bucket}/drops",
                options,
                ordered,
                1 if seeded else existing,
                add_new,
                proxy,
                after_first_tick=after_first_tick,
            )
            record["first_tick"] = "seeded" if seeded else "listed"
            record["moto_list_s"] = _one_list(moto, bucket, f"drops/{_name(last)}")
            return record
    finally:
        for key in list(backend.get_bucket(bucket).keys.keys()):
            backend.delete_object(bucket, key)
        moto.client().delete_bucket(Bucket=bucket)


def _one_list(moto, bucket: str, start_after: str) -> float:
    """moto's own time for the one LIST page the ordered tick needs (no proxy)."""
    client = moto.client()
    started = time.perf_counter()
    client.list_objects_v2(Bucket=bucket, Prefix="drops/", StartAfter=start_after, MaxKeys=1000)
    return round(time.perf_counter() - started, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="existing files, comma-separated")
    parser.add_argument("--stores", default="local,s3", help="local, s3 or both")
    parser.add_argument(
        "--million", action="store_true", help="also 1,000,000 files, in each of --stores"
    )
    parser.add_argument(
        "--sensors",
        default="full,ordered",
        help="full (the whole listing every tick), ordered (names_ordered) or both",
    )
    parser.add_argument("--json", help="write the records to this file")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if int(s) > 0]
    stores = args.stores.split(",")
    os.environ.update(dummy_aws_env())
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    moto = start_moto() if "s3" in stores else None
    records = []
    cases = [(s, n) for s in stores for n in sizes] + (
        [(s, 1_000_000) for s in stores] if args.million else []
    )
    print(
        "| store | existing | sensor | tick s | peak MiB | cursor bytes | LIST requests "
        "| moto's one LIST s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for store, existing in cases:
        modes = [m == "ordered" for m in ("full", "ordered") if m in args.sensors.split(",")]
        for ordered in modes:
            run = bench_local if store == "local" else lambda *a: bench_s3(moto, *a)
            record = {"store": store, "existing": existing, "ordered": ordered}
            record.update(run(existing, ordered, existing))
            records.append(record)
            mode = "names_ordered" if ordered else "full listing"
            print(
                f"| {store} | {existing:,} | {mode} | {record['tick_s']} | {record['peak_mib']} "
                f"| {record['cursor_bytes']:,} | {record['list_requests'] or '-'} "
                f"| {record.get('moto_list_s', '-')} |",
                flush=True,
            )
    if moto is not None:
        moto.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
