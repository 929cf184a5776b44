"""Schedules that refresh a dataset on a cron.

:func:`build_refresh_schedule` targets a dataset job (an asset job over the dataset
and its finalization asset, or any job). Every tick requests one run whose run key
is the scheduled time, so a tick that is evaluated twice still launches one run,
and whose tags say which refresh it is.

On a partitioned job each run also carries the partition key of the tick: with time
partitions, the last partition that is complete at the scheduled time (a daily job
ticking at 03:00 on 2024-05-02 refreshes ``2024-05-01``); with other partitions,
the key ``partition_key_fn`` returns for the tick time. The partitions are read from
the job, or from the code location when the asset job infers them from its assets.

Example:
    >>> import datetime, dagster as dg
    >>> from refiner_dagster.schedules import build_refresh_schedule
    >>> @dg.asset
    ... def dataset() -> None: ...
    >>> job = dg.define_asset_job("dataset_job", selection=[dataset])
    >>> schedule = build_refresh_schedule(job, "0 3 * * *", "Europe/Paris")
    >>> when = datetime.datetime(2024, 5, 1, 3, 0, tzinfo=datetime.UTC)
    >>> request = schedule(dg.build_schedule_context(scheduled_execution_time=when))
    >>> request.run_key
    'dataset_job@2024-05-01T03:00:00+00:00'
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

REFRESH_TIME_TAG = "refiner/refresh_scheduled_for"
REFRESH_SCHEDULE_TAG = "refiner/refresh_schedule"

__all__ = ["REFRESH_SCHEDULE_TAG", "REFRESH_TIME_TAG", "build_refresh_schedule"]


def _job_name(job: Any) -> str:
    name = getattr(job, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(
            "build_refresh_schedule needs a job (dg.define_asset_job(...) or a job "
            f"definition), got {type(job).__name__}"
        )
    return name


def _default_name(job_name: str) -> str:
    """``<job>_refresh``, without saying "refresh" twice for a job named ``<x>_refresh``.

    >>> _default_name("dataset_job"), _default_name("robotics__frames_refresh")
    ('dataset_job_refresh', 'robotics__frames_refresh_schedule')
    """
    suffix = "_schedule" if job_name.endswith("_refresh") else "_refresh"
    return f"{job_name}{suffix}"


def build_refresh_schedule(
    job: Any,
    cron: str,
    timezone: str = "UTC",
    *,
    name: str | None = None,
    run_config: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
    description: str | None = None,
    partition_key_fn: Callable[[datetime.datetime], str] | None = None,
) -> dg.ScheduleDefinition:
    """Build a schedule that runs ``job`` on ``cron`` in ``timezone``.

    Args:
        job: The dataset job: ``dg.define_asset_job(...)`` or a job definition.
        cron: A cron string such as ``"0 3 * * *"`` (03:00 every day).
        timezone: IANA timezone the cron is read in, e.g. ``"Europe/Paris"``.
        name: Schedule name; by default ``<job name>_refresh``, or ``<job name>_schedule``
            when the job's name already ends in ``_refresh``.
        run_config: Run config for every run.
        tags: Extra tags on every run.
        default_status: Whether the schedule starts running when the code location loads.
        description: Shown in the UI.
        partition_key_fn: For a job with partitions that are not time windows (static,
            dynamic): the partition key to refresh at a tick time.
    """
    job_name = _job_name(job)
    schedule_name = name or _default_name(job_name)
    if not isinstance(cron, str) or not cron.strip():
        raise ValueError(f"schedule {schedule_name!r}: cron must be a cron string, got {cron!r}")
    known = getattr(job, "partitions_def", None)
    if (
        known is not None
        and partition_key_fn is None
        and not isinstance(known, dg.TimeWindowPartitionsDefinition)
    ):
        _tick_partition(known, None, None, schedule_name)  # raises: which key would a tick run?
    extra_tags = dict(tags or {})
    config = dict(run_config) if run_config is not None else None

    @dg.schedule(
        cron_schedule=cron,
        name=schedule_name,
        execution_timezone=timezone,
        target=job,
        default_status=default_status,
        description=description or f"Refreshes {job_name} on {cron!r} ({timezone}).",
    )
    def refresh(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        try:
            when = context.scheduled_execution_time
        except Exception:  # a context built by hand without a tick time
            when = None
        stamp = when.isoformat() if when is not None else "manual"
        partitions_def = _job_partitions(job, context)
        partition_key = None
        if partitions_def is not None:
            partition_key = _tick_partition(partitions_def, when, partition_key_fn, schedule_name)
        return dg.RunRequest(
            run_key=f"{job_name}@{stamp}",
            run_config=config,
            tags={**extra_tags, REFRESH_TIME_TAG: stamp, REFRESH_SCHEDULE_TAG: schedule_name},
            partition_key=partition_key,
        )

    return refresh


def _job_partitions(job: Any, context: dg.ScheduleEvaluationContext) -> Any:
    """The job's partitions: its own, or those its code location resolved for it."""
    partitions_def = getattr(job, "partitions_def", None)
    if partitions_def is not None:
        return partitions_def
    try:
        repository = context.repository_def
    except Exception:  # a context built by hand without a code location
        return None
    if repository is None or not repository.has_job(job.name):
        return None
    return repository.get_job(job.name).partitions_def


def _tick_partition(
    partitions_def: Any,
    when: datetime.datetime | None,
    partition_key_fn: Callable[[datetime.datetime], str] | None,
    schedule_name: str,
) -> str:
    now = when or datetime.datetime.now(datetime.UTC)
    if partition_key_fn is not None:
        return partition_key_fn(now)
    if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        window = partitions_def.get_prev_partition_window(now)
        keys = partitions_def.get_partition_keys_in_time_window(window) if window else []
        if not keys:
            raise dg.DagsterInvariantViolationError(
                f"schedule {schedule_name!r}: no partition of {partitions_def} is complete at "
                f"{now.isoformat()}"
            )
        return keys[-1]
    raise dg.DagsterInvalidDefinitionError(
        f"schedule {schedule_name!r} targets a job partitioned by {partitions_def}, which is not "
        "by time: pass partition_key_fn=(tick time -> partition key) to build_refresh_schedule"
    )
