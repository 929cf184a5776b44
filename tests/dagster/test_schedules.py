"""The refresh schedule: one run request per tick, keyed by the scheduled time."""

import datetime

import dagster as dg
import pytest

from refiner_dagster.schedules import REFRESH_TIME_TAG, build_refresh_schedule


@dg.asset
def dataset() -> int:
    return 1


@dg.asset
def dataset_final(dataset: int) -> int:
    return dataset + 1


JOB = dg.define_asset_job("dataset_job", selection=[dataset, dataset_final])


def test_tick_produces_run_request() -> None:
    schedule = build_refresh_schedule(JOB, "0 3 * * *", "Europe/Paris", tags={"team": "data"})
    assert schedule.name == "dataset_job_refresh"
    assert schedule.cron_schedule == "0 3 * * *"
    assert schedule.execution_timezone == "Europe/Paris"
    assert schedule.job_name == "dataset_job"

    when = datetime.datetime(2024, 5, 1, 3, 0, tzinfo=datetime.UTC)
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when)
        request = schedule(context)
    assert isinstance(request, dg.RunRequest)
    assert request.run_key == "dataset_job@2024-05-01T03:00:00+00:00"
    assert request.tags[REFRESH_TIME_TAG] == "2024-05-01T03:00:00+00:00"
    assert request.tags["team"] == "data"

    # Another tick is another run; the same tick is the same run key.
    later = dg.build_schedule_context(scheduled_execution_time=when + datetime.timedelta(days=1))
    assert schedule(later).run_key != request.run_key
    assert schedule(dg.build_schedule_context(scheduled_execution_time=when)).run_key == (
        request.run_key
    )


def test_schedule_targets_the_job_and_runs_it() -> None:
    schedule = build_refresh_schedule(JOB, "*/15 * * * *", "UTC", name="refresh_every_15m")
    defs = dg.Definitions(assets=[dataset, dataset_final], jobs=[JOB], schedules=[schedule])
    resolved = defs.resolve_schedule_def("refresh_every_15m")
    assert resolved.job_name == "dataset_job"
    assert resolved.default_status == dg.DefaultScheduleStatus.STOPPED

    # The request launches as-is on the job the schedule targets.
    request = schedule(dg.build_schedule_context())
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("dataset_job").execute_in_process(
            instance=instance, tags=request.tags, run_config=request.run_config or {}
        )
        assert result.success
        assert result.output_for_node("dataset_final") == 2
        run = instance.get_run_by_id(result.run_id)
        assert run.tags[REFRESH_TIME_TAG] == "manual"


def test_invalid_arguments() -> None:
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="cron"):
        build_refresh_schedule(JOB, "every day", "UTC")
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="timezone"):
        build_refresh_schedule(JOB, "0 3 * * *", "Mars/Olympus")
    with pytest.raises(TypeError, match="needs a job"):
        build_refresh_schedule("dataset_job", "0 3 * * *", "UTC")


DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01")


@dg.asset(partitions_def=DAILY)
def daily_dataset(context: dg.AssetExecutionContext) -> str:
    return context.partition_key


DAILY_JOB = dg.define_asset_job("daily_job", selection=[daily_dataset])


def test_partitioned_job_gets_the_ticks_partition() -> None:
    schedule = build_refresh_schedule(DAILY_JOB, "0 3 * * *", "UTC")
    defs = dg.Definitions(assets=[daily_dataset], jobs=[DAILY_JOB], schedules=[schedule])
    when = datetime.datetime(2024, 5, 2, 3, 0, tzinfo=datetime.UTC)
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=when,
            repository_def=defs.get_repository_def(),
        )
        request = schedule(context)
        assert request.partition_key == "2024-05-01"  # the last complete day at the tick
        result = defs.resolve_job_def("daily_job").execute_in_process(
            instance=instance, partition_key=request.partition_key, tags=request.tags
        )
        assert result.success
        assert result.output_for_node("daily_dataset") == "2024-05-01"

    # partitions that are not time windows need to be told which key a tick refreshes
    static = dg.StaticPartitionsDefinition(["left", "right"])
    static_job = dg.define_asset_job("static_job", selection=[dataset], partitions_def=static)
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="partition_key_fn"):
        build_refresh_schedule(static_job, "0 3 * * *", "UTC")
    chosen = build_refresh_schedule(
        static_job, "0 3 * * *", "UTC", partition_key_fn=lambda t: "left" if t.day % 2 else "right"
    )
    assert chosen(dg.build_schedule_context(scheduled_execution_time=when)).partition_key == "right"


def test_a_job_named_refresh_gets_a_schedule_not_named_refresh_twice() -> None:
    job = dg.define_asset_job("robotics__frames_refresh", selection=[dataset])
    schedule = build_refresh_schedule(job, "0 4 * * *")
    assert schedule.name == "robotics__frames_refresh_schedule"
    assert build_refresh_schedule(job, "0 4 * * *", name="nightly").name == "nightly"
