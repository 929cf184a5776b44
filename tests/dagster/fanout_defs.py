"""Definitions shared by the fan-out dataset tests, importable by every step process.

Each step (in-process, a multiprocess child, a dask worker) rebuilds the pipeline
from ``frames_pipeline``; what differs per test comes from environment variables
set before the steps start:

- ``REFINER_FANOUT_MEDIA``: folder or ``s3://`` prefix of the source media.
- ``REFINER_FANOUT_BASE``: base_url of the refiner IO manager.
- ``REFINER_FANOUT_LOG``: a folder where every processed row leaves a file
  ``<run>-<i>`` (what a run really wrote).
- ``REFINER_FANOUT_FAULT``: ``exit:<i>`` (the process dies at row ``i`` once),
  ``raise:<i>`` (row ``i`` raises once) or ``stall:<i>`` (row ``i`` waits, once, for the
  test to kill the process); the first time leaves a marker in the log folder (for
  ``exit``, listing the files under the base folder at the moment of death).
"""

from __future__ import annotations

import os
import time
from typing import Any

import dagster as dg

import refiner_core as mdr
import refiner_dagster as rd

NUM_ROWS = 12
ROWS_PER_SHARD = 2
MEDIA_ENV = "REFINER_FANOUT_MEDIA"
BASE_ENV = "REFINER_FANOUT_BASE"
LOG_ENV = "REFINER_FANOUT_LOG"
FAULT_ENV = "REFINER_FANOUT_FAULT"
S3_ENDPOINT_ENV = "REFINER_FANOUT_S3_ENDPOINT"


def media_bytes(i: int) -> bytes:
    return bytes((i * 31 + j) % 256 for j in range(40 + 9 * i))


def media_url(i: int) -> str:
    return f"{os.environ[MEDIA_ENV].rstrip('/')}/frame_{i:03d}.bin"


def _log_row(i: int) -> None:
    folder = os.environ.get(LOG_ENV)
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}-{i:03d}-{os.urandom(4).hex()}"), "w"):
            pass


def _fault(i: int) -> None:
    fault = os.environ.get(FAULT_ENV, "")
    if not fault:
        return
    kind, _, at = fault.partition(":")
    marker = os.path.join(os.environ[LOG_ENV], f"fault-{kind}-{at}")
    if int(at) != i or os.path.exists(marker):
        return
    with open(marker, "w") as f:
        if kind == "exit":  # what the dying attempt has left on storage so far
            for root, _, names in os.walk(os.environ[BASE_ENV]):
                f.writelines(os.path.join(root, n) + "\n" for n in names)
    if kind == "exit":
        os._exit(17)  # the step's process dies mid-shard, no cleanup at all
    if kind == "stall":
        time.sleep(600)  # until the test kills the process
    raise RuntimeError(f"injected failure at row {i}")


def frames_pipeline(context: Any) -> mdr.Pipeline:
    """12 rows in 6 shards; a lambda ``map``, a local function and a closure ``factory=``."""
    partition = context.partition_key if context.has_partition_key else ""
    offset = 100 if partition == "b" else 0
    items = [{"i": i, "part": partition, "image": media_url(i), "pid": 0} for i in range(NUM_ROWS)]

    def tag(row: mdr.Row) -> dict[str, Any]:  # a local function
        _log_row(row.i)
        _fault(row.i)
        return {"tag": f"{row.part}-{row.i + offset}"}

    def make_scaler():  # a closure factory
        factor = 3

        def scale(rows: list[mdr.Row]) -> list[mdr.Row]:
            return [r.update(scaled=r.i * factor) for r in rows]

        return scale

    return (
        mdr.from_items(
            items, items_per_shard=ROWS_PER_SHARD, dtypes={"image": mdr.datatype.image_path()}
        )
        .with_max_block_rows(1)
        .map(lambda row: {"pid": os.getpid()})
        .map(tag)
        .batch_map(factory=make_scaler, batch_size=1)
    )


def rows_of(version: rd.DatasetVersion) -> list[tuple[Any, ...]]:
    """Every row with the bytes its blob reference points at (pid and paths left out)."""
    table = rd.tables.open_version(version)
    rows = sorted(table.iter_rows(), key=lambda r: r.i)
    options = version.storage_options or None
    return [
        (r.i, r.part, r.tag, r.scaled, mdr.read_blob(r.image, storage_options=options))
        for r in rows
    ]


def expected_rows(partition: str = "") -> list[tuple[Any, ...]]:
    offset = 100 if partition == "b" else 0
    return [
        (i, partition, f"{partition}-{i + offset}", 3 * i, media_bytes(i)) for i in range(NUM_ROWS)
    ]


def published(name: str, partition: str | None = None) -> rd.DatasetVersion:
    version = refiner_resource().storage().current([name], partition)
    assert version is not None, f"{name} {partition} is not published"
    return version


def refiner_resource() -> rd.RefinerBlobIOManager:
    """The refiner IO manager on BASE_ENV; with an S3 endpoint set, tables and/or media on S3."""
    s3 = s3_resource() if os.environ.get(S3_ENDPOINT_ENV) else None
    return rd.RefinerBlobIOManager(base_url=os.environ[BASE_ENV], target_bytes=150, s3=s3)


def s3_resource():
    from dagster_aws.s3 import S3Resource

    from tests.s3_server import DUMMY_KEY, DUMMY_SECRET, REGION

    return S3Resource(
        endpoint_url=os.environ[S3_ENDPOINT_ENV],
        aws_access_key_id=DUMMY_KEY,
        aws_secret_access_key=DUMMY_SECRET,
        region_name=REGION,
    )


frames = rd.build_dataset_asset(
    frames_pipeline, name="frames", max_tasks=3, retry_policy=dg.RetryPolicy(max_retries=1)
)
frames_once = rd.build_dataset_asset(frames_pipeline, name="frames_once", max_tasks=3)
frames_static = rd.build_dataset_asset(frames_pipeline, name="frames_static", static_tasks=3)

# spawn: each step process starts from the test's environment of the moment (a forkserver
# started by an earlier test would hand its children that test's environment)
MULTIPROCESS = dg.multiprocess_executor.configured(
    {"max_concurrent": 2, "start_method": {"spawn": {}}}
)


def _defs(asset: dg.AssetsDefinition, executor: Any, step_io: Any = None) -> dg.Definitions:
    resources: dict[str, Any] = {"refiner": refiner_resource()}
    if step_io is not None:
        resources["io_manager"] = step_io
    job = dg.define_asset_job(f"{asset.key.path[-1]}_job", selection=[asset], executor_def=executor)
    return dg.Definitions(assets=[asset], jobs=[job], resources=resources)


def frames_multiprocess_job() -> dg.JobDefinition:
    return _defs(frames, MULTIPROCESS).resolve_job_def("frames_job")


def frames_once_job() -> dg.JobDefinition:
    return _defs(frames_once, MULTIPROCESS).resolve_job_def("frames_once_job")


def frames_once_in_process_job() -> dg.JobDefinition:
    """Every step in the run worker's own process (killing it stops the whole run)."""
    return _defs(frames_once, dg.in_process_executor).resolve_job_def("frames_once_job")


def frames_dask_job() -> dg.JobDefinition:
    from dagster_aws.s3 import S3PickleIOManager
    from dagster_dask import dask_executor

    bucket = os.environ[BASE_ENV].removeprefix("s3://").split("/", 1)[0]
    step_io = S3PickleIOManager(s3_resource=s3_resource(), s3_bucket=bucket, s3_prefix="steps")
    return _defs(frames_static, dask_executor, step_io).resolve_job_def("frames_static_job")


# three daily partitions, written by static write steps (what dask runs) or mapped ones
DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
frames_daily = rd.build_dataset_asset(
    frames_pipeline, name="frames_daily", partitions_def=DAILY, static_tasks=3
)
frames_mapped = rd.build_dataset_asset(frames_pipeline, name="frames_mapped", max_tasks=3)


def _dask_job(asset: dg.AssetsDefinition, executor: Any) -> dg.JobDefinition:
    from dagster_aws.s3 import S3PickleIOManager

    bucket = os.environ[BASE_ENV].removeprefix("s3://").split("/", 1)[0]
    step_io = S3PickleIOManager(s3_resource=s3_resource(), s3_bucket=bucket, s3_prefix="steps")
    return _defs(asset, executor, step_io).resolve_job_def(f"{asset.key.path[-1]}_job")


def frames_daily_dask_job() -> dg.JobDefinition:
    from refiner_dagster.dask_executor import dask_executor

    return _dask_job(frames_daily, dask_executor)


def frames_daily_stock_dask_job() -> dg.JobDefinition:
    from dagster_dask import dask_executor

    return _dask_job(frames_daily, dask_executor)


def frames_mapped_dask_job() -> dg.JobDefinition:
    from dagster_dask import dask_executor

    return _dask_job(frames_mapped, dask_executor)
