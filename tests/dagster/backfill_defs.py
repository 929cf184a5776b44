"""A daily-partitioned fan-out dataset with a single-run backfill policy, for the CLI.

Loaded by ``dagster asset materialize -m tests.dagster.backfill_defs``; what differs per
test comes from the environment:

- ``REFINER_BACKFILL_MEDIA``: folder of the source media, ``<day>/frame_<i>.bin``.
- ``REFINER_BACKFILL_BASE``: base_url of the refiner IO manager.
"""

from __future__ import annotations

import os

import dagster as dg

import refiner_core as mdr
import refiner_dagster as rd

MEDIA_ENV = "REFINER_BACKFILL_MEDIA"
BASE_ENV = "REFINER_BACKFILL_BASE"
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
ROWS_PER_DAY = 3

daily = dg.DailyPartitionsDefinition(start_date=DAYS[0], end_date="2024-01-04")


def media_bytes(day: str, i: int) -> bytes:
    return f"{day}/{i}:".encode() * (5 + i)


def days_pipeline(context: dg.OpExecutionContext) -> mdr.Pipeline:
    """One row (and one shard) per frame of the partition's day."""
    day = context.partition_key
    window = context.partition_time_window
    media = os.environ[MEDIA_ENV]
    items = [
        {"day": day, "start": window.start.isoformat(), "i": i, "image": f"{media}/{day}/{i}.bin"}
        for i in range(ROWS_PER_DAY)
    ]
    return mdr.from_items(items, items_per_shard=1, dtypes={"image": mdr.datatype.image_path()})


# 9 shards in 4 write steps (3, 2, 2, 2): step 2 holds shards of two days
days = rd.build_dataset_asset(
    days_pipeline,
    name="days",
    partitions_def=daily,
    backfill_policy=dg.BackfillPolicy.single_run(),
    max_tasks=4,
    max_missing_fraction=0.0,
)


def refiner_resource() -> rd.RefinerBlobIOManager:
    return rd.RefinerBlobIOManager(
        base_url=os.environ[BASE_ENV], target_bytes=64, missing_policy="set_null"
    )


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(assets=[days], resources={"refiner": refiner_resource()})
