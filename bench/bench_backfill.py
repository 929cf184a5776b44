"""Benchmark: a single-run backfill of a daily fan-out dataset against one run per day.

The same dataset (``--partitions`` daily partitions of ``--rows`` rows each, a small
media file per row, packed into blocks) is materialized on a real Dagster instance
(SQLite, temporary DAGSTER_HOME) with the multiprocess executor, twice:

1. one run over the whole range (``backfill_policy=dg.BackfillPolicy.single_run()``):
   one plan step plans every day, 4 write steps share their shards, one finalize step
   publishes each day's version;
2. one run per day (the default policy): plan -> up to 4 write steps -> finalize, per day.

It prints both wall times and the ratio (one run per day / single run). There is no
target: the difference is Dagster's per-run and per-step cost, paid once instead of
once per partition.

Run from the repository root::

    .venv/bin/python bench/bench_backfill.py --partitions 30
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

import dagster as dg  # noqa: E402

import refiner_core as mdr  # noqa: E402
import refiner_dagster as rd  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402

MEDIA_ENV = "REFINER_BENCH_BACKFILL_MEDIA"
ROWS_ENV = "REFINER_BENCH_BACKFILL_ROWS"
BASE_ENV = "REFINER_BENCH_BACKFILL_BASE"
START = "2024-01-01"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"

DAILY = dg.DailyPartitionsDefinition(start_date=START, end_date="2025-01-01")


def pipeline(context) -> mdr.Pipeline:
    """``ROWS`` rows of the partition's day, in 2 shards, each pointing at a media file."""
    media, rows = os.environ[MEDIA_ENV], int(os.environ[ROWS_ENV])
    day = context.partition_key
    items = [
        {"day": day, "i": i, "image": os.path.join(media, f"{i % 16:03d}.bin")} for i in range(rows)
    ]
    return mdr.from_items(
        items, items_per_shard=-(-rows // 2), dtypes={"image": mdr.datatype.image_path()}
    )


single = rd.build_dataset_asset(
    pipeline,
    name="single",
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    max_tasks=4,
)
per_day = rd.build_dataset_asset(pipeline, name="per_day", partitions_def=DAILY, max_tasks=4)
EXECUTOR = dg.multiprocess_executor.configured(
    {"max_concurrent": 4, "start_method": {"forkserver": {"preload_modules": [__name__]}}}
)


def _defs() -> dg.Definitions:
    return dg.Definitions(
        assets=[single, per_day],
        jobs=[
            dg.define_asset_job("single_job", selection=[single], executor_def=EXECUTOR),
            dg.define_asset_job("per_day_job", selection=[per_day], executor_def=EXECUTOR),
        ],
        resources={"refiner": rd.RefinerBlobIOManager(base_url=os.environ[BASE_ENV])},
    )


def single_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("single_job")


def per_day_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("per_day_job")


def _run(job_fn, instance: dg.DagsterInstance, tags: dict[str, str]) -> None:
    with dg.execute_job(dg.reconstructable(job_fn), instance=instance, tags=tags) as result:
        if not result.success:
            raise RuntimeError(f"{job_fn.__name__} {tags} failed")


def _check_published(name: str, days: list[str], rows: int) -> None:
    storage = rd.RefinerBlobIOManager(base_url=os.environ[BASE_ENV]).storage()
    for day in days:
        version = storage.current([name], day)
        if version is None or version.summary().rows_written != rows:
            raise RuntimeError(f"{name} {day} is not published with {rows} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--rows", type=int, default=8, help="rows per partition")
    add_json_option(parser)
    args = parser.parse_args()
    first = datetime.date.fromisoformat(START)
    days = [(first + datetime.timedelta(days=i)).isoformat() for i in range(args.partitions)]
    root = tempfile.mkdtemp(prefix="refiner-bench-backfill-")
    try:
        media = os.path.join(root, "media")
        os.makedirs(media)
        for i in range(16):
            with open(os.path.join(media, f"{i:03d}.bin"), "wb") as f:
                f.write(os.urandom(4 * 1024))
        os.environ.update(
            {MEDIA_ENV: media, ROWS_ENV: str(args.rows), BASE_ENV: os.path.join(root, "out")}
        )
        home = os.path.join(root, "home")
        os.makedirs(home)
        with open(os.path.join(home, "dagster.yaml"), "w") as f:
            f.write("telemetry:\n  enabled: false\n")
        with dg.DagsterInstance.local_temp(tempdir=home) as instance:
            _run(per_day_job, instance, {PARTITION_TAG: "2024-12-31"})  # warm-up
            started = time.perf_counter()
            _run(single_job, instance, {RANGE_START_TAG: days[0], RANGE_END_TAG: days[-1]})
            single_s = time.perf_counter() - started
            started = time.perf_counter()
            for day in days:
                _run(per_day_job, instance, {PARTITION_TAG: day})
            per_day_s = time.perf_counter() - started
        _check_published("single", days, args.rows)
        _check_published("per_day", days, args.rows)
        print(f"{args.partitions} daily partitions x {args.rows} rows, multiprocess executor")
        print(f"single-run backfill (1 run, 4 write steps): {single_s:7.2f} s")
        print(f"one run per partition ({args.partitions} runs):         {per_day_s:7.2f} s")
        print(f"ratio (runs per partition / single run): {per_day_s / single_s:.1f}x")
        write_results(
            args.json,
            [
                Result(
                    workload="dagster",
                    case=f"single-run backfill of {args.partitions} daily fan-out partitions",
                    refiner_s=single_s,
                    baseline=f"{args.partitions} single-partition runs",
                    baseline_s=per_day_s,
                    target="reported",
                    met=None,
                    repeats=1,
                    ratio_kind="speedup",
                )
            ],
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
